"""The aiokprod command line without a broker: argument parsing and -X option typing."""

from __future__ import annotations

import argparse
import io
import time
from pathlib import Path

import pytest

from aiokprod.cli import main
from aiokprod.cli.options import UsageError, build_parser, parse_option, producer_options
from aiokprod.cli.perf import _PerfStats, perf_summary
from aiokprod.cli.produce import _lines
from aiokprod.config import ProducerConfig


@pytest.mark.parametrize(
    ("assignment", "expected"),
    [
        ("linger_ms=20", ("linger_ms", 20)),
        ("linger.ms=20", ("linger_ms", 20)),  # the Java spelling
        ("batch-size=1_000", ("batch_size", 1000)),
        ("enable.idempotence=false", ("enable_idempotence", False)),
        ("enable_idempotence=TRUE", ("enable_idempotence", True)),
        ("allow_auto_create_topics=no", ("allow_auto_create_topics", False)),
        ("acks=all", ("acks", "all")),  # an int option that also takes "all"
        ("acks=1", ("acks", 1)),
        ("acks=-1", ("acks", -1)),
        ("compression_type=gzip", ("compression_type", "gzip")),
        ("partitioner=murmur3", ("partitioner", "murmur3")),
        ("client_id=a=b", ("client_id", "a=b")),  # only the first = splits
        (" linger_ms =5", ("linger_ms", 5)),
    ],
)
def test_options_are_typed_by_the_config(assignment: str, expected: tuple[str, object]) -> None:
    assert parse_option(assignment) == expected
    name, value = expected
    ProducerConfig.from_options("h:1", **{name: value})  # and the producer accepts them


