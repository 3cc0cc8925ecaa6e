"""The ticker during an authentication storm: N connections authenticating at once (issue 38).

N producers on one event loop start at the same moment and ask for a topic's metadata, so N
connections open and run SaslHandshake and SaslAuthenticate together (a reconnect storm: a
broker restart, a network blip, every session of a KIP-368 listener ending at once), while the
1 ms ticker of :mod:`benchmarks.ticker` runs beside them. Rows, all on one
:class:`~aiokprod.testing.kerberos.KerberosKafka` (a local Kafka with GSSAPI listeners and an
MIT KDC of its own, on loopback):

- ``storm-gssapi``: Kerberos with a keytab, each row with a principal of its own so its
  tickets are not already cached: every GSS call in aiokprod's GSS threads (what ships);
- ``storm-gssapi-inline``: the same GSS calls made on the event loop instead, as a client
  that does not off-load them would (for contrast only, patched in here);
- ``storm-scram``: SCRAM-SHA-512 (PBKDF2 in a worker thread, cached per salt);
- ``storm-plain``: PLAIN.

The KDC is reached through a proxy that adds ``--kdc-latency-ms`` (default 20) to each
request, as a KDC across a network does; the loopback KDC alone answers in well under 1 ms.

Per row: the ticker's worst and p99 lateness, the loop's longest step in wall-clock time and
what it was, the longest step in the loop thread's own CPU time (:class:`LoopTimer` reads
``time.process_time``, which counts the GSS threads too; it reads ``time.thread_time`` here,
so preemption by other processes and waits for the GIL drop out), the time until all N were
authenticated, and the KDC's requests.
Run it as ``python -m benchmarks.ticker --rows storm-gssapi,storm-gssapi-inline,...`` or
``python -m benchmarks.auth_storm``. Not a test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import socket
import statistics
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from aiokprod import Producer
from aiokprod.net import kerberos
from aiokprod.testing.kdc import krb5_conf
from aiokprod.testing.kerberos import KerberosKafka
from aiokprod.testing.sim.scale import CALLER, LoopTimer

TICK_S = 0.001
STORM_ROWS = ("storm-gssapi", "storm-gssapi-inline", "storm-scram", "storm-plain")


@dataclass
class StormRow:
    """One storm's figures."""

    row: str
    connections: int
    authenticated_s: float = 0.0
    worst_ms: float = 0.0
    p99_ms: float = 0.0
    p50_ms: float = 0.0
    ticks: int = 0
    step_wall_ms: float = 0.0
    step: str = ""
    step_cpu_ms: float = 0.0
    step_cpu: str = ""
    kdc_as: int = 0
    kdc_tgs: int = 0
    load: float = 0.0


class SlowKdc:
    """A loopback proxy to the KDC that holds each request ``latency_ms`` before passing it on.

    Threads of its own (never the loop measured), closed with the row.
    """

    def __init__(self, kdc_port: int, latency_ms: float) -> None:
        self.kdc_port = kdc_port
        self.delay_s = latency_ms / 1000
        self.server = socket.create_server(("127.0.0.1", 0))
        self.server.settimeout(0.1)
        self.port = int(self.server.getsockname()[1])
        self._closing = threading.Event()
        self._sockets: list[socket.socket] = []
        self._threads = [threading.Thread(target=self._accept, daemon=True)]
        self._threads[0].start()

    def _accept(self) -> None:
        while not self._closing.is_set():
            try:
                client, _ = self.server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            client.settimeout(None)
            upstream = socket.create_connection(("127.0.0.1", self.kdc_port))
            self._sockets += [client, upstream]
            for source, sink, delay in ((client, upstream, self.delay_s), (upstream, client, 0)):
                thread = threading.Thread(
                    target=self._pipe, args=(source, sink, delay), daemon=True
                )
                self._threads.append(thread)
                thread.start()

    def _pipe(self, source: socket.socket, sink: socket.socket, delay_s: float) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                if delay_s:
                    time.sleep(delay_s)
                sink.sendall(data)
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)

    def close(self) -> None:
        self._closing.set()
        self.server.close()
        for sock in self._sockets:
            sock.close()
        for thread in self._threads:
            thread.join(5)


@contextlib.contextmanager
def slow_kdc(kafka: KerberosKafka, latency_ms: float, folder: Path) -> Iterator[None]:
    """The process's krb5.conf points at a :class:`SlowKdc` for the ``with`` block."""
    if latency_ms <= 0 or kafka.kdc.port is None:
        yield
        return
    proxy = SlowKdc(kafka.kdc.port, latency_ms)
    conf = folder / f"krb5-slow-{proxy.port}.conf"
    conf.write_text(krb5_conf(kafka.realm, proxy.port), encoding="utf-8")
    saved = os.environ["KRB5_CONFIG"]
    os.environ["KRB5_CONFIG"] = str(conf)
    try:
        yield
    finally:
        os.environ["KRB5_CONFIG"] = saved
        proxy.close()


@contextlib.contextmanager
def loop_thread_cpu() -> Iterator[None]:
    """LoopTimer's CPU clock is the loop thread's own for the ``with`` block."""
    saved = time.process_time
    time.process_time = time.thread_time
    try:
        yield
    finally:
        time.process_time = saved


@contextlib.contextmanager
def gss_on_the_loop() -> Iterator[None]:
    """Make the GSS calls on the event loop (the contrast row), restored afterwards."""
    saved = kerberos.KerberosLogin._in_thread

    async def inline(self: Any, context: Any, fn: Any, *args: Any) -> Any:
        return kerberos._explained(context, fn, *args)

    kerberos.KerberosLogin._in_thread = inline  # type: ignore[method-assign]
    try:
        yield
    finally:
        kerberos.KerberosLogin._in_thread = saved  # type: ignore[method-assign]


