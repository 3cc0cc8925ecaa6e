"""``Producer(**options)`` is typed (PEP 692): mypy --strict rejects a misspelt or mistyped option.

Runs mypy itself, on two small files: one with mistakes (each must be reported, on its own
line) and one with correct calls (must pass). Also checks that ``ProducerOptions`` is what
the option table says (docs/gen_config.py generates it).
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import typing
from pathlib import Path

import pytest

from aiokprod.config import OPTIONS, ProducerOptions

ROOT = Path(__file__).resolve().parents[2]

WRONG = """\
from aiokprod import Producer
from aiokprod.sync import SyncProducer

Producer("127.0.0.1:9092", lingerms=5)  # line 4: misspelt
Producer("127.0.0.1:9092", linger_ms="5")  # line 5: a str for an int
Producer("127.0.0.1:9092", acks="everyone")  # line 6: not an acks value
Producer("127.0.0.1:9092", compression_type="brotli")  # line 7: not a codec
SyncProducer("127.0.0.1:9092", enable_idempotence="yes")  # line 8: a str for a bool
from aiokprod import ProducerOption  # line 9: the lazy names hide no typo from mypy
"""

RIGHT = """\
from aiokprod import Producer, ProducerOptions
from aiokprod.config import Secret
from aiokprod.sync import SyncProducer


async def main() -> None:
    options: ProducerOptions = {"linger_ms": 20, "compression_type": "zstd"}
    async with Producer("127.0.0.1:9092", **options) as p:
        await p.flush()
    Producer("127.0.0.1:9092", acks="all", batch_size=65536, partitioner="murmur3")
    Producer(["a:1", "b:2"], acks=1, client_id=None, sasl_plain_password=Secret("x"))
    SyncProducer("127.0.0.1:9092", enable_idempotence=False, compression_level=3).close()
"""


@pytest.fixture(scope="module")
def mypy_output(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """mypy --strict's report on each file (one run for both, to share the analysis)."""
    folder = tmp_path_factory.mktemp("typed_options")
    (folder / "wrong.py").write_text(WRONG)
    (folder / "right.py").write_text(RIGHT)
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--strict",
            "--no-error-summary",
            "--hide-error-context",
            "--cache-dir",
            str(folder / ".mypy_cache"),
            str(folder / "wrong.py"),
            str(folder / "right.py"),
        ],
        cwd=ROOT,  # the project's [tool.mypy] settings (stub-less libraries)
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode in (0, 1), result.stderr  # 2 would be a crash or bad usage
    report: dict[str, str] = {"wrong.py": "", "right.py": ""}
    for line in result.stdout.splitlines():
        name = Path(line.split(":", 1)[0]).name
        report[name] = report.get(name, "") + line + "\n"
    return report


@pytest.mark.parametrize(
    ("line", "message"),
    [
        (4, r'Unexpected keyword argument "lingerms" for "Producer"'),
        (5, r'Argument "linger_ms" to "Producer" has incompatible type "str"; expected "int"'),
        (6, r'Argument "acks" to "Producer" has incompatible type "Literal\[.everyone.\]"'),
        (7, r'Argument "compression_type" to "Producer" has incompatible type'),
        (8, r'Argument "enable_idempotence" to "SyncProducer" has incompatible type "str"'),
        (9, r'Module "aiokprod" has no attribute "ProducerOption"'),
    ],
)
def test_mypy_rejects_a_wrong_option(mypy_output: dict[str, str], line: int, message: str) -> None:
    errors = [e for e in mypy_output["wrong.py"].splitlines() if f"wrong.py:{line}:" in e]
    assert errors, mypy_output["wrong.py"]
    assert any(re.search(message, e) for e in errors), errors


def test_mypy_accepts_correct_options(mypy_output: dict[str, str]) -> None:
    assert mypy_output["right.py"] == ""
    # and every mistake was reported on its own line, nothing else
    lines = {int(e.split(":")[1]) for e in mypy_output["wrong.py"].splitlines()}
    assert lines == {4, 5, 6, 7, 8, 9}


def test_typed_options_follow_the_option_table() -> None:
    hints = ProducerOptions.__annotations__
    keyword = {name: o for name, o in OPTIONS.items() if name != "bootstrap_servers"}
    assert list(hints) == list(keyword)
    for name, o in keyword.items():
        hint = hints[name]
        text = hint.__forward_arg__ if isinstance(hint, typing.ForwardRef) else hint
        # the annotation is kept as unparsed source, with normalised quotes
        assert ast.dump(ast.parse(text)) == ast.dump(ast.parse(o.accepts)), name
    assert ProducerOptions.__total__ is False