@pytest.mark.parametrize(
    ("assignment", "message"),
    [
        ("linger_ms", "expects name=value"),
        ("=5", "expects name=value"),
        ("lingerms=5", "did you mean linger_ms"),
        ("bogus=1", "not a producer option"),
        ("key_serializer=json", "cannot be set from the command line"),
        ("interceptors=x", "cannot be set from the command line"),
        ("bootstrap_servers=h:1", "use --bootstrap-servers"),
        ("enable_idempotence=maybe", "expected true or false"),
    ],
)
def test_bad_options_are_usage_errors(assignment: str, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        parse_option(assignment)


def test_a_non_number_is_left_for_the_config_to_reject() -> None:
    name, value = parse_option("linger_ms=soon")
    assert value == "soon"
    with pytest.raises(Exception, match="linger_ms must be an int"):
        ProducerConfig.from_options("h:1", **{name: value})


#: Options that hold Python objects (as far as they exist in this version of the config).
OBJECT_OPTIONS = {
    "key_serializer",
    "value_serializer",
    "interceptors",
    "ssl_context",
    "sasl_oauth_token_provider",
}


def _refused(name: str) -> bool:
    try:
        parse_option(f"{name}=1")
    except UsageError as exc:
        return "cannot be set from the command line" in str(exc)
    return False


def test_every_scalar_option_can_be_set() -> None:
    # a new str/int/bool option of ProducerConfig is reachable from -X without a CLI change
    fields = set(ProducerConfig.__dataclass_fields__) - {"bootstrap_servers"}
    refused = {name for name in fields if _refused(name)}
    assert refused <= OBJECT_OPTIONS
    assert {"key_serializer", "value_serializer", "interceptors"} <= refused


def test_producer_config_file_then_x_options(tmp_path: Path) -> None:
    config = tmp_path / "producer.properties"
    config.write_text("# a comment\n! another\n\nlinger.ms=50\nacks=1\nclient.id=from-file\n")
    args = build_parser().parse_args(
        ["produce", "-t", "t", "--producer-config", str(config), "-X", "linger_ms=7"]
    )
    assert producer_options(args) == {"linger_ms": 7, "acks": 1, "client_id": "from-file"}

    missing = build_parser().parse_args(["perf", "-t", "t", "-n", "1", "-s", "1"])
    missing.producer_config = str(tmp_path / "absent.properties")
    with pytest.raises(UsageError, match=r"absent\.properties"):
        producer_options(missing)


def test_produce_arguments() -> None:
    argv = ["produce", "-b", "h:1", "-t", "orders", "-K", "::"]
    argv += ["-H", "a=1", "--header", "b=", "-p", "2"]
    args = build_parser().parse_args(argv)
    assert args.command == "produce"
    assert args.bootstrap_servers == "h:1"
    assert args.topic == "orders"
    assert args.key_separator == b"::"
    assert args.header == [("a", b"1"), ("b", b"")]
    assert args.partition == 2
    assert args.file is None


def test_perf_arguments_and_defaults() -> None:
    args = build_parser().parse_args(
        ["perf", "--topic", "p", "--num-records", "1000", "--record-size", "100"]
    )
    assert (args.num_records, args.record_size, args.throughput) == (1000, 100, -1)
    assert args.progress_interval is None
    assert not args.json


@pytest.mark.parametrize(
    "argv",
    [
        ["produce"],  # no topic
        ["produce", "-t", "t", "-H", "novalue"],
        ["produce", "-t", "t", "-K", ""],
        ["perf", "-t", "t", "-n", "0", "-s", "10"],
        ["perf", "-t", "t", "-n", "10"],  # no record size
        ["perf", "-t", "t", "-n", "ten", "-s", "10"],
        [],
    ],
)
def test_bad_arguments_exit_with_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    assert capsys.readouterr().err


def test_missing_bootstrap_servers(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("KAFKA_BOOTSTRAP_SERVERS", raising=False)
    with pytest.raises(SystemExit) as exit_info:
        main(["perf", "-t", "t", "-n", "1", "-s", "1"])
    assert exit_info.value.code == 2
    assert "--bootstrap-servers is required" in capsys.readouterr().err


def test_a_bad_option_value_exits_with_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["perf", "-b", "h:1", "-t", "t", "-n", "1", "-s", "1", "-X", "linger_ms=-1"])
    assert exit_info.value.code == 2
    assert "linger_ms must be between" in capsys.readouterr().err


async def test_lines_split_across_chunks_and_endings() -> None:
    data = b"first\r\nsecond\n\nthird" + b"x" * 100_000 + b"\nlast without newline"
    got: list[bytes] = []
    async for lines in _lines(io.BufferedReader(io.BytesIO(data), buffer_size=4096)):
        got.extend(lines)
    assert got == [b"first", b"second", b"", b"third" + b"x" * 100_000, b"last without newline"]


async def test_lines_of_empty_input() -> None:
    got = [lines async for lines in _lines(io.BufferedReader(io.BytesIO(b"")))]
    assert got == []


def test_perf_stats_percentiles() -> None:
    class Done:
        def exception(self) -> None:
            return None

    stats = _PerfStats(num_records=1000, record_size=100)
    now = time.perf_counter()
    for i in range(1000):
        stats.on_delivery(now - (i + 1) / 1000, Done())  # type: ignore[arg-type]
    summary = perf_summary(stats, sent=1000, elapsed=2.0)
    assert summary["records_acked"] == 1000
    assert summary["records_per_s"] == 500.0
    assert summary["mb_per_s"] == round(500 * 100 / 1024 / 1024, 3)
    assert 495 <= summary["latency_p50_ms"] <= 520
    assert 990 <= summary["latency_p99_ms"] <= summary["latency_max_ms"]
    assert summary["latency_samples"] == 1000


def test_main_module_exposes_main() -> None:
    import aiokprod.__main__ as entry

    assert callable(entry.main)


def test_importing_aiokprod_loads_no_optional_module() -> None:
    # pyspark is an optional extra; the sync facade, the CLI and the Spark sink load on demand
    import subprocess
    import sys

    code = (
        "import sys, aiokprod, aiokprod.spark; "
        "print(sorted(m for m in ('pyspark', 'aiokprod.sync', 'aiokprod.cli') if m in sys.modules))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert result.stdout.strip() == "[]"


@pytest.mark.parametrize(
    ("assignment", "expected"),
    [
        ("compression.zstd.level=5", ("compression_level", 5)),  # a Java name, not dots
        ("ssl.key.password=pw", ("ssl_password", "pw")),
        ("max.in.flight.requests.per.connection=1", ("max_in_flight_requests_per_connection", 1)),
    ],
)
def test_java_names_from_the_option_table(assignment: str, expected: tuple[str, object]) -> None:
    assert parse_option(assignment) == expected


def _all_parsers(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    found = [parser]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                found.extend(_all_parsers(sub))
    return found


def test_every_option_of_every_command_has_help_text() -> None:
    missing = [
        f"{sub.prog} {'/'.join(action.option_strings) or action.dest}"
        for sub in _all_parsers(build_parser())
        for action in sub._actions
        if not action.help and not isinstance(action, argparse._SubParsersAction)
    ]
    assert missing == []
    perf_help = next(p for p in _all_parsers(build_parser()) if p.prog.endswith("perf"))
    assert "how many records to send" in perf_help.format_help()
