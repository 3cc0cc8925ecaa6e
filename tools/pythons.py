"""The CPythons >= 3.11 on this machine: ``python tools/pythons.py`` prints one path a line.

``$PYTHONS`` (space-separated interpreters; any older than 3.11 are left out) if set, else
the newest patch release of each 3.X (X >= 11) under ``$PYENV_ROOT/versions`` (default
``~/.pyenv``); ``$SKIP_PYTHONS`` ("3.11 3.12") leaves minor versions out. ``make
test-pythons`` (.ci/test-pythons), ``make wheels`` (tools/build_wheels.py) and ``make
test-compiled`` (tools/test_wheels.py) take their Pythons from here. A machine without pyenv
has none (not an error: the caller decides; the wheel tools then use their own Python).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

OLDEST = (3, 11)
_RELEASE = re.compile(r"(\d+)\.(\d+)\.(\d+)")


def minor_version(python: Path) -> tuple[int, int]:
    """The (major, minor) version of an interpreter, asked from it."""
    out = subprocess.run(
        [str(python), "-c", "import sys; print(*sys.version_info[:2])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return int(out[0]), int(out[1])


def pyenv_pythons(root: Path) -> list[Path]:
    """The newest patch release of each CPython 3.X >= 3.11 pyenv has, oldest minor first.

    Only plain releases (``3.12.1``): free-threaded (``3.13.0t``), development and other
    builds are left out.
    """
    newest: dict[tuple[int, int], tuple[tuple[int, int, int], Path]] = {}
    for folder in (root / "versions").glob("3.*"):
        match = _RELEASE.fullmatch(folder.name)
        python = folder / "bin" / "python"
        if not match or not python.is_file():
            continue
        version = (int(match[1]), int(match[2]), int(match[3]))
        minor = version[:2]
        if minor >= OLDEST and (minor not in newest or version > newest[minor][0]):
            newest[minor] = (version, python)
    return [python for _, python in sorted(newest.values())]


def find_pythons(env: Mapping[str, str] = os.environ) -> list[Path]:
    """The interpreters to build or test with (module docstring), oldest minor first."""
    if env.get("PYTHONS", "").strip():
        pythons = [Path(p) for p in env["PYTHONS"].split()]
    else:
        pythons = pyenv_pythons(Path(env.get("PYENV_ROOT") or Path.home() / ".pyenv"))
    skip = set(env.get("SKIP_PYTHONS", "").split())
    chosen = []
    for python in pythons:
        minor = minor_version(python)
        if minor >= OLDEST and "{}.{}".format(*minor) not in skip:
            chosen.append(python)
    return chosen


if __name__ == "__main__":
    found = find_pythons()
    print("\n".join(str(p) for p in found))
    sys.exit(0)
