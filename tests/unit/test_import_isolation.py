"""Imports match the layers at run time, checked in a fresh interpreter for each case.

tests/unit/test_layering.py reads the import statements; this test imports the modules and
looks at what ended up in ``sys.modules``, which also catches imports made by a package's
``__init__`` (aiokprod's public names are lazy, PEP 562) or by a third-party library.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "aiokprod"
#: What a sans-IO protocol module must not load, directly or through anything it imports.
FORBIDDEN_FOR_PROTOCOL = (
    "asyncio",
    "anyio",
    "ssl",
    "aiokprod.config",
    "aiokprod.net",
    "aiokprod.internals",
    "aiokprod.producer",
)
#: The option table sits below net/ and internals/, and needs no event loop.
FORBIDDEN_FOR_CONFIG = (
    "asyncio",
    "anyio",
    "aiokprod.net",
    "aiokprod.internals",
    "aiokprod.producer",
)


def protocol_modules() -> list[str]:
    names = []
    for path in sorted((PACKAGE / "protocol").rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        names.append(".".join(parts))
    return names


def loaded_after(statement: str) -> set[str]:
    """The modules in sys.modules after ``statement`` runs in a new interpreter."""
    code = f"import json, sys\n{statement}\nprint(json.dumps(sorted(sys.modules)))"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    return set(json.loads(result.stdout.splitlines()[-1]))


def forbidden_in(loaded: set[str], forbidden: tuple[str, ...]) -> list[str]:
    return sorted(
        name for name in loaded for bad in forbidden if name == bad or name.startswith(bad + ".")
    )


def test_there_are_protocol_modules_to_check() -> None:
    # Guards the test itself: a moved package would make the checks below vacuous.
    modules = protocol_modules()
    assert "aiokprod.protocol.records" in modules
    assert "aiokprod.protocol.compression" in modules
    assert len(modules) >= 10


@pytest.mark.parametrize("module", protocol_modules())
def test_protocol_module_loads_no_io_and_no_higher_layer(module: str) -> None:
    loaded = loaded_after(f"import {module}")
    assert module in loaded
    assert forbidden_in(loaded, FORBIDDEN_FOR_PROTOCOL) == []


def test_all_protocol_modules_together() -> None:
    loaded = loaded_after("\n".join(f"import {m}" for m in protocol_modules()))
    assert forbidden_in(loaded, FORBIDDEN_FOR_PROTOCOL) == []


def test_config_loads_no_event_loop_and_no_higher_layer() -> None:
    loaded = loaded_after("import aiokprod.config")
    assert "aiokprod.config.table" in loaded
    assert forbidden_in(loaded, FORBIDDEN_FOR_CONFIG) == []


def test_the_package_loads_its_public_names_on_first_use() -> None:
    assert "aiokprod.producer" not in loaded_after("import aiokprod")
    loaded = loaded_after("from aiokprod import Producer, RecordMetadata")
    assert {"aiokprod.producer", "aiokprod.types"} <= loaded


def test_every_public_name_resolves() -> None:
    import aiokprod

    for name in aiokprod.__all__:
        assert getattr(aiokprod, name) is not None, name
    assert set(aiokprod.__all__) <= set(dir(aiokprod))
    with pytest.raises(AttributeError, match="no_such_name"):
        _ = aiokprod.no_such_name  # type: ignore[attr-defined]
