"""Fixtures shared by the unit tests."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def check_wheels() -> ModuleType:
    """``tools/check_wheels.py`` (the release-wheel check), loaded from the source tree.

    ``tools/`` is not a package and ``make test-compiled`` keeps the source tree off
    ``sys.path``, so it is loaded from its file.
    """
    spec = importlib.util.spec_from_file_location("check_wheels", ROOT / "tools/check_wheels.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["check_wheels"] = module
    spec.loader.exec_module(module)
    return module
