"""Command line: ``python -m aiokprod.testing {run,exec,fetch,classpath}``.

* ``run [--port PORT] [--nodes N] [--topic NAME:PARTITIONS[:RF]]...`` starts Kafka, prints
  ``BOOTSTRAP=<address>`` and waits for Ctrl-C or SIGTERM, then stops Kafka cleanly. Its
  (first) broker listens on 127.0.0.1:9092, Kafka's usual address, when that port is free
  (else on a free port, and it says so); ``--port`` picks another, ``--port 0`` any free one.
* ``exec [--nodes N] [--topic ...]... -- CMD ARGS...`` checks that CMD can be found, starts
  Kafka, runs CMD with ``KAFKA_BOOTSTRAP_SERVERS`` set, stops Kafka and exits with CMD's exit
  code.
* ``--kerberos`` (``run``, ``exec``): a :class:`~aiokprod.testing.kerberos.KerberosKafka`, whose
  SASL listeners offer GSSAPI, with a KDC of its own; the realm's environment (krb5.conf, a
  client keytab, the GSSAPI listener) is printed by ``run`` and set for ``exec``'s CMD.
* ``fetch`` only downloads the jars (e.g. to warm a CI cache).
* ``classpath`` prints the Java classpath of the jars (downloading them if needed).

``run`` and ``exec`` report each step of the start on stderr (fetching the jars on a first
run, formatting, starting the JVMs, creating topics, ready), and a line every
:data:`HEARTBEAT_SECONDS` while they wait, so a slow first start never looks like a hang.

Exit codes: CMD's own for ``exec``; 0 for a clean ``run``; 2 for bad usage; 3 when Kafka
cannot be fetched or started; 127 when ``exec``'s CMD is not found (checked before Kafka
starts).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from types import FrameType

from aiokprod.testing.cluster import DEFAULT_STARTUP_TIMEOUT, LocalKafka
from aiokprod.testing.distribution import (
    download_seconds,
    ensure_distribution,
    ensure_tools_distribution,
    find_distribution,
    kafka_version,
)
from aiokprod.testing.errors import LocalKafkaError
from aiokprod.testing.kerberos import KerberosKafka, cli_environ
from aiokprod.testing.ports import port_is_free

EXIT_KAFKA_FAILED = 3
#: ``exec``: the command cannot be found (the shells' code for "command not found").
EXIT_COMMAND_NOT_FOUND = 127
#: While Kafka starts, a "still starting" line this often (seconds) between step changes.
HEARTBEAT_SECONDS = 10.0
BOOTSTRAP_ENV = "KAFKA_BOOTSTRAP_SERVERS"
#: ``run``'s client port when it is free: Kafka's usual one, which examples and READMEs use.
DEFAULT_PORT = 9092


@dataclass(frozen=True)
class TopicSpec:
    """A topic to create before handing over: ``NAME:PARTITIONS[:RF]``."""

    name: str
    partitions: int
    replication_factor: int | None


def parse_topic_spec(text: str) -> TopicSpec:
    """Parse ``NAME``, ``NAME:PARTITIONS`` or ``NAME:PARTITIONS:RF``.

    Raises:
        argparse.ArgumentTypeError: malformed.
    """
    parts = text.split(":")
    if not parts[0] or len(parts) > 3:
        raise argparse.ArgumentTypeError(f"expected NAME[:PARTITIONS[:RF]], got {text!r}")
    try:
        partitions = int(parts[1]) if len(parts) > 1 else 1
        rf = int(parts[2]) if len(parts) > 2 else None
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"PARTITIONS and RF must be integers in {text!r}"
        ) from None
    if partitions < 1 or (rf is not None and rf < 1):
        raise argparse.ArgumentTypeError(f"PARTITIONS and RF must be positive in {text!r}")
    return TopicSpec(parts[0], partitions, rf)


def parse_config_entry(text: str) -> tuple[str, str]:
    """Parse a ``key=value`` broker setting.

    Raises:
        argparse.ArgumentTypeError: no ``=`` or empty key.
    """
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key.strip(), value


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the command line."""
    parser = argparse.ArgumentParser(
        prog="python -m aiokprod.testing",
        description="Run a local Apache Kafka (KRaft, 127.0.0.1) from Maven Central jars.",
    )
    commands = parser.add_subparsers(dest="command", required=True)

    def add_version_option(sub: argparse.ArgumentParser) -> None:
        sub.add_argument(
            "--kafka-version",
            default=None,
            metavar="VERSION",
            help="Apache Kafka release, 3.6 to the newest 4.x "
            "(default: $AIOKPROD_KAFKA_VERSION, else the project's default)",
        )

    def add_cluster_options(sub: argparse.ArgumentParser) -> None:
        add_version_option(sub)
        sub.add_argument("--nodes", type=int, default=1, help="number of nodes (default 1)")
        sub.add_argument(
            "--topic",
            dest="topics",
            action="append",
            type=parse_topic_spec,
            default=[],
            metavar="NAME:PARTITIONS[:RF]",
            help="create this topic first (repeatable); RF defaults to min(3, nodes)",
        )
        sub.add_argument(
            "--broker-config",
            dest="broker_config",
            action="append",
            type=parse_config_entry,
            default=[],
            metavar="KEY=VALUE",
            help="server.properties entry for every node (repeatable)",
        )
        sub.add_argument(
            "--kerberos",
            action="store_true",
            help="SASL listeners with GSSAPI and an MIT KDC of their own (needs krb5-kdc, "
            "krb5-admin-server, krb5-user)",
        )
        sub.add_argument(
            "--startup-timeout",
            type=float,
            default=DEFAULT_STARTUP_TIMEOUT,
            help=f"seconds to wait for the nodes (default {DEFAULT_STARTUP_TIMEOUT:.0f})",
        )

    run = commands.add_parser("run", help="start Kafka and keep it running until Ctrl-C")
    add_cluster_options(run)
    run.add_argument(
        "--port",
        type=int,
        default=None,
        help=f"client port of the (first) broker on 127.0.0.1 (default: {DEFAULT_PORT} when "
        "free, else a free port; 0: a free port)",
    )
    run_cmd = commands.add_parser("exec", help="start Kafka, run a command against it, stop")
    add_cluster_options(run_cmd)
    run_cmd.add_argument("cmd", nargs=argparse.REMAINDER, help="-- CMD ARGS...")
    fetch = commands.add_parser("fetch", help="download the Kafka jars into the cache and exit")
    add_version_option(fetch)
    classpath = commands.add_parser("classpath", help="print the Java classpath of the Kafka jars")
    add_version_option(classpath)
    return parser


