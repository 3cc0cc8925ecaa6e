"""The optional compiled build (setup.py, docs/compiled.md).

With ``AIOKPROD_EXPECT_COMPILED=1`` (``make test-compiled`` sets it) every module setup.py
lists must run compiled; otherwise (``make test``, editable installs) none may.
"""

from __future__ import annotations

import os
from pathlib import Path
from types import ModuleType

import aiokprod.compiled

ROOT = Path(__file__).resolve().parents[2]


def _listed_modules(check_wheels: ModuleType) -> list[str]:
    # The one reader of setup.py's list: the release-wheel check's (tools/check_wheels.py).
    result: list[str] = check_wheels.listed_modules(ROOT / "setup.py")
    return result


def test_the_listed_modules_exist(check_wheels: ModuleType) -> None:
    for name in _listed_modules(check_wheels):
        assert (ROOT / (name.replace(".", "/") + ".py")).is_file(), name


def test_compiled_modules_match_the_build(check_wheels: ModuleType) -> None:
    running = aiokprod.compiled.compiled_modules()
    if os.environ.get("AIOKPROD_EXPECT_COMPILED") == "1":
        assert list(running) == _listed_modules(check_wheels)
        for name in running:
            module = __import__(name, fromlist=["_"])
            assert module.__file__ is not None
            assert not module.__file__.endswith(".py"), module.__file__
    else:
        assert running == ()
        for name in _listed_modules(check_wheels):
            module = __import__(name, fromlist=["_"])
            assert module.__file__ is not None
            assert module.__file__.endswith(".py"), module.__file__
