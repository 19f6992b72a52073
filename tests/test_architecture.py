"""The package boundaries of ARCHITECTURE.md, read from every module's imports with ``ast``
(imports inside functions included).

    contracts    imports nothing of the project
    broker       contracts (and itself)
    spark_jobs   contracts
    expectations contracts, spark_jobs
    pipeline     contracts, spark_jobs, expectations
    dags         contracts, spark_jobs, expectations, pipeline
    tools        anything (the demo, benchmarks, local cluster, embedded S3 server)

No product package imports ``tools`` or ``tests``. ``KNOWN_VIOLATIONS`` lists the imports that
break these rules (none); the test fails on any violation outside it and on any entry of it
that is no longer a violation, so the list only shrinks."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

PRODUCT = ("contracts", "broker", "spark_jobs", "expectations", "pipeline", "dags")
PROJECT = (*PRODUCT, "tools", "tests")
# pipeline/: the audit -> suites -> report -> publish sequence the CLI and the DAGs share
ALLOWED: dict[str, set[str]] = {
    "contracts": {"contracts"},
    "broker": {"contracts", "broker"},
    "spark_jobs": {"contracts", "spark_jobs"},
    "expectations": {"contracts", "spark_jobs", "expectations"},
    "pipeline": {"contracts", "spark_jobs", "expectations", "pipeline"},
    "dags": {"contracts", "spark_jobs", "expectations", "pipeline", "dags"},
    "tools": set(PROJECT) - {"tests"},
}

# (importing module, imported module as written): imports that break the rules; empty since
# contracts/ owns the record, archive layout, object store and errors and pipeline/ the audit
# sequence, and it must stay empty
KNOWN_VIOLATIONS: set[tuple[str, str]] = set()


def module_name(path: Path, root: Path = REPO) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported_names(path: Path, root: Path = REPO) -> set[str]:
    """Every module ``path`` imports, absolute, as written (relative imports resolved)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = module_name(path, root).split(".")
    if path.name != "__init__.py":
        package.pop()
    siblings = {p.stem for p in path.parent.glob("*.py")}
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                names.add(".".join([*base, *([node.module] if node.module else [])]))
            else:
                names.add(node.module or "")
    if path.parent.name == "dags":  # DAG files import their siblings from the DAG folder
        names = {f"dags.{n}" if n.split(".")[0] in siblings else n for n in names}
    return names


def product_modules() -> list[Path]:
    return sorted(
        p
        for top in (*PRODUCT, "tools")
        for p in (REPO / top).rglob("*.py")
        if "__pycache__" not in p.parts
    )


def violations() -> set[tuple[str, str]]:
    found = set()
    for path in product_modules():
        me = module_name(path)
        allowed = ALLOWED[me.split(".")[0]]
        for name in imported_names(path):
            top = name.split(".")[0]
            if top in PROJECT and top not in allowed:
                found.add((me, name))
    return found


def test_the_scan_sees_every_package() -> None:
    tops = {module_name(p).split(".")[0] for p in product_modules()}
    assert {"broker", "spark_jobs", "expectations", "dags", "tools"} <= tops
    # and it sees imports: the broker's node imports its store
    assert "broker.store.message_store" in imported_names(REPO / "broker" / "node.py")


def test_relative_imports_resolve_to_their_package(tmp_path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    mod = pkg / "mod.py"
    mod.write_text("from . import a\nfrom .b import c\nfrom .. import d\nimport e.f\n")
    assert imported_names(mod, root=tmp_path) == {"pkg", "pkg.b", "", "e.f"}


def test_no_import_crosses_a_boundary() -> None:
    new = violations() - KNOWN_VIOLATIONS
    assert not new, "imports across the package boundaries (ARCHITECTURE.md):\n" + "\n".join(
        f"  {me} imports {name}" for me, name in sorted(new)
    )


def test_the_known_violations_only_shrink() -> None:
    gone = KNOWN_VIOLATIONS - violations()
    assert not gone, "no longer violations; remove them from KNOWN_VIOLATIONS:\n" + "\n".join(
        f"  {me} imports {name}" for me, name in sorted(gone)
    )


def test_no_product_module_imports_tools_or_tests() -> None:
    bad = sorted(
        (module_name(p), name)
        for p in product_modules()
        if module_name(p).split(".")[0] in PRODUCT
        for name in imported_names(p)
        if name.split(".")[0] in ("tools", "tests")
    )
    assert not bad, bad


# -- the broker node's parts are handed in, never fished off the node (issue #14) ----------------

NODE_NAMES = {"node", "self.node", "self._node"}


def node_getattrs(source: str) -> list[tuple[int, str]]:
    """(line, text) of every ``getattr(node, ...)`` / ``getattr(self.node, ...)`` /
    ``getattr(self._node, ...)`` in ``source``: a part that may be missing from the node."""
    found = []
    for n in ast.walk(ast.parse(source)):
        if (
            isinstance(n, ast.Call)
            and isinstance(n.func, ast.Name)
            and n.func.id == "getattr"
            and n.args
            and ast.unparse(n.args[0]) in NODE_NAMES
        ):
            found.append((n.lineno, ast.unparse(n)))
    return found


def test_the_node_getattr_scan_sees_each_form() -> None:
    src = "getattr(node, 'ha', None)\ngetattr(self.node, 'x')\ngetattr(self._node, 'y', 1)\n"
    assert [line for line, _ in node_getattrs(src)] == [1, 2, 3]
    assert node_getattrs("getattr(service, 'handlers', dict)\nnode.ha\n") == []


def test_no_broker_module_fishes_parts_off_the_node() -> None:
    """The node builds its parts once and hands each subsystem what it needs; an optional part
    is an explicit None, so nothing asks whether the node happens to have it."""
    bad = [
        f"{p.relative_to(REPO)}:{line}: {text}"
        for p in sorted((REPO / "broker").rglob("*.py"))
        for line, text in node_getattrs(p.read_text())
    ]
    assert not bad, "\n".join(bad)
