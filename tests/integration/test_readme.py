"""The README's first snippet, as pasted, next to ``make kafka`` (issue 39).

``make kafka`` is ``python -m aiokprod.testing run``: it listens on 127.0.0.1:9092, the address
the snippet uses, when that port is free. On a machine where 9092 is taken (another engineer's
``make kafka``), ``run`` must say so, and the snippet runs against the address it printed.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from readback import consume_all

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]

ROOT = Path(__file__).resolve().parents[2]
README_ADDRESS = "127.0.0.1:9092"


def readme_snippet() -> str:
    """The first Python block of README.md."""
    match = re.search(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    assert match is not None
    return match.group(1)


def first_bootstrap_line(process: subprocess.Popen[str], timeout_s: float) -> str | None:
    """The address of ``run``'s ``BOOTSTRAP=`` line, or None if it exited or took too long."""
    found: list[str] = []

    def read() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            if line.startswith("BOOTSTRAP="):
                found.append(line.strip().partition("=")[2])
                return

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(timeout_s)
    return found[0] if found else None


def stop(process: subprocess.Popen[str]) -> None:
    """SIGTERM, as Ctrl-C, so run stops its broker; SIGKILL to its group if it hangs."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=120)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=30)
    if process.stdout is not None:
        process.stdout.close()


def test_the_readme_snippet_works_as_pasted_next_to_make_kafka(tmp_path: Path) -> None:
    snippet = readme_snippet()
    assert f'Producer("{README_ADDRESS}")' in snippet
    stderr = tmp_path / "run.err"
    with stderr.open("w") as err:
        process = subprocess.Popen(
            [sys.executable, "-m", "aiokprod.testing", "run", "--startup-timeout", "240"],
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            start_new_session=True,  # its own group: the fallback kill reaches the JVM too
        )
    try:
        bootstrap = first_bootstrap_line(process, timeout_s=300)
        said = stderr.read_text()
        assert bootstrap is not None, said
        if bootstrap != README_ADDRESS:
            # 9092 was taken: run must have said so; the snippet then runs on its address
            assert "port 9092 is in use" in said, said
            snippet = snippet.replace(README_ADDRESS, bootstrap)
        result = subprocess.run(
            [sys.executable, "-c", snippet],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=tmp_path,
        )
        assert result.returncode == 0, result.stderr
        assert re.fullmatch(r"0 0\n", result.stdout), result.stdout
        assert result.stderr == ""  # nothing to warn about
        records = consume_all(bootstrap, "orders", expected=2, timeout_s=60)
        assert [(r.key, r.value) for r in records] == [
            (b"customer-7", b'{"id": 1}'),
            (b"customer-7", b'{"id": 2}'),
        ]
        assert records[0].headers == (("source", b"web"),)
    finally:
        stop(process)
