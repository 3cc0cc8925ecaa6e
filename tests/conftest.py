"""Shared pytest configuration, and the guard of the compiled-wheel runs.

The local Apache Kafka fixtures (``kafka``, ``new_topic``, ...) come from aiokprod's pytest
plugin, which pytest loads through its ``pytest11`` entry point (see pyproject.toml): there is
nothing to list here.

``AIOKPROD_EXPECT_COMPILED=1`` (``make test-compiled``, the release workflow) says the tests
are to run against an installed compiled build; the run is refused before any test if
aiokprod is imported from the source tree beside the tests instead, or runs nothing compiled.
With ``AIOKPROD_EXPECT_WHEEL=path/to.whl`` too, every file of that wheel must be installed
as it is in the wheel: what is tested is that file.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import os
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def pytest_configure(config: pytest.Config) -> None:
    """Refuse a compiled-build run that would test something else (module docstring)."""
    if os.environ.get("AIOKPROD_EXPECT_COMPILED") != "1":
        return
    problem = compiled_install_problem(os.environ.get("AIOKPROD_EXPECT_WHEEL") or None)
    if problem:
        raise pytest.UsageError(f"AIOKPROD_EXPECT_COMPILED=1, but {problem}")


def compiled_install_problem(wheel: str | None, source_root: Path = ROOT) -> str | None:
    """Why the imported aiokprod is not the compiled install expected (None: it is)."""
    import aiokprod
    import aiokprod.compiled

    package = Path(aiokprod.__file__).resolve().parent
    if package == (source_root / "aiokprod").resolve():
        return f"aiokprod is imported from the source tree ({package}), not from an install"
    if not aiokprod.compiled.compiled_modules():
        return f"the aiokprod imported from {package} runs no module compiled"
    if wheel is not None:
        return installed_differs(Path(wheel), package.parent)
    return None


def installed_differs(wheel: Path, site: Path) -> str | None:
    """The first file of ``wheel`` not installed in ``site`` as the wheel has it (or None)."""
    with zipfile.ZipFile(wheel) as archive:
        record = next(n for n in archive.namelist() if n.endswith(".dist-info/RECORD"))
        rows = list(csv.reader(io.TextIOWrapper(archive.open(record), encoding="utf-8")))
    for name, digest, *_ in rows:
        if not digest or ".dist-info/" in name:
            continue  # pip writes its own RECORD, INSTALLER, ...
        algorithm, _, expected = digest.partition("=")
        installed = site / name
        if not installed.is_file():
            return f"{name} of {wheel.name} is not installed in {site}"
        actual = hashlib.new(algorithm, installed.read_bytes()).digest()
        if base64.urlsafe_b64encode(actual).rstrip(b"=").decode() != expected:
            return f"{installed} is not the file in {wheel.name}"
    return None