def options_for(kafka: KerberosKafka, row: str) -> tuple[dict[str, Any], str | None]:
    """The producers' options for ``row``, and the Kerberos principal it uses (or None)."""
    common: dict[str, Any] = {"enable_idempotence": False, "acks": 1}
    if row.startswith("storm-gssapi"):
        principal = f"storm-{uuid.uuid4().hex[:8]}"
        kafka.add_client(principal)
        return {**kafka.client_options(principal=principal), **common}, principal
    mechanism = "SCRAM-SHA-512" if row == "storm-scram" else "PLAIN"
    return {
        "bootstrap_servers": kafka.listener_bootstrap("SASL_PLAINTEXT"),
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": mechanism,
        "sasl_plain_username": "alice",
        "sasl_plain_password": kafka.sasl_users["alice"],
        **common,
    }, None


async def storm(
    timer: LoopTimer, options: dict[str, Any], topic: str, n: int, row: str
) -> StormRow:
    """N producers start and ask for ``topic`` at once (N first connections), the ticker on."""
    out = StormRow(row, n, load=os.getloadavg()[0])
    current = asyncio.current_task()
    if current is not None:
        current.set_name(CALLER)
    producers = [Producer(**options) for _ in range(n)]
    lateness: list[float] = []
    stop = False

    async def ticker() -> None:
        while not stop:
            began = time.perf_counter()
            await asyncio.sleep(TICK_S)
            lateness.append(time.perf_counter() - began - TICK_S)

    task = asyncio.create_task(ticker(), name=f"{CALLER}-ticker")
    try:
        await asyncio.sleep(0.05)
        timer.reset()
        lateness.clear()
        began = time.perf_counter()
        # start() opens the first (bootstrap) connection; the metadata answer comes over it.
        await asyncio.gather(*(p.start() for p in producers))
        await asyncio.gather(*(p.partitions_for(topic) for p in producers))
        out.authenticated_s = time.perf_counter() - began
        await asyncio.sleep(0.05)
        out.step_wall_ms = timer.producer.max_wall_s * 1000
        out.step = timer.producer.slowest
        out.step_cpu_ms = timer.producer.max_cpu_s * 1000
        out.step_cpu = timer.producer.slowest_cpu
    finally:
        stop = True
        await task
        await asyncio.gather(*(p.close() for p in producers))
    lateness.sort()
    if lateness:
        out.ticks = len(lateness)
        out.worst_ms = lateness[-1] * 1000
        out.p99_ms = lateness[min(len(lateness) - 1, len(lateness) * 99 // 100)] * 1000
        out.p50_ms = statistics.median(lateness) * 1000
    return out


def run_storm_row(
    kafka: KerberosKafka, row: str, topic: str, connections: int, kdc_latency_ms: float = 20.0
) -> StormRow:
    """One storm row (see the module docstring)."""
    options, principal = options_for(kafka, row)
    inline = gss_on_the_loop() if row == "storm-gssapi-inline" else contextlib.nullcontext()
    slow = slow_kdc(kafka, kdc_latency_ms if principal else 0, kafka.root)
    with slow, loop_thread_cpu(), LoopTimer() as timer, inline:
        result = asyncio.run(storm(timer, options, topic, connections, row))
    if principal is not None:
        result.kdc_as = len(kafka.kdc.log_lines("AS_REQ", principal))
        result.kdc_tgs = len(kafka.kdc.log_lines("TGS_REQ", principal))
    return result


def describe(r: StormRow) -> str:
    """One printed line."""
    kdc = f"; KDC: {r.kdc_as} AS, {r.kdc_tgs} TGS" if r.kdc_as or r.kdc_tgs else ""
    return (
        f"{r.row:>20}: {r.connections} connections authenticated in {r.authenticated_s:.2f} s; "
        f"ticker worst {r.worst_ms:6.1f} ms, p99 {r.p99_ms:5.1f} ms, p50 {r.p50_ms:4.2f} ms "
        f"({r.ticks} ticks); longest loop step {r.step_wall_ms:.1f} ms wall ({r.step}), "
        f"{r.step_cpu_ms:.1f} ms CPU ({r.step_cpu})"
        f"{kdc}; load {r.load:.1f}"
    )


def start_kerberos_kafka() -> KerberosKafka:
    """A KerberosKafka for the storm rows, its realm in this process's environment."""
    kafka = KerberosKafka(heap_max="1g").start()
    os.environ.update(kafka.environ())
    os.environ.pop("KRB5_CLIENT_KTNAME", None)
    return kafka


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", default=",".join(STORM_ROWS))
    parser.add_argument("--connections", type=int, default=50)
    parser.add_argument("--repeat", type=int, default=3, help="runs of each row (interleaved)")
    parser.add_argument("--kdc-latency-ms", type=float, default=20.0)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    kafka = start_kerberos_kafka()
    results: list[StormRow] = []
    try:
        topic = f"storm-{uuid.uuid4().hex[:6]}"
        kafka.create_topic(topic, 6)
        for _ in range(args.repeat):
            for row in args.rows.split(","):
                result = run_storm_row(kafka, row, topic, args.connections, args.kdc_latency_ms)
                results.append(result)
                print(describe(result), flush=True)
    finally:
        kafka.stop()
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump([asdict(r) for r in results], out, indent=2)


if __name__ == "__main__":
    main()
