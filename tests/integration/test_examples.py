"""The examples run against the local broker: aiohttp app, asyncio script, sync script.

(The FastAPI example has its own file, test_fastapi_example.py; the PySpark examples' functions
run in test_spark_sink.py, test_spark_streaming.py and test_spark_exactly_once.py on those
files' Spark sessions.) Below those,
every example's documented command is run as its docstring gives it, `python -m
aiokprod.testing exec ...` included.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from types import ModuleType

import pytest
from aiohttp import test_utils
from readback import consume_all

from aiokprod import ProducerClosedError
from aiokprod.testing import LocalKafka
from aiokprod.testing.ports import pick_free_ports, port_accepts

pytestmark = pytest.mark.timeout(90)

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def load_example(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def run_example(name: str, *args: str, bootstrap: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(EXAMPLES / name), *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "KAFKA_BOOTSTRAP_SERVERS": bootstrap},
    )


async def test_aiohttp_example(kafka: LocalKafka, new_topic) -> None:
    topic = new_topic(partitions=2)
    example = load_example("aiohttp_app")
    app = example.create_app(kafka.bootstrap_servers, topic)
    server = test_utils.TestServer(app, host="127.0.0.1")  # a real server on loopback
    async with test_utils.TestClient(server) as client:
        response = await client.post("/events?user=u-7", data=b"clicked")
        assert response.status == 201, await response.text()
        body = await response.json()
    # the cleanup_ctx closed the producer with the app
    with pytest.raises(ProducerClosedError):
        await app[example.PRODUCER].send(topic, b"late")
    records = consume_all(kafka.bootstrap_servers, topic, expected=1, timeout_s=30)
    assert len(records) == 1
    record = records[0]
    assert (record.partition, record.offset) == (body["partition"], body["offset"])
    assert (record.key, record.value, record.headers) == (
        b"u-7",
        b"clicked",
        (("via", b"aiohttp"),),
    )


def test_asyncio_script(kafka: LocalKafka, new_topic) -> None:
    topic = new_topic(partitions=3)
    result = run_example("asyncio_script.py", topic, "3000", bootstrap=kafka.bootstrap_servers)
    assert result.returncode == 0, result.stderr
    assert "3000 of 3000 records delivered" in result.stdout
    records = consume_all(kafka.bootstrap_servers, topic, expected=3001, timeout_s=30)
    assert len(records) == 3001
    assert sum(r.headers == (("source", b"asyncio_script"),) for r in records) == 3000


def test_sync_script(kafka: LocalKafka, new_topic) -> None:
    topic = new_topic(partitions=3)
    result = run_example("sync_script.py", topic, bootstrap=kafka.bootstrap_servers)
    assert result.returncode == 0, result.stderr
    assert "1000 of 1000 rows delivered" in result.stdout
    assert "typed error, raised in this thread" in result.stdout
    records = consume_all(kafka.bootstrap_servers, topic, expected=1001, timeout_s=30)
    assert len(records) == 1001
    assert all(r.value for r in records)


# --- each example's documented command, exactly as its docstring gives it -------------------
#
# The commands are read from the examples' docstrings, so a test fails when a documented
# command stops working (as `exec ... -- uvicorn ...` once did: uvicorn was in no extra).
# `python` in a command is this interpreter, and this interpreter's bin folder is first on
# PATH (as in an activated virtualenv); nothing else is changed.

EXEC_PREFIX = "python -m aiokprod.testing exec"
#: Every example and how its documented command is checked.
EXAMPLE_FILES = {
    "quickstart.py",
    "asyncio_script.py",
    "sync_script.py",
    "fastapi_app.py",
    "aiohttp_app.py",
    "spark_batch.py",
    "spark_streaming.py",
    "schema_registry.py",
    "prometheus_metrics.py",
    "exactly_once.py",  # run by test_exactly_once_example.py
    "spark_exactly_once.py",
}
#: A command under `exec` starts its own Kafka (and Spark's JVM for spark_batch): be patient.
EXEC_TIMEOUT_S = 300


def documented_commands(path: Path) -> list[str]:
    """The shell commands in a module docstring's ``::`` blocks (``\\`` continuations joined)."""
    docstring = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    commands: list[str] = []
    pending = ""
    for raw in docstring.splitlines():
        line = raw.strip()
        if not raw.startswith("    ") or not line or line.startswith(("#", "curl", "-d", "-H")):
            pending = ""
            continue
        line = pending + line
        if line.endswith("\\"):
            pending = line[:-1].strip() + " "
            continue
        pending = ""
        commands.append(line)
    return commands


