"""Which of aiokprod's modules run compiled (the optional mypyc build, docs/compiled.md).

::

    python -c "import aiokprod.compiled as c; print(c.compiled_modules())"

An empty tuple means a pure-Python install (the default, and every editable install).
"""

from __future__ import annotations

import importlib.machinery
from pathlib import Path

__all__ = ["compiled_modules"]


def compiled_modules() -> tuple[str, ...]:
    """The dotted names of aiokprod's modules installed as extension modules, sorted.

    Python imports an extension module in preference to the ``.py`` file of the same name
    in the same folder, so these are the modules that run compiled.
    """
    root = Path(__file__).parent
    # Longest first: ".cpython-311-x86_64-linux-gnu.so" before the bare ".so".
    suffixes = sorted(importlib.machinery.EXTENSION_SUFFIXES, key=len, reverse=True)
    names: set[str] = set()
    for path in root.rglob("*"):
        for suffix in suffixes:
            if path.name.endswith(suffix):
                parts = path.relative_to(root.parent).parts
                names.add(".".join((*parts[:-1], path.name[: -len(suffix)])))
                break
    return tuple(sorted(names))
