"""A broker plugin that records client telemetry (KIP-714), for tests of what clients push.

A broker advertises GetTelemetrySubscriptions and PushTelemetry only when one of its
``metric.reporters`` receives client telemetry. This module holds such a reporter, a small
Java class, and what it takes to run it:

* :func:`compile_plugin` compiles it with ``javac`` against the broker's own jars (once per
  Kafka version and source, cached beside the jars); Kafka 4.2+ gets KIP-1217's
  ``ClientTelemetryExporterProvider``, older releases the ``ClientTelemetry`` /
  ``ClientTelemetryReceiver`` pair (deprecated for removal in 4.x);
* :func:`plugin_broker_config` is the ``server.properties`` entries that load it
  (``metric.reporters`` replaces the default list, so ``JmxReporter`` is kept in it) and tell
  it where to write;
* :func:`start_telemetry_kafka` starts a :class:`LocalKafka` with it and checks that the
  broker advertises both APIs (a plugin that did not load is an error, never a skip);
* :func:`read_pushes` reads what it received: one line per push, the payload as the broker
  hands it over (decompressed: the compression a client chose is not visible here);
* :func:`subscribe` creates or changes a client-metrics subscription with Kafka's own tool.

The payload is an OTLP ``MetricsData`` message; decode it with ``opentelemetry-proto`` (a test
dependency, not one of aiokprod's).
"""

from __future__ import annotations

import base64
import hashlib
import os
import shutil
import subprocess
import tempfile
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from aiokprod.testing.apiversions import fetch_api_versions
from aiokprod.testing.cluster import LocalKafka
from aiokprod.testing.distribution import KafkaDistribution, cache_root, ensure_distribution
from aiokprod.testing.errors import LocalKafkaError, error_with_output
from aiokprod.testing.java import MIN_JAVA

PLUGIN_CLASS = "aiokprod.testing.TelemetryRecorder"
#: The broker property naming the file the plugin appends to.
FILE_PROPERTY = "aiokprod.telemetry.file"
#: The API keys a broker with a telemetry receiver advertises.
TELEMETRY_API_KEYS = (71, 72)
_EXPORTER_INTERFACE = "org/apache/kafka/server/telemetry/ClientTelemetryExporterProvider.class"

_JAVA = """\
package aiokprod.testing;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.StandardOpenOption;
import java.util.Base64;
import java.util.List;
import java.util.Map;
import org.apache.kafka.common.config.ConfigException;
import org.apache.kafka.common.metrics.KafkaMetric;
import org.apache.kafka.common.metrics.MetricsReporter;
import org.apache.kafka.server.authorizer.AuthorizableRequestContext;
import org.apache.kafka.server.telemetry.*;

/** Appends every client telemetry push the broker receives to a file, one line each. */
public class TelemetryRecorder implements MetricsReporter, @INTERFACE@ {
    private volatile Path file;
    private volatile String nodeId = "";

    @Override
    public void configure(Map<String, ?> configs) {
        Object value = configs.get("@PROPERTY@");
        if (value == null) {
            throw new ConfigException("@PROPERTY@ is not set");
        }
        file = Paths.get(value.toString());
        Object node = configs.get("node.id");
        nodeId = node == null ? "" : node.toString();
    }

    @Override public void init(List<KafkaMetric> metrics) { }
    @Override public void metricChange(KafkaMetric metric) { }
    @Override public void metricRemoval(KafkaMetric metric) { }
    @Override public void close() { }

    @BODY@

    private void record(AuthorizableRequestContext request, int intervalMs,
                        ClientTelemetryPayload payload) {
        ByteBuffer data = payload.data().duplicate();
        byte[] bytes = new byte[data.remaining()];
        data.get(bytes);
        String line = String.join("\\t",
            Long.toString(System.currentTimeMillis()),
            nodeId,
            payload.clientInstanceId().toString(),
            Boolean.toString(payload.isTerminating()),
            String.valueOf(payload.contentType()),
            Integer.toString(intervalMs),
            String.valueOf(request.clientId()),
            Base64.getEncoder().encodeToString(bytes)) + "\\n";
        synchronized (TelemetryRecorder.class) {
            try {
                Files.write(file, line.getBytes(StandardCharsets.UTF_8),
                    StandardOpenOption.CREATE, StandardOpenOption.APPEND);
            } catch (IOException e) {
                System.err.println("TelemetryRecorder: cannot write " + file + ": " + e);
            }
        }
    }
}
"""
_EXPORTER_BODY = """@Override
    public ClientTelemetryExporter clientTelemetryExporter() {
        return (context, payload) ->
            record(context.authorizableRequestContext(), context.pushIntervalMs(), payload);
    }"""
