"""The one error type of the local Kafka runner.

The runner is test tooling, not part of the client, so it does not reuse the client's
``KafkaError`` tree: a broker that cannot be fetched or started is an environment problem,
and callers (the pytest plugin above all) want to catch exactly that and nothing else.
"""

from __future__ import annotations

import re


class LocalKafkaError(Exception):
    """The local Apache Kafka could not be fetched, started, stopped or administered.

    The message always says what was attempted and, when a subprocess failed, ends with the
    tail of its output (Maven's, the broker log's or a Java tool's), so a failed CI run can be
    diagnosed from the error alone.
    """


_ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def tail_lines(text: str, lines: int = 40) -> str:
    """The last ``lines`` lines of ``text``, without terminal colour codes.

    Debian's Maven prints colour resets even in batch mode; they only make error messages
    harder to read, so they are removed here.
    """
    if lines <= 0:
        return ""
    clean = _ANSI_ESCAPE.sub("", text)
    return "\n".join(clean.rstrip("\n").splitlines()[-lines:])


def error_with_output(message: str, output: str, lines: int = 40) -> LocalKafkaError:
    """A ``LocalKafkaError`` whose message ends with the tail of a subprocess's output."""
    tail = tail_lines(output, lines)
    if not tail.strip():
        return LocalKafkaError(f"{message} (no output)")
    shown = tail.splitlines()
    indented = "\n".join(f"    {line}" for line in shown)
    return LocalKafkaError(f"{message}; last {len(shown)} lines of output:\n{indented}")
