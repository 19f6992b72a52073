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
that is no longer a violation, so the list only shrinks.

Sizes: no module of the product packages and tools over 400 lines, no function over 80
(``OVERSIZED_MODULES`` / ``OVERSIZED_FUNCTIONS``: today's offenders, only shrinking). Record
names are imported from the module of ``contracts/record/`` that owns them, not the package
(``RECORD_FACADE_USERS``: the files still written against the single module). ``# fmt: skip``
only on data tables (``FMT_SKIP_TABLES``) in ``FMT_SKIP_PACKAGES`` (``FMT_SKIP_PENDING``: folders
still to be laid out by ruff)."""

from __future__ import annotations

import ast
import io
import re
import tokenize
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


# -- sizes (the guide: modules under ~400 lines, functions under ~80) --------------------------

MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 80
SIZED = (*PRODUCT, "tools")

# Known offenders (none today). The test fails on an offender outside them and on an entry that
# no longer offends, so these lists only shrink.
OVERSIZED_MODULES: set[str] = set()
OVERSIZED_FUNCTIONS: set[str] = set()  # "path:Qualified.name"


def sized_modules() -> list[Path]:
    return sorted(
        p for top in SIZED for p in (REPO / top).rglob("*.py") if "__pycache__" not in p.parts
    )


def function_lengths(path: Path) -> dict[str, int]:
    """Lines of every function and method (nested ones too, each on its own), from its
    ``def`` line to its last line, by qualified name."""
    out: dict[str, int] = {}

    def walk(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                name = prefix + child.name
                out[name] = child.end_lineno - child.lineno + 1
                walk(child, name + ".")
            elif isinstance(child, ast.ClassDef):
                walk(child, prefix + child.name + ".")
            else:
                walk(child, prefix)

    walk(ast.parse(path.read_text(), filename=str(path)), "")
    return out


def oversized() -> tuple[set[str], set[str]]:
    modules, functions = set(), set()
    for path in sized_modules():
        rel = path.relative_to(REPO).as_posix()
        if len(path.read_text().splitlines()) > MAX_MODULE_LINES:
            modules.add(rel)
        functions |= {
            f"{rel}:{name}" for name, n in function_lengths(path).items() if n > MAX_FUNCTION_LINES
        }
    return modules, functions


def test_function_lengths_are_measured(tmp_path) -> None:
    mod = tmp_path / "m.py"
    body = "\n".join(f"        x{i} = {i}" for i in range(3))
    mod.write_text(f"class C:\n    def f(self):\n{body}\n\n        def g():\n            pass\n")
    assert function_lengths(mod) == {"C.f": 7, "C.f.g": 2}  # def, 3 lines, blank, g


def test_no_module_or_function_grows_past_the_limits() -> None:
    modules, functions = oversized()
    new = sorted(modules - OVERSIZED_MODULES) + sorted(functions - OVERSIZED_FUNCTIONS)
    assert not new, (
        f"over {MAX_MODULE_LINES} lines (modules) or {MAX_FUNCTION_LINES} (functions): split "
        "along concepts\n" + "\n".join(f"  {x}" for x in new)
    )


def test_the_size_allowlists_only_shrink() -> None:
    modules, functions = oversized()
    gone = sorted(OVERSIZED_MODULES - modules) + sorted(OVERSIZED_FUNCTIONS - functions)
    assert not gone, "within the limits now; remove from the allowlist:\n" + "\n".join(
        f"  {x}" for x in gone
    )


# -- formatting: ``# fmt: skip`` only on data tables --------------------------------------------

# The packages held to it: every product package and tools/
FMT_SKIP_PACKAGES = (*PRODUCT, "tools")

# Folders not held to it yet: folder -> why. The test fails on an entry whose folder has no
# ``# fmt: skip`` left, so the list only shrinks.
FMT_SKIP_PENDING: dict[str, str] = {}

# (file, the table: its assigned name, else the function it is in): reason. The only places
# ruff may not lay out; the test fails on any other ``# fmt: skip`` / ``# fmt: off`` and on
# an entry that no longer has one, so the list only shrinks.
FMT_SKIP_TABLES: dict[tuple[str, str], str] = {
    ("contracts/record/layout.py", "encoded_length"): "record layout: one term per field",
    ("spark_jobs/log_integrity.py", "ISSUE_FIELDS"): "column table: the issue table's columns",
    ("expectations/datadocs.py", "ASSETS"): "asset table: (CDN URL pattern, local path) pairs",
    ("contracts/audit_tables.py", "_RUN_OF_CHECK"): "code table: check status -> run status",
    ("contracts/controller_archive.py", "_CANDIDATE_FIELDS"): "field table: JSON types",
    ("contracts/archive_layout.py", "_MANIFEST_FIELDS"): "field table: JSON types",
    ("contracts/archive_layout.py", "_SNAPSHOT_FIELDS"): "field table: JSON types",
    ("contracts/object_store/interface.py", "_WEB_TYPES"): "code table: suffix -> MIME type",
    ("broker/acl/accounts.py", "_ACCOUNT_KEYS"): "field table: plain_acl.yml account keys",
    ("tools/bench/archive_stats.py", "_T975"): "number table: Student's t by degrees of freedom",
}


def fmt_skips(source: str) -> list[tuple[int, str]]:
    """(line, table) of every ``# fmt: skip`` / ``# fmt: off`` comment (comments only, not
    strings); the table is the name the statement assigns, else the function it is in."""
    marker = re.compile(r"#\s*fmt:\s*(skip|off)\b")
    lines = [
        tok.start[0]
        for tok in tokenize.generate_tokens(io.StringIO(source).readline)
        if tok.type == tokenize.COMMENT and marker.match(tok.string)
    ]
    spans: list[tuple[int, int, str]] = []  # (start, end, label), innermost last

    def walk(node: ast.AST, where: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                name = f"{where}.{child.name}" if where else child.name
                spans.append((child.lineno, child.end_lineno, name))
                walk(child, name)
            elif isinstance(child, ast.Assign | ast.AnnAssign):
                targets = child.targets if isinstance(child, ast.Assign) else [child.target]
                label = ",".join(ast.unparse(t) for t in targets)
                spans.append((child.lineno, child.end_lineno, label))
            elif isinstance(child, ast.stmt):
                walk(child, where)

    walk(ast.parse(source), "")
    out = []
    for line in lines:
        inside = [s for s in spans if s[0] <= line <= s[1]]
        out.append((line, min(inside, key=lambda s: s[1] - s[0])[2] if inside else "<module>"))
    return out


def fmt_skip_sites(pending: bool = False) -> dict[tuple[str, str], list[int]]:
    """The sites in ``FMT_SKIP_PACKAGES`` outside ``FMT_SKIP_PENDING`` (inside it: ``pending``)."""
    sites: dict[tuple[str, str], list[int]] = {}
    for top in FMT_SKIP_PACKAGES:
        for path in sorted((REPO / top).rglob("*.py")):
            if "__pycache__" in path.parts:
                continue
            rel = path.relative_to(REPO).as_posix()
            if any(rel.startswith(f"{d}/") for d in FMT_SKIP_PENDING) != pending:
                continue
            for line, label in fmt_skips(path.read_text()):
                sites.setdefault((rel, label), []).append(line)
    return sites


def test_the_fmt_skip_scan_sees_each_form() -> None:
    source = (
        "T = {1: 2}  # fmt: skip\n"
        "s = '# fmt: skip'\n"
        "def f():\n"
        "    return (\n"
        "        1 + 2\n"
        "    )  # fmt: skip\n"
        "class C:\n"
        "    # fmt: off\n"
        "    x: int = 1\n"
    )
    assert fmt_skips(source) == [(1, "T"), (6, "f"), (8, "C")]


def test_fmt_skip_only_on_data_tables() -> None:
    sites = fmt_skip_sites()
    stray = sorted(
        f"{f}:{sites[f, label][0]} ({label})"
        for f, label in sites
        if (f, label) not in FMT_SKIP_TABLES
    )
    assert not stray, (
        "# fmt: skip outside a data table: let ruff format lay it out (split the function or "
        "module if it grows past the size limits)\n" + "\n".join(f"  {x}" for x in stray)
    )


def test_the_fmt_skip_pending_folders_only_shrink() -> None:
    files = {f for f, _ in fmt_skip_sites(pending=True)}
    done = sorted(d for d in FMT_SKIP_PENDING if not any(f.startswith(f"{d}/") for f in files))
    assert not done, "no # fmt: skip left there; remove from FMT_SKIP_PENDING:\n" + "\n".join(
        f"  {d}" for d in done
    )


def test_the_fmt_skip_tables_only_shrink() -> None:
    gone = sorted(set(FMT_SKIP_TABLES) - set(fmt_skip_sites()))
    assert not gone, "no # fmt: skip there any more; remove from FMT_SKIP_TABLES:\n" + "\n".join(
        f"  {f} ({label})" for f, label in gone
    )


# -- contracts.record: import from the module that owns a name ---------------------------------

# Files still importing the package itself (none: the package re-exports nothing); kept as a
# list so a new one fails here with its name.
RECORD_FACADE_USERS: set[str] = set()


def imports_record_facade(path: Path) -> bool:
    """Whether ``path`` imports ``contracts.record`` itself rather than one of its modules."""
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import) and any(a.name == "contracts.record" for a in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and node.level == 0:
            if node.module == "contracts.record":
                return True
            if node.module == "contracts" and any(a.name == "record" for a in node.names):
                return True
    return False


def test_record_names_come_from_their_owning_module() -> None:
    users = {
        p.relative_to(REPO).as_posix()
        for top in (*SIZED, "tests")
        for p in (REPO / top).rglob("*.py")
        if "__pycache__" not in p.parts and imports_record_facade(p)
    }
    assert users == RECORD_FACADE_USERS, (
        "import from contracts.record.layout / properties / ids / model / builder / reader, "
        f"not the package: new {sorted(users - RECORD_FACADE_USERS)}, "
        f"moved already (remove from the list) {sorted(RECORD_FACADE_USERS - users)}"
    )


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


# -- the store is the bottom layer of the broker (issue #24) ------------------------------------

# what broker.store may import of the project: itself, contracts and the foundation every layer
# stands on (the clock and the loop base, which import nothing else of the broker). RocketMQ's
# store knows nothing of the broker above it: its role and epochs live in it,
# MessageStoreConfig-style.
FOUNDATION = ("broker.clock", "broker.loop_service", "broker.planted_bugs")
STORE_MAY_IMPORT = ("broker.store", "contracts", *FOUNDATION)


def store_escapes() -> list[str]:
    """Every import of a ``broker/store/`` module (function-level and TYPE_CHECKING ones too)
    that leaves ``broker.store`` and ``contracts``."""
    return [
        f"{module_name(p)} imports {name}"
        for p in sorted((REPO / "broker" / "store").rglob("*.py"))
        for name in sorted(imported_names(p))
        if name.split(".")[0] in PROJECT
        and not any(name == a or name.startswith(a + ".") for a in STORE_MAY_IMPORT)
    ]


def test_the_store_imports_nothing_of_the_broker_above_it() -> None:
    bad = store_escapes()
    assert not bad, "broker/store/ imports only broker.store and contracts:\n" + "\n".join(bad)


def test_the_foundation_imports_nothing_else_of_the_broker() -> None:
    for name in FOUNDATION:
        path = REPO / (name.replace(".", "/") + ".py")
        inner = {n for n in imported_names(path) if n.split(".")[0] in PROJECT}
        assert inner <= set(FOUNDATION), f"{name} imports {sorted(inner - set(FOUNDATION))}"


def test_the_store_is_composed_of_parts_not_mixins() -> None:
    """The façade owns its parts (StorePuts, StoreQueries, ConsumeQueueTable); no class of
    broker/store/ is a mixin whose host must set its attributes."""
    mixins = [
        f"{p.relative_to(REPO)}: {n.name}"
        for p in sorted((REPO / "broker" / "store").rglob("*.py"))
        for n in ast.walk(ast.parse(p.read_text()))
        if isinstance(n, ast.ClassDef) and n.name.endswith("Mixin")
    ]
    assert not mixins, mixins
    tree = ast.parse((REPO / "broker" / "store" / "message_store.py").read_text())
    store = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "MessageStore")
    assert not store.bases, [ast.unparse(b) for b in store.bases]


# -- broker/ wiring (issue #24): no module loop, no node held, no probing, one clock ------------

BROKER = REPO / "broker"


def broker_modules() -> list[Path]:
    return sorted(p for p in BROKER.rglob("*.py") if "__pycache__" not in p.parts)


def broker_import_graph() -> dict[str, set[str]]:
    """broker module -> the broker modules it imports, counting imports under ``TYPE_CHECKING``
    and inside functions (``imported_names`` walks the whole tree). ``from broker.x import y``
    where ``y`` is a module counts as importing ``broker.x.y``; a package counts as its
    ``__init__``."""
    mods = {module_name(p) for p in broker_modules()}
    graph: dict[str, set[str]] = {}
    for path in broker_modules():
        me = module_name(path)
        deps: set[str] = set()
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                assert node.level == 0, f"{me}: relative import"  # broker/ imports absolutely
                for alias in node.names:
                    sub = f"{node.module}.{alias.name}"
                    deps.add(sub if sub in mods else str(node.module))
            elif isinstance(node, ast.Import):
                deps.update(alias.name for alias in node.names)
        graph[me] = {d for d in deps if d in mods and d != me}
    return graph


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def test_the_cycle_check_sees_type_checking_and_function_imports() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert import_cycles(graph) == [["a", "b", "c"]]
    assert import_cycles({"a": {"b"}, "b": set()}) == []
    # the real graph carries both kinds of edges
    src = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import x.y\ndef f():\n    import z\n"
    mod = REPO / "tests" / "_cycle_probe_tmp.py"
    try:
        mod.write_text(src)
        assert {"x.y", "z"} <= imported_names(mod)
    finally:
        mod.unlink()


def test_broker_has_no_import_cycle() -> None:
    cycles = import_cycles(broker_import_graph())
    assert not cycles, "broker/ modules importing each other in a loop:\n" + "\n".join(
        "  " + " <-> ".join(c) for c in cycles
    )


# the entry points: nothing else of broker/ imports the node (it builds the parts; no part
# reaches back to it)
NODE_IMPORTERS = {"broker.cli"}


def test_only_the_entry_point_imports_the_node() -> None:
    graph = broker_import_graph()
    importers = {me for me, deps in graph.items() if "broker.node" in deps}
    assert importers <= NODE_IMPORTERS, sorted(importers - NODE_IMPORTERS)


def node_holders(source: str) -> list[tuple[int, str]]:
    """(line, text) of every parameter or attribute named ``node``/``_node``/``broker_node`` or
    annotated ``BrokerNode``: a part holding the whole node instead of its collaborators."""
    names = {"node", "_node", "broker_node", "owner_node"}
    found = []
    for n in ast.walk(ast.parse(source)):
        annotation = ast.unparse(n.annotation) if isinstance(n, ast.arg) and n.annotation else ""
        if isinstance(n, ast.arg) and (
            (n.arg in names and annotation != "str") or "BrokerNode" in annotation
        ):  # a node's name (``node: str``) is not the node
            found.append((n.lineno, f"parameter {n.arg}"))
        elif (
            isinstance(n, ast.Attribute)
            and isinstance(n.ctx, ast.Store)
            and isinstance(n.value, ast.Name)
            and n.value.id == "self"
            and n.attr in names
        ):
            found.append((n.lineno, f"attribute self.{n.attr}"))
        elif isinstance(n, ast.AnnAssign) and "BrokerNode" in ast.unparse(n.annotation):
            found.append((n.lineno, ast.unparse(n)))
    return sorted(found)


def test_the_node_holder_scan_sees_each_form() -> None:
    src = (
        "class A:\n    def __init__(self, node):\n        self.node = node\n"
        "def f(x: BrokerNode): pass\n"
        "class B:\n    owner: BrokerNode\n"
    )
    assert [line for line, _ in node_holders(src)] == [2, 3, 4, 6]
    assert node_holders("def f(store, role):\n    self.store = store\n") == []


def test_no_broker_part_holds_the_node() -> None:
    bad = [
        f"{p.relative_to(REPO)}:{line}: {text}"
        for p in broker_modules()
        for line, text in node_holders(p.read_text())
    ]
    assert not bad, "a part gets the collaborators it uses, never the node:\n" + "\n".join(bad)


# getattr/hasattr in broker/ that are not wiring (a field read by its name from a table of
# names, an optional attribute of a foreign object), each with its reason; ``path:line text``
# would move with every edit, so entries are (path, the call as written)
PROBE_ALLOWED: dict[tuple[str, str], str] = {
    ("broker/live_config.py", "getattr(self.current, name)"): "the live holder reads through",
    ("broker/cli.py", "getattr(logging, str(args.log_level).upper(), logging.INFO)"): (
        "a log level by its name"
    ),
    ("broker/cli.py", "getattr(args, 'func', None)"): "argparse: no subcommand given",
    ("broker/controller/raft.py", "getattr(leader, 'address', None)"): (
        "PySyncObj's leader node object (third-party) may lack an address while it changes"
    ),
    ("broker/config.py", "getattr(exc, 'key', None)"): "a config error may name its key",
    ("broker/runtime_config.py", "getattr(config, fname)"): "config fields by property name",
    ("broker/config_checks.py", "getattr(cfg, fname)"): "config fields by property name",
    ("broker/archive/uploader.py", "getattr(shipper, method)"): (
        "the child process dispatches a method named in its job"
    ),
}


def probes(source: str) -> list[tuple[int, str]]:
    return [
        (n.lineno, ast.unparse(n))
        for n in ast.walk(ast.parse(source))
        if isinstance(n, ast.Call)
        and isinstance(n.func, ast.Name)
        and n.func.id in ("getattr", "hasattr")
    ]


def test_no_broker_module_probes_for_members() -> None:
    """A part's collaborators are typed and always there (an optional one is an explicit None);
    nothing asks an object whether it happens to have a member."""
    bad = []
    for p in broker_modules():
        rel = p.relative_to(REPO).as_posix()
        if rel.startswith("broker/admin/"):
            continue  # the mqadmin CLI (another helper's, issue #24 scope is the node)
        for line, text in probes(p.read_text()):
            if (rel, text) not in PROBE_ALLOWED:
                bad.append(f"{rel}:{line}: {text}")
    assert not bad, "\n".join(bad)


# modules of broker/ that may read the system clock directly: not parts of a node, so no test
# drives them by ticks; everything else takes a Clock (broker/clock.py)
SYSTEM_CLOCK_USERS: dict[str, str] = {
    "broker/clock.py": "the one place that reads clocks or sleeps",
    "broker/client/producer.py": "a client process: bornTimestamp of what it sends",
    "broker/client/consumer.py": "a client process: its rebalance clock",
    "broker/client/uniq_id.py": "a client process: the time in a message id",
    "broker/admin/common.py": "the mqadmin CLI: 'now' for time arguments",
    "broker/archive/cli.py": "the haproof archive CLI: a snapshot's takenAt",
    "broker/archive/retention.py": "the haproof archive prune CLI: retention's 'now'",
}
CLOCK_CALLS = {"time.time", "time.monotonic", "time.time_ns", "time.monotonic_ns", "time.sleep"}


def clock_calls(source: str) -> list[tuple[int, str]]:
    found = []
    for n in ast.walk(ast.parse(source)):
        if isinstance(n, ast.Call):
            name = ast.unparse(n.func)
            if name in CLOCK_CALLS:
                found.append((n.lineno, name))
            elif name == "asyncio.sleep" and not (
                len(n.args) == 1 and isinstance(n.args[0], ast.Constant) and n.args[0].value == 0
            ):  # asyncio.sleep(0) yields to the loop: no time passes
                found.append((n.lineno, ast.unparse(n)))
        elif isinstance(n, ast.Attribute) and ast.unparse(n) in CLOCK_CALLS:
            if not isinstance(getattr(n, "parent", None), ast.Call):
                found.append((n.lineno, ast.unparse(n)))
    return sorted(set(found))


def test_the_clock_scan_sees_each_form() -> None:
    src = "time.time()\ntime.monotonic_ns()\nawait asyncio.sleep(1)\nasyncio.sleep(0)\nf = time.monotonic\n"
    assert [line for line, _ in clock_calls(src)] == [1, 2, 3, 5]


def test_broker_reads_time_only_through_its_clock() -> None:
    """Every part of a node reads time and sleeps through the injected Clock, so a test (and the
    simulation) drives all of a node's loops by ticks."""
    bad = [
        f"{p.relative_to(REPO)}:{line}: {text}"
        for p in broker_modules()
        if p.relative_to(REPO).as_posix() not in SYSTEM_CLOCK_USERS
        for line, text in clock_calls(p.read_text())
    ]
    assert not bad, "use the injected Clock (broker/clock.py):\n" + "\n".join(bad)