_RECEIVER_BODY = """@Override
    public ClientTelemetryReceiver clientReceiver() {
        return (context, payload) -> record(context, -1, payload);
    }"""


def java_source(exporter: bool) -> str:
    """The plugin's source: KIP-1217's exporter (Kafka 4.2+) or the older receiver."""
    interface = "ClientTelemetryExporterProvider" if exporter else "ClientTelemetry"
    body = _EXPORTER_BODY if exporter else _RECEIVER_BODY
    return (
        _JAVA.replace("@INTERFACE@", interface)
        .replace("@BODY@", body)
        .replace("@PROPERTY@", FILE_PROPERTY)
    )


def has_exporter_api(dist: KafkaDistribution) -> bool:
    """Whether this Kafka has KIP-1217's ``ClientTelemetryExporterProvider`` (4.2+)."""
    for jar in dist.lib_dir.glob("kafka-clients-*.jar"):
        with zipfile.ZipFile(jar) as archive:
            return _EXPORTER_INTERFACE in archive.namelist()
    return False


def find_javac() -> str:
    """``$JAVA_HOME/bin/javac`` if set, else ``javac`` on ``PATH``.

    Raises:
        LocalKafkaError: no ``javac`` (a JRE without the compiler).
    """
    java_home = os.environ.get("JAVA_HOME", "").strip()
    candidate = Path(java_home) / "bin" / "javac" if java_home else None
    if candidate is not None and os.access(candidate, os.X_OK):
        return str(candidate)
    found = shutil.which("javac")
    if found is None:
        raise LocalKafkaError(
            f"javac is not installed (a JDK {MIN_JAVA}+ is needed to build the broker's "
            f"telemetry plugin; Debian/Ubuntu: apt-get install openjdk-17-jdk-headless)"
        )
    return found


