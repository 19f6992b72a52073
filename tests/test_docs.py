"""The documentation points at things that exist: every relative link between the docs resolves
(to a file, and to a heading when it names an anchor), and every repository path a doc names in
backticks (``broker/store/recovery.py``, ``scripts/demo``, ``docs/audit.md``) exists."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = [
    ROOT / "README.md",
    ROOT / "ARCHITECTURE.md",
    ROOT / "spark_jobs" / "README.md",
    *sorted((ROOT / "docs").glob("*.md")),
]
TOP = (
    "broker",
    "contracts",
    "spark_jobs",
    "expectations",
    "pipeline",
    "dags",
    "tools",
    "tests",
    "scripts",
    "deploy",
    "docs",
)
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
CODE = re.compile(r"`([^`\s]+)`")
PLACEHOLDER = re.compile(r"[{}*<>$|]|\.\.\.|/X|/N\b")


def slug(heading: str) -> str:
    """GitHub's anchor of a heading."""
    s = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return s.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = path.read_text()
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    return {slug(m) for m in re.findall(r"^#+\s+(.*)$", text, flags=re.M)}


def test_links_between_docs_resolve():
    broken = []
    for doc in DOCS:
        for target in LINK.findall(doc.read_text()):
            if re.match(r"^[a-z]+:", target):  # http(s), mailto, file: not ours to check
                continue
            path, _, frag = target.partition("#")
            dest = (doc.parent / path).resolve() if path else doc
            if not dest.exists():
                broken.append(f"{doc.relative_to(ROOT)}: {target} (no such file)")
            elif frag and dest.suffix == ".md" and frag not in anchors(dest):
                broken.append(f"{doc.relative_to(ROOT)}: {target} (no such heading)")
    assert broken == []


# a bare source file name; runtime files (verdict.json, plain_acl.yml) are not the repo's
FILE = re.compile(r"^[\w.-]+\.(py|md)$")


def named_paths(text: str) -> set[str]:
    """Repository paths (``top/...``) and file names (``x.py``) named in backticks."""
    out = set()
    for token in CODE.findall(text):
        token = token.rstrip(".,;:)").split("::", 1)[0]
        if PLACEHOLDER.search(token) or token.startswith(("http", "s3:", "file:")):
            continue
        if "/" in token and token.split("/", 1)[0] in TOP:
            out.add(token.split(":", 1)[0])
        elif FILE.match(token):
            out.add(token)
    return out


def _exists(doc: Path, name: str, tracked: set[str]) -> bool:
    """A path from the repository's root or the doc's folder; a bare name in a package's own
    README must be that package's module, elsewhere any file of the repository."""
    if "/" in name:
        return (ROOT / name).exists() or (doc.parent / name).exists()
    if doc.parent not in (ROOT, ROOT / "docs"):
        return (doc.parent / name).exists()
    return name in tracked


def test_files_the_docs_name_exist():
    tracked = {
        p.name
        for top in (*TOP, "")
        for p in (ROOT / top).glob("*" if not top else "**/*")
        if ".venv" not in p.parts and "node_modules" not in p.parts
    }
    missing = []
    for doc in DOCS:
        text = re.sub(r"```.*?```", "", doc.read_text(), flags=re.S)
        for name in sorted(named_paths(text)):
            if not _exists(doc, name, tracked):
                missing.append(f"{doc.relative_to(ROOT)}: {name}")
    assert missing == []


def test_readme_is_short_and_keeps_the_two_commands():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 200
    for command in ("scripts/demo", "scripts/test"):
        assert f"```sh\n{command}\n```" in text, command