def exec_command(name: str) -> list[str]:
    found = [c for c in documented_commands(EXAMPLES / name) if c.startswith(EXEC_PREFIX)]
    assert len(found) == 1, f"{name} documents {len(found)} '{EXEC_PREFIX}' commands: {found}"
    argv = shlex.split(found[0])
    # `python` is whatever Python the reader has: here, the interpreter running the tests
    return [sys.executable if arg == "python" else arg for arg in argv]


def command_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "KAFKA_BOOTSTRAP_SERVERS"}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return {**env, **extra}


def test_every_example_documents_a_command() -> None:
    assert {p.name for p in EXAMPLES.glob("*.py")} == EXAMPLE_FILES
    for name in EXAMPLE_FILES - {"aiohttp_app.py"}:
        exec_command(name)  # exactly one `exec` command each
    assert any(
        "python examples/aiohttp_app.py" in c
        for c in documented_commands(EXAMPLES / "aiohttp_app.py")
    )


@pytest.mark.slow
@pytest.mark.timeout(EXEC_TIMEOUT_S + 60)
@pytest.mark.parametrize(
    ("name", "expected_output"),
    [
        ("quickstart.py", "read back with librdkafka: 100,000 records"),
        ("asyncio_script.py", "10000 of 10000 records delivered"),
        ("sync_script.py", "1000 of 1000 rows delivered"),
        ("spark_batch.py", "wrote 100000 records to 'clicks'"),
        ("spark_exactly_once.py", "exactly once"),
        ("schema_registry.py", "1000 of 1000 records decoded with schema id 1"),
        ("prometheus_metrics.py", "kafka_producer_record_send_total 5000.0"),
    ],
)
def test_documented_exec_command_runs(name: str, expected_output: str, tmp_path: Path) -> None:
    env = command_env(TMPDIR=str(tmp_path))  # where an example's scratch folders go
    env.pop("SPARK_LOCAL_IP", None)  # as in a fresh shell
    result = subprocess.run(
        exec_command(name),
        cwd=EXAMPLES.parent,
        capture_output=True,
        text=True,
        timeout=EXEC_TIMEOUT_S,
        env=env,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert expected_output in result.stdout, result.stdout + result.stderr
    # issue 39: the Spark examples stay on loopback (unset, Spark warns it takes the
    # machine's outward address), and leave no checkpoint folder behind
    assert "Set SPARK_LOCAL_IP" not in result.stderr
    assert list(tmp_path.glob("aiokprod-ckpt-*")) == []


def _post_json(url: str, body: bytes) -> tuple[int, dict[str, object]]:
    request = urllib.request.Request(url, data=body, method="POST")
    request.add_header("content-type", "application/json")
    with urllib.request.urlopen(request, timeout=60) as response:
        return response.status, json.loads(response.read())


def _wait_listening(process: subprocess.Popen[bytes], port: int, log: Path) -> None:
    deadline = time.monotonic() + EXEC_TIMEOUT_S
    while not port_accepts("127.0.0.1", port):
        assert process.poll() is None, f"exited with {process.returncode}:\n{log.read_text()}"
        assert time.monotonic() < deadline, f"not listening on {port}:\n{log.read_text()}"
        time.sleep(0.2)


def _stop(process: subprocess.Popen[bytes]) -> int:
    process.send_signal(signal.SIGTERM)
    try:
        return process.wait(timeout=120)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        raise


@pytest.mark.slow
@pytest.mark.timeout(EXEC_TIMEOUT_S + 120)
def test_documented_fastapi_command_serves_and_stops_cleanly(tmp_path: Path) -> None:
    argv = exec_command("fastapi_app.py")
    assert "uvicorn" in argv, argv  # the command this test is about
    port = pick_free_ports(1)[0]
    log = tmp_path / "exec.log"
    with log.open("wb") as sink:
        # uvicorn reads UVICORN_PORT: the documented command itself is unchanged
        process = subprocess.Popen(
            argv,
            cwd=EXAMPLES.parent,
            stdout=sink,
            stderr=subprocess.STDOUT,
            env=command_env(UVICORN_PORT=str(port)),
        )
    try:
        _wait_listening(process, port, log)
        status, body = _post_json(
            f"http://127.0.0.1:{port}/events", b'{"user": "u-7", "action": "login"}'
        )
        assert status == 201, body
        assert body["topic"] == "events"
        bootstrap = re.search(r"KAFKA_BOOTSTRAP_SERVERS=(\S+);", log.read_text())
        assert bootstrap is not None, log.read_text()
        records = consume_all(bootstrap.group(1), "events", expected=1, timeout_s=30)
        assert [(r.partition, r.offset) for r in records] == [(body["partition"], body["offset"])]
        assert records[0].key == b"u-7"
        assert json.loads(records[0].value or b"") == {"user": "u-7", "action": "login"}
    finally:
        code = _stop(process)
    # SIGTERM reached uvicorn through exec; uvicorn shut down gracefully (the lifespan closed
    # the producer) and then re-raised the signal, which exec reports as 128 + 15
    output = log.read_text()
    assert code in (0, 128 + signal.SIGTERM), output
    assert "Application shutdown complete" in output, output
    broker_port = int(bootstrap.group(1).rsplit(":", 1)[1])
    assert not port_accepts("127.0.0.1", broker_port), "exec left Kafka running"


@pytest.mark.timeout(120)
def test_documented_aiohttp_command_serves(kafka: LocalKafka, new_topic, tmp_path: Path) -> None:
    (command,) = [
        c for c in documented_commands(EXAMPLES / "aiohttp_app.py") if "aiohttp_app.py" in c
    ]
    words = shlex.split(command)
    settings = dict(w.split("=", 1) for w in words if "=" in w and not w.startswith("-"))
    argv = [sys.executable if w == "python" else w for w in words if "=" not in w]
    assert set(settings) == {"KAFKA_BOOTSTRAP_SERVERS", "EVENTS_TOPIC"}, command
    topic = new_topic(partitions=2)
    port = pick_free_ports(1)[0]
    log = tmp_path / "aiohttp.log"
    with log.open("wb") as sink:
        process = subprocess.Popen(
            argv,
            cwd=EXAMPLES.parent,
            stdout=sink,
            stderr=subprocess.STDOUT,
            # the documented variables, pointed at this test's broker and topic; PORT as the
            # example reads it
            env=command_env(
                KAFKA_BOOTSTRAP_SERVERS=kafka.bootstrap_servers, EVENTS_TOPIC=topic, PORT=str(port)
            ),
        )
    try:
        _wait_listening(process, port, log)
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/events?user=u-7", data=b"clicked", method="POST"
        )
        with urllib.request.urlopen(request, timeout=60) as response:
            assert response.status == 201
            body = json.loads(response.read())
    finally:
        code = _stop(process)
    assert code == 0, log.read_text()
    records = consume_all(kafka.bootstrap_servers, topic, expected=1, timeout_s=30)
    assert [(r.partition, r.offset, r.key, r.value) for r in records] == [
        (body["partition"], body["offset"], b"u-7", b"clicked")
    ]
