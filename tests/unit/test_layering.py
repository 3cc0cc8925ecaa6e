"""The layers import only downwards: protocol < config < net < internals < producer.

See docs/design.md. tests/unit/test_import_isolation.py checks the same at run time.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "aiokprod"
LEAVES = {
    "aiokprod.errors",
    "aiokprod.types",
    "aiokprod.logs",
    "aiokprod.clock",
    "aiokprod.backoff",
    "aiokprod",
}
# layer -> the aiokprod modules (prefixes) it may import besides the leaves
ALLOWED = {
    "aiokprod.protocol": {"aiokprod.protocol"},
    # the option table asks the protocol's codec table about compression levels
    "aiokprod.config": {"aiokprod.protocol", "aiokprod.config"},
    "aiokprod.net": {"aiokprod.protocol", "aiokprod.config", "aiokprod.net"},
    "aiokprod.internals": {
        "aiokprod.protocol",
        "aiokprod.config",
        "aiokprod.net",
        "aiokprod.internals",
    },
}
NO_ASYNC_IN = ("aiokprod.protocol",)


def imports_of(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def layer_of(module: str) -> str | None:
    for layer in ALLOWED:
        if module == layer or module.startswith(layer + "."):
            return layer
    return None


def test_layers_import_only_downwards() -> None:
    violations = []
    for path in PACKAGE.rglob("*.py"):
        module = module_name(path)
        layer = layer_of(module)
        for name in imports_of(path):
            if not name.startswith("aiokprod"):
                continue
            if module in LEAVES - {"aiokprod"} and name not in LEAVES:
                violations.append(f"{module} (a leaf) imports {name}")
            if layer is None or name in LEAVES:
                continue
            if not any(name == p or name.startswith(p + ".") for p in ALLOWED[layer]):
                violations.append(f"{module} imports {name}")
    assert violations == []


def test_protocol_layer_does_no_io() -> None:
    offenders = []
    for path in (PACKAGE / "protocol").rglob("*.py"):
        banned = imports_of(path) & {"asyncio", "anyio", "socket", "ssl", "selectors"}
        if banned:
            offenders.append((module_name(path), sorted(banned)))
    assert offenders == []


def test_leaves_checked_exist() -> None:
    # Guards the test itself: a renamed layer would make the checks above vacuous.
    for layer in ALLOWED:
        assert (PACKAGE / layer.split(".")[1]).is_dir(), layer
