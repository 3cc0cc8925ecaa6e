"""How aiokprod's log events reach (or do not reach) a program's output (docs/logging.md)."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

import pytest

from aiokprod.cli import main as cli_main
from aiokprod.logs import EVENT_ATTR, FIELDS_ATTR, get_logger


def test_a_program_without_logging_gets_no_output_from_the_library() -> None:
    # issue 39: raw "event='cannot connect to broker; retrying' ..." lines reached stderr
    # through Python's last-resort handler; a library keeps a NullHandler on its logger.
    code = (
        "import logging\n"
        "from aiokprod.logs import get_logger\n"
        "get_logger('aiokprod.net').warning('cannot connect to broker; retrying', node=-1)\n"
        "logging.getLogger('other').warning('not ours')\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    # Python's last-resort handler still prints other loggers' warnings: only ours are quiet
    assert result.stderr == "not ours\n"


def test_a_configured_program_gets_the_event_and_its_keys(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="aiokprod")
    get_logger("aiokprod.net").warning("cannot connect", node=-1, host="h")
    (record,) = caplog.records
    assert record.getMessage() == "event='cannot connect' host='h' node=-1"
    assert getattr(record, EVENT_ATTR) == "cannot connect"
    assert getattr(record, FIELDS_ATTR) == {"node": -1, "host": "h"}


def test_the_command_line_shows_warnings_in_its_own_words(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    lines = tmp_path / "lines.txt"
    lines.write_text("x\n")
    # without -v: the command's own line on stderr, not a raw event line (issue 39)
    code = cli_main(
        [
            "produce",
            "-b",
            "127.0.0.1:1",  # nothing listens there
            "-t",
            "t",
            "-X",
            "max_block_ms=1500",
            "-X",
            "reconnect_backoff_ms=1000",
            "--file",
            str(lines),
        ]
    )
    err = capsys.readouterr().err
    assert code == 1
    assert (
        "aiokprod produce: warning: cannot connect to any bootstrap server; retrying "
        "(bootstrap_servers=127.0.0.1:1, error=cannot connect to node -1 at 127.0.0.1:1: "
    ) in err
    assert "event=" not in err
    # the command's handler goes with it (main() may run again in this process)
    assert [type(h) for h in logging.getLogger("aiokprod").handlers] == [logging.NullHandler]
