"""docs/design.md's file map names every module of the client (issue 12: docs true to the code)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "aiokprod"
# Described as a whole by one row each: the harness and the message definitions.
GROUPED = ("testing/", "protocol/messages/")


def test_every_module_is_in_the_file_map() -> None:
    doc = (ROOT / "docs" / "design.md").read_text()
    missing = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel.endswith("__init__.py") or rel.startswith(GROUPED):
            continue
        # A row names a module by its path, or a package's row names it by file name.
        package, _, name = rel.rpartition("/")
        named = f"`{rel}`" in doc or (package and f"`{package}/`" in doc and f"`{name}`" in doc)
        if not named:
            missing.append(rel)
    assert missing == [], f"modules missing from docs/design.md's file map: {missing}"
