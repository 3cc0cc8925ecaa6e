"""What the repository tracks holds for anyone's checkout (issue 39: a `.venv-shared` symlink
to one machine's absolute path was tracked)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _git(*args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=ROOT, check=True, capture_output=True, text=True, timeout=60
    ).stdout


def _tracked_entries() -> list[tuple[str, str, str]]:
    """(mode, object id, path) of every tracked file; skips outside a git checkout."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout (a wheel's test folder)")
    entries = []
    for line in _git("ls-files", "-s").splitlines():
        meta, path = line.split("\t", 1)
        mode, object_id, _stage = meta.split()
        entries.append((mode, object_id, path))
    return entries


def test_no_tracked_symlink_leaves_the_checkout() -> None:
    leaving = {}
    for mode, object_id, path in _tracked_entries():
        if mode != "120000":  # git's mode for a symbolic link
            continue
        target = _git("cat-file", "blob", object_id)
        resolved = (ROOT / path).parent / target
        if Path(target).is_absolute() or ROOT not in resolved.resolve().parents:
            leaving[path] = target
    assert leaving == {}, f"tracked symlinks that point outside the checkout: {leaving}"


def test_no_local_virtualenv_is_tracked() -> None:
    tracked = [path for _, _, path in _tracked_entries() if path.split("/")[0].startswith(".venv")]
    assert tracked == []
