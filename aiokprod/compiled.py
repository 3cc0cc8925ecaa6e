"""Which of aiokprod's modules run compiled (the compiled wheel, docs/compiled.md).

::

    $ aiokprod --version          # or: python -m aiokprod --version
    aiokprod 0.1.0, compiled (mypyc, 16 modules); CPython 3.12.1 on linux-x86_64

    python -c "import aiokprod.compiled as c; print(c.compiled_modules())"

An empty tuple means a pure-Python install (the pure wheel, a build from source without
``AIOKPROD_MYPYC=1``, and every editable install).
"""

from __future__ import annotations

import importlib.machinery
import platform
import sysconfig
from pathlib import Path

from aiokprod import __version__

__all__ = ["compiled_modules", "describe_build"]


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


def describe_build() -> str:
    """One line: the version, whether this install runs compiled, and on what.

    ``aiokprod --version`` prints it, and the benchmarks and ``make demo`` say with it
    which build they ran.
    """
    compiled = compiled_modules()
    build = f"compiled (mypyc, {len(compiled)} modules)" if compiled else "pure Python"
    python = f"{platform.python_implementation()} {platform.python_version()}"
    return f"aiokprod {__version__}, {build}; {python} on {sysconfig.get_platform()}"