class _Stop(Exception):
    """Raised from the SIGTERM handler to unwind like Ctrl-C does."""


def _raise_stop(signum: int, frame: FrameType | None) -> None:
    raise _Stop(signal.Signals(signum).name)


def _start(args: argparse.Namespace) -> LocalKafka:
    if args.nodes < 1:
        raise LocalKafkaError(f"--nodes must be at least 1, got {args.nodes}")
    began = time.monotonic()
    port = _client_port(getattr(args, "port", 0))
    _fetch_with_progress(args.kafka_version)
    kafka = (KerberosKafka if args.kerberos else LocalKafka)(
        nodes=args.nodes,
        version=args.kafka_version,
        broker_config=dict(args.broker_config),
        startup_timeout=args.startup_timeout,
        port=port,
    )
    _info(f"starting Kafka ({args.nodes} node(s); at most {args.startup_timeout:.0f} s)")
    with _StartProgress(kafka):
        kafka.start()
    try:
        for spec in args.topics:
            rf = spec.replication_factor or min(3, args.nodes)
            _info(f"creating topic {spec.name} ({spec.partitions} partition(s), RF {rf})")
            kafka.create_topic(spec.name, spec.partitions, rf)
    except BaseException:
        kafka.stop()
        raise
    _info(
        f"Kafka {kafka.kafka_version} ({args.nodes} node(s)) ready in "
        f"{time.monotonic() - began:.1f} s"
    )
    return kafka


