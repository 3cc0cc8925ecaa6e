"""aiokprod's build backend: setuptools', plus what the compiled build needs when asked for it.

``pyproject.toml`` names this module as the build backend (PEP 517, ``backend-path``). It is
setuptools' backend with one change: when ``AIOKPROD_MYPYC=1`` is set, building a wheel
also requires the compiler (mypy, which carries mypyc, at the version below) and aiokprod's
runtime dependencies (mypyc type-checks the package against them). So an isolated build
from the sdist works either way (docs/compiled.md, "Building it yourself")::

    pip wheel aiokprod-0.1.0.tar.gz                    # the pure-Python wheel
    AIOKPROD_MYPYC=1 pip wheel aiokprod-0.1.0.tar.gz   # the compiled wheel for this Python

and a pure build never downloads mypy. ``setup.py`` decides what is compiled. An editable
install also gets real copies of the top-level modules PySpark discovers
(:data:`DISCOVERED_MODULES`).
"""

from __future__ import annotations

import base64
import hashlib
import os
import tomllib
import warnings
import zipfile
from pathlib import Path

from setuptools import build_meta as _setuptools
from setuptools.build_meta import (
    build_sdist,
    build_wheel,
    get_requires_for_build_editable,
    get_requires_for_build_sdist,
    prepare_metadata_for_build_editable,
    prepare_metadata_for_build_wheel,
)

__all__ = [
    "build_editable",
    "build_sdist",
    "build_wheel",
    "get_requires_for_build_editable",
    "get_requires_for_build_sdist",
    "get_requires_for_build_wheel",
    "prepare_metadata_for_build_editable",
    "prepare_metadata_for_build_wheel",
]

#: The compiler of the compiled build, pinned: the C code of a release depends on it. Raise
#: it by hand; `make wheels` and `make test-compiled` then build and test with the new one.
MYPYC_REQUIRES = ("mypy==2.4.1",)

#: The start of setuptools' note on every editable install (silenced: see build_editable).
EDITABLE_NOTE = r"\s*Editable installation\."

#: Top-level modules an editable install carries as files, not through setuptools' import
#: finder: PySpark discovers data sources with ``pkgutil.iter_modules()``, which lists files
#: on ``sys.path`` and not what a finder maps. Each only imports from the package, so the
#: copy never goes stale with the source tree.
DISCOVERED_MODULES = ("pyspark_aiokprod.py",)

ConfigSettings = dict[str, str | list[str] | None] | None


def compile_requested() -> bool:
    """Whether this build compiles (``AIOKPROD_MYPYC=1``, as ``setup.py`` reads it)."""
    return os.environ.get("AIOKPROD_MYPYC") == "1"


def compile_requires(pyproject: Path = Path("pyproject.toml")) -> list[str]:
    """What a compiled build needs besides setuptools: the compiler and the runtime deps."""
    project = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
    return [*MYPYC_REQUIRES, *project["dependencies"]]


def get_requires_for_build_wheel(config_settings: ConfigSettings = None) -> list[str]:
    """Setuptools' requirements, and the compiler's when ``AIOKPROD_MYPYC=1`` is set."""
    if not compile_requested():
        requires: list[str] = _setuptools.get_requires_for_build_wheel(config_settings)
        return requires
    # setuptools answers by running setup.py, which with AIOKPROD_MYPYC=1 would import mypyc:
    # not installed yet, that is what this answer asks for. Asked for the pure build instead.
    os.environ.pop("AIOKPROD_MYPYC")
    try:
        requires = _setuptools.get_requires_for_build_wheel(config_settings)
    finally:
        os.environ["AIOKPROD_MYPYC"] = "1"
    return requires + compile_requires()


def build_editable(
    wheel_directory: str,
    config_settings: ConfigSettings = None,
    metadata_directory: str | None = None,
) -> str:
    """An editable install, always pure Python (refused when asked to compile), quietly.

    Compiled in place, the extension modules would land in the source tree beside the
    ``.py`` files and shadow every later edit of them.
    """
    if compile_requested():
        raise RuntimeError(
            "AIOKPROD_MYPYC=1 builds wheels; an editable install is always pure Python "
            "(docs/compiled.md): unset AIOKPROD_MYPYC, or install a wheel"
        )
    with warnings.catch_warnings():
        # setuptools' "Editable installation." note warns that a folder named like the
        # package in the working folder may shadow it; here that folder is the package
        # itself. pip shows it as a BuildBackendWarning on every `make` that installs.
        warnings.filterwarnings("ignore", message=EDITABLE_NOTE)
        result: str = _setuptools.build_editable(
            wheel_directory, config_settings, metadata_directory
        )
    add_to_wheel(Path(wheel_directory) / result, [Path(m) for m in DISCOVERED_MODULES])
    return result


def add_to_wheel(wheel: Path, files: list[Path]) -> None:
    """Put ``files`` at the root of ``wheel``, each with its line in the wheel's RECORD."""
    with zipfile.ZipFile(wheel) as old:
        members = [(info, old.read(info)) for info in old.infolist()]
    added = []
    for path in files:
        data = path.read_bytes()
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
        added.append((path.name, data, f"{path.name},sha256={digest.decode()},{len(data)}\n"))
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as new:
        for name, data, _ in added:
            new.writestr(name, data)
        for info, data in members:
            if info.filename.endswith(".dist-info/RECORD"):
                data = "".join(line for _, _, line in added).encode() + data
            new.writestr(info, data)