def compile_plugin(dist: KafkaDistribution, timeout: float = 300.0) -> Path:
    """Compile the plugin against ``dist``'s jars; returns the classes folder (cached).

    Raises:
        LocalKafkaError: no ``javac``, or it failed (its output is in the message).
    """
    source = java_source(has_exporter_api(dist))
    digest = hashlib.sha256(source.encode()).hexdigest()[:12]
    classes = cache_root() / "telemetry-plugin" / f"kafka-{dist.version}-{digest}"
    if (classes / "aiokprod" / "testing" / "TelemetryRecorder.class").is_file():
        return classes
    javac = find_javac()
    classes.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".build-", dir=classes.parent))
    try:
        src = work / "TelemetryRecorder.java"
        src.write_text(source, encoding="utf-8")
        out = work / "classes"
        command = [javac, "--release", str(MIN_JAVA), "-nowarn", "-cp", dist.classpath]
        command += ["-d", str(out), str(src)]
        try:
            done = subprocess.run(
                command, capture_output=True, text=True, timeout=timeout, check=False
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise LocalKafkaError(f"could not run javac: {exc}") from exc
        if done.returncode != 0:
            raise error_with_output(
                "javac failed to compile the telemetry plugin", done.stdout + done.stderr
            )
        try:
            os.replace(out, classes)  # atomic; another process may have won the race
        except OSError:
            if not classes.is_dir():
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return classes


def plugin_broker_config(record_file: Path) -> dict[str, str]:
    """``server.properties`` entries that load the plugin, writing to ``record_file``."""
    return {
        "metric.reporters": f"org.apache.kafka.common.metrics.JmxReporter,{PLUGIN_CLASS}",
        FILE_PROPERTY: str(record_file),
    }


def start_telemetry_kafka(
    record_file: Path,
    *,
    version: str | None = None,
    broker_config: Mapping[str, str] | None = None,
) -> LocalKafka:
    """One local node with the plugin loaded, writing to ``record_file``.

    Raises:
        LocalKafkaError: the plugin did not compile, or the broker did not start, or it
            started without advertising the telemetry APIs (the plugin did not load).
    """
    dist = ensure_distribution(version)
    classes = compile_plugin(dist)
    config = {**plugin_broker_config(record_file), **(broker_config or {})}
    kafka = LocalKafka(
        version=dist.version, broker_config=config, extra_classpath=[classes]
    ).start()
    try:
        address = next(iter(kafka.nodes.values()))
        versions = fetch_api_versions(address.host, address.port)
        missing = [key for key in TELEMETRY_API_KEYS if key not in versions.api_ranges]
        if missing:
            raise error_with_output(
                f"the broker started but does not advertise API keys {missing}: the telemetry "
                f"plugin {PLUGIN_CLASS} was not loaded",
                kafka.log_tail(next(iter(kafka.nodes)), 60),
            )
    except BaseException:
        kafka.stop()
        raise
    return kafka


@dataclass(frozen=True)
class ReceivedPush:
    """One push as the plugin received it."""

    #: The broker's wall clock when it handed the push over (ms since the epoch).
    time_ms: int
    node_id: str
    #: The client instance id as Kafka prints it (URL-safe base64).
    instance_id: str
    terminating: bool
    content_type: str
    #: The subscription's push interval (KIP-1217's context; -1 before Kafka 4.2).
    interval_ms: int
    client_id: str
    #: The OTLP ``MetricsData`` bytes (decompressed by the broker).
    payload: bytes


def read_pushes(record_file: Path) -> list[ReceivedPush]:
    """Every push recorded so far (none if the file does not exist yet)."""
    try:
        text = record_file.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    pushes = []
    for line in text.splitlines():
        parts = line.split("\t")
        if len(parts) != 8:
            continue  # a line being written
        time_ms, node, instance, terminating, content_type, interval, client_id, data = parts
        pushes.append(
            ReceivedPush(
                int(time_ms),
                node,
                instance,
                terminating == "true",
                content_type,
                int(interval),
                client_id,
                base64.b64decode(data),
            )
        )
    return pushes


def subscribe(
    kafka: LocalKafka,
    name: str,
    metrics: Sequence[str],
    interval_ms: int,
    *,
    match: Mapping[str, str] | None = None,
) -> None:
    """Create or change the client-metrics subscription ``name`` (``kafka-client-metrics.sh``).

    Args:
        kafka: the cluster.
        name: the subscription's name (a ``client-metrics`` config resource).
        metrics: metric-name prefixes.
        interval_ms: the push interval.
        match: client selectors (``client_id`` -> a regular expression, ...); none: all.

    Raises:
        LocalKafkaError: the tool failed.
    """
    args = ["--bootstrap-server", kafka.bootstrap_servers, "--alter", "--name", name]
    args += ["--metrics", ",".join(metrics), "--interval", str(interval_ms)]
    if match:
        args += ["--match", ",".join(f"{k}={v}" for k, v in match.items())]
    done = kafka.run_java_tool("org.apache.kafka.tools.ClientMetricsCommand", *args)
    if done.returncode != 0:
        raise error_with_output(
            f"kafka-client-metrics.sh --alter --name {name} failed", done.stdout + done.stderr
        )