def _client_port(requested: int | None) -> int | None:
    """The first broker's client port: ``--port``'s, else 9092 when free; None: any free one.

    Raises:
        LocalKafkaError: ``--port`` is out of range or already in use.
    """
    if requested is None:
        if port_is_free(DEFAULT_PORT):
            return DEFAULT_PORT
        _info(
            f"port {DEFAULT_PORT} is in use (another Kafka?): this Kafka listens on a free "
            "port instead; connect to the BOOTSTRAP address printed below, or choose a port "
            "with --port"
        )
        return None
    if requested == 0:
        return None
    if not 0 < requested < 65536:
        raise LocalKafkaError(f"--port must be between 1 and 65535, got {requested}")
    if not port_is_free(requested):
        raise LocalKafkaError(f"--port {requested}: 127.0.0.1:{requested} is in use")
    return requested


def _fetch_with_progress(version: str | None = None) -> None:
    """Download the jars first if they are not cached, saying so (a first run takes minutes)."""
    version = version or kafka_version()
    if find_distribution(version) is not None:
        return
    _info(
        f"fetching the Kafka {version} jars from Maven Central (first run only; "
        "this can take a few minutes)"
    )
    began = time.monotonic()
    dist = ensure_distribution(version)
    _info(
        f"fetched Kafka {dist.version} jars into {dist.lib_dir} in {time.monotonic() - began:.1f} s"
    )


class _StartProgress:
    """Reports the steps of :meth:`LocalKafka.start` from a watcher thread.

    It only *reads* what the cluster exposes (its nodes, and whether each has a process), so
    it never interferes with the start: formatting runs before any node has a process; once
    the JVMs are up, the start waits for them to be ready.
    """

    def __init__(self, kafka: LocalKafka, poll_s: float = 0.2) -> None:
        self._kafka = kafka
        self._poll_s = poll_s
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="kafka-progress", daemon=True)

    def __enter__(self) -> _StartProgress:
        self._began = time.monotonic()
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._done.set()
        self._thread.join()

    def _step(self) -> str | None:
        kafka = self._kafka
        try:
            nodes = [kafka.node(i) for i in range(1, kafka.node_count + 1)]
        except LocalKafkaError:
            return None  # not prepared yet (checking Java, writing configuration)
        if not any(node.process is not None for node in nodes):
            return "formatting storage"
        return "JVMs started, waiting for every broker to be ready"

    def _watch(self) -> None:
        last_step: str | None = None
        last_line = time.monotonic()
        while not self._done.wait(self._poll_s):
            try:
                step = self._step()
            except Exception:  # noqa: BLE001 - a racing read must never break the start itself
                continue
            now = time.monotonic()
            if step is not None and step != last_step:
                _info(f"{step} ({now - self._began:.0f} s)")
                last_step, last_line = step, now
            elif now - last_line >= HEARTBEAT_SECONDS:
                _info(f"still starting ({now - self._began:.0f} s): {last_step or 'preparing'}")
                last_line = now


#: Commands the examples' documented invocations use, installed by ``aiokprod[examples]``.
_EXAMPLE_COMMANDS = frozenset({"uvicorn"})


class CommandNotFoundError(LocalKafkaError):
    """``exec`` was given a command that cannot be run; found before Kafka is started."""


def check_command(command: Sequence[str]) -> str:
    """Where ``command[0]`` will be found, or a :class:`CommandNotFoundError` naming the fix.

    A name with a slash is a path (relative to the working folder); any other name is
    looked up on ``PATH``, as ``subprocess`` (and a shell) will.
    """
    name = command[0]
    if os.sep in name or (os.altsep and os.altsep in name):
        if os.path.isfile(name) and os.access(name, os.X_OK):
            return name
        problem = "does not exist" if not os.path.exists(name) else "is not an executable file"
        raise CommandNotFoundError(f"cannot run {name!r}: it {problem}")
    found = shutil.which(name)
    if found is None:
        hint = (
            " (the examples' needs: pip install 'aiokprod[examples]')"
            if name in _EXAMPLE_COMMANDS
            else ""
        )
        raise CommandNotFoundError(
            f"cannot run {name!r}: not found on PATH; install it{hint} or give its path. "
            "Kafka was not started"
        )
    return found


