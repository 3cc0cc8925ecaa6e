"""The optional compiled build (setup.py, docs/compiled.md).

With ``AIOKPROD_EXPECT_COMPILED=1`` (``make test-compiled`` sets it) every module setup.py
lists must run compiled; otherwise (``make test``, editable installs) none may.
"""

from __future__ import annotations

import ast
import os
from pathlib import Path

import aiokprod.compiled

ROOT = Path(__file__).resolve().parents[2]


def _listed_modules() -> list[str]:
    tree = ast.parse((ROOT / "setup.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "COMPILED_MODULES" for t in node.targets
        ):
            paths = ast.literal_eval(node.value)
            return sorted(p.removesuffix(".py").replace("/", ".") for p in paths)
    raise AssertionError("setup.py has no COMPILED_MODULES list")


def test_the_listed_modules_exist() -> None:
    for name in _listed_modules():
        assert (ROOT / (name.replace(".", "/") + ".py")).is_file(), name


def test_compiled_modules_match_the_build() -> None:
    running = aiokprod.compiled.compiled_modules()
    if os.environ.get("AIOKPROD_EXPECT_COMPILED") == "1":
        assert list(running) == _listed_modules()
        for name in running:
            module = __import__(name, fromlist=["_"])
            assert module.__file__ is not None
            assert not module.__file__.endswith(".py"), module.__file__
    else:
        assert running == ()
        for name in _listed_modules():
            module = __import__(name, fromlist=["_"])
            assert module.__file__ is not None
            assert module.__file__.endswith(".py"), module.__file__
