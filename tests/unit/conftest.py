"""Fixtures shared by the unit tests."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


def load_file(name: str, path: Path) -> ModuleType:
    """The module in ``path``, imported as ``name``.

    ``tools/`` and ``build_backend/`` are not packages, and ``make test-compiled`` keeps the
    source tree off ``sys.path``, so their modules are loaded from their files.
    """
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def check_wheels() -> ModuleType:
    """``tools/check_wheels.py`` (the release-wheel check), loaded from the source tree."""
    return load_file("check_wheels", ROOT / "tools/check_wheels.py")


@pytest.fixture(scope="session")
def check_release() -> ModuleType:
    """``tools/check_release.py`` (the release workflow's promise)."""
    return load_file("check_release", ROOT / "tools/check_release.py")


@pytest.fixture(scope="session")
def pythons() -> ModuleType:
    """``tools/pythons.py`` (which CPythons the wheels are built and tested for)."""
    return load_file("pythons", ROOT / "tools/pythons.py")


@pytest.fixture(scope="session")
def build_backend() -> ModuleType:
    """``build_backend/aiokprod_build.py`` (the build backend; it needs setuptools)."""
    pytest.importorskip("setuptools", minversion="77", reason="the backend wraps setuptools'")
    return load_file("aiokprod_build", ROOT / "build_backend/aiokprod_build.py")


@pytest.fixture(scope="session")
def wheel_guard() -> ModuleType:
    """``tests/conftest.py``, whose guard refuses a compiled-build run of the wrong files."""
    return load_file("tests_conftest", ROOT / "tests/conftest.py")