def _cmd_run(args: argparse.Namespace) -> int:
    kafka = _start(args)
    try:
        print(f"BOOTSTRAP={kafka.bootstrap_servers}", flush=True)
        for name, value in cli_environ(kafka).items():
            print(f"{name}={value}", flush=True)
        for node_id, address in kafka.nodes.items():
            _info(f"node {node_id}: {address.bootstrap} (log: {kafka.log_path(node_id)})")
        _info("press Ctrl-C to stop")
        while kafka.is_running:
            time.sleep(0.5)
        _info("every Kafka node has exited")
        return EXIT_KAFKA_FAILED
    except (KeyboardInterrupt, _Stop):
        return 0
    finally:
        _info("stopping Kafka")
        _stop_shielded(kafka)


def _cmd_exec(args: argparse.Namespace) -> int:
    command = list(args.cmd)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise LocalKafkaError(
            "exec needs a command: python -m aiokprod.testing exec -- CMD ARGS..."
        )
    try:
        check_command(command)
    except CommandNotFoundError as exc:
        _info(f"error: {exc}")
        return EXIT_COMMAND_NOT_FOUND
    kafka = _start(args)
    try:
        env = {**os.environ, BOOTSTRAP_ENV: kafka.bootstrap_servers, **cli_environ(kafka)}
        _info(f"{BOOTSTRAP_ENV}={kafka.bootstrap_servers}; running {' '.join(command)}")
        try:
            child = subprocess.Popen(command, env=env)
        except OSError as exc:
            _info(f"cannot run {command[0]}: {exc}")
            return EXIT_COMMAND_NOT_FOUND
        return _wait_child(child)
    finally:
        _stop_shielded(kafka)


def _stop_shielded(kafka: LocalKafka) -> None:
    """Stop Kafka without letting a second Ctrl-C or SIGTERM cut the shutdown short.

    The stop is bounded anyway (SIGKILL after a grace period), and an interrupted stop would
    leave JVMs and data behind.
    """
    if threading.current_thread() is not threading.main_thread():
        kafka.stop()
        return
    previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        kafka.stop()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _wait_child(child: subprocess.Popen[bytes]) -> int:
    """Wait for the command; pass SIGTERM on, let Ctrl-C reach it by itself.

    Ctrl-C already goes to the whole foreground process group, the command included, so it
    is only swallowed here; the command decides how to exit and its code is returned.
    """
    while True:
        try:
            code = child.wait()
            break
        except KeyboardInterrupt:
            continue
        except _Stop:
            child.terminate()
    # A command killed by signal N reports -N; shells report 128 + N.
    return 128 - code if code < 0 else code


def _cmd_fetch(version: str | None) -> int:
    already = find_distribution(version) is not None
    began = time.monotonic()
    dist = ensure_distribution(version)
    if already:
        _info(f"Kafka {dist.version} jars already cached in {dist.lib_dir}")
    else:
        recorded = download_seconds(dist)
        took = recorded if recorded is not None else time.monotonic() - began
        _info(f"fetched Kafka {dist.version} jars into {dist.lib_dir} in {took:.1f} s")
    tools = ensure_tools_distribution(dist)
    if tools is not dist:
        _info(f"Kafka {dist.version} has no kafka-tools; tools run from {tools.lib_dir}")
    print(dist.lib_dir, flush=True)
    return 0


def _info(message: str) -> None:
    print(f"[aiokprod.testing] {message}", file=sys.stderr, flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the process exit code."""
    args = build_parser().parse_args(argv)
    # SIGTERM unwinds like Ctrl-C so that ``finally`` blocks stop the brokers; only the main
    # thread may install handlers (always the case when run with ``python -m``).
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _raise_stop)
    try:
        if args.command == "run":
            return _cmd_run(args)
        if args.command == "exec":
            return _cmd_exec(args)
        if args.command == "fetch":
            return _cmd_fetch(args.kafka_version)
        print(ensure_distribution(args.kafka_version).classpath, flush=True)
        return 0
    except LocalKafkaError as exc:
        _info(f"error: {exc}")
        return EXIT_KAFKA_FAILED
    except (KeyboardInterrupt, _Stop):
        _info("interrupted")
        return 130


if __name__ == "__main__":
    sys.exit(main())
