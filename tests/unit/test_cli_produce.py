"""``aiokprod produce``'s summary agrees with its exit code (issue 39), without a broker."""

from __future__ import annotations

from pathlib import Path

import pytest

from aiokprod.cli import main as cli_main

#: Nothing listens there: every send waits max_block_ms for metadata, then is refused.
NOWHERE = "127.0.0.1:1"


def produce(tmp_path: Path, lines: bytes, *args: str) -> int:
    data = tmp_path / "lines.txt"
    data.write_bytes(lines)
    return cli_main(["produce", "-b", NOWHERE, "-t", "nope", "--file", str(data), *args])


def test_a_record_that_cannot_be_sent_is_counted_and_explained(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # before: "produced 0 record(s) to 'nope', 0 failed" and exit code 1
    code = produce(tmp_path, b"x\ny\n", "-X", "max_block_ms=1000")
    out, err = capsys.readouterr()
    assert code == 1
    assert out.startswith(
        "produced 0 record(s) to 'nope', 0 failed, "
        "1 not sent (line 1: MetadataTimeoutError; the run stopped there), in "
    )
    assert (
        "aiokprod produce: stopped: line 1 could not be sent: MetadataTimeoutError: topic "
        "'nope' not present in metadata after 1000 ms"
    ) in err


def test_the_key_separator_is_shown_as_typed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # before: "line 1 has no key separator b':'"
    code = produce(tmp_path, b"no separator here\n", "-K", "::")
    out, err = capsys.readouterr()
    assert code == 1
    assert "1 not sent (line 1: no key separator '::'; the run stopped there)" in out
    assert "aiokprod produce: stopped: line 1 has no key separator '::';" in err
    assert "b'" not in out + err
