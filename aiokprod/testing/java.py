"""Find Java and run Kafka's Java tools (TopicCommand, ConsoleConsumer, the perf tools...).

Tools are short-lived JVMs, so they get flags that favour start-up time over throughput
(serial GC, C1 only); the broker gets the G1 flags of ``kafka-run-class.sh`` instead
(see :mod:`aiokprod.testing.node`).
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path

from aiokprod.testing.config import (
    logging_jvm_flag,
    tools_log4j1_properties,
    tools_log4j2_properties,
)
from aiokprod.testing.distribution import KafkaDistribution
from aiokprod.testing.errors import LocalKafkaError, error_with_output

MIN_JAVA = 17
"""Kafka 4.x brokers need Java 17 or newer (3.6 to 3.9 run on it too)."""

TOOL_JVM_FLAGS: tuple[str, ...] = (
    "-Xmx256m",
    "-XX:+UseSerialGC",
    "-XX:TieredStopAtLevel=1",
    "-Djava.awt.headless=true",
)
"""JVM flags of short admin tools: small heap, C1 only, quick start."""

PERF_JVM_FLAGS: tuple[str, ...] = (
    "-Xmx512m",
    "-server",
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-XX:InitiatingHeapOccupancyPercent=35",
    "-XX:+ExplicitGCInvokesConcurrent",
    "-XX:MaxInlineLevel=15",
    "-Djava.awt.headless=true",
)
"""JVM flags of the perf tools, as ``kafka-producer-perf-test.sh`` runs them (full JIT)."""

_PERF_TOOLS = frozenset(
    {
        "org.apache.kafka.tools.ProducerPerformance",
        "org.apache.kafka.tools.ConsumerPerformance",
        "org.apache.kafka.tools.EndToEndLatency",
        "org.apache.kafka.tools.ShareConsumerPerformance",
    }
)


def default_jvm_flags(main_class: str) -> tuple[str, ...]:
    """:data:`PERF_JVM_FLAGS` for Kafka's perf tools, :data:`TOOL_JVM_FLAGS` otherwise.

    The quick-start flags cap the JIT at C1, which would make a throughput measurement
    of the Java client look worse than it is.
    """
    return PERF_JVM_FLAGS if main_class in _PERF_TOOLS else TOOL_JVM_FLAGS


_VERSION_RE = re.compile(r'version "(\d+)(?:\.(\d+))?')


def find_java() -> str:
    """The ``java`` to use: ``$JAVA_HOME/bin/java`` if set, else ``java`` on ``PATH``.

    Raises:
        LocalKafkaError: no Java found, or it is older than Java 17.
    """
    java_home = os.environ.get("JAVA_HOME", "").strip()
    candidate = Path(java_home) / "bin" / "java" if java_home else None
    if candidate is not None and os.access(candidate, os.X_OK):
        java = str(candidate)
    else:
        found = shutil.which("java")
        if found is None:
            raise LocalKafkaError(
                f"Java is not installed ('java' is not on PATH and JAVA_HOME is not set); "
                f"Kafka needs Java {MIN_JAVA}+ (Debian/Ubuntu: apt-get install "
                f"openjdk-17-jre-headless)"
            )
        java = found
    major = java_major_version(java)
    if major < MIN_JAVA:
        raise LocalKafkaError(f"{java} is Java {major}; Kafka 4.x needs Java {MIN_JAVA}+")
    return java


@functools.cache
def java_major_version(java: str) -> int:
    """The major version of a ``java`` executable (``java -version`` prints it on stderr).

    Raises:
        LocalKafkaError: it cannot be run or its output is not understood.
    """
    try:
        done = subprocess.run(
            [java, "-version"],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise LocalKafkaError(f"could not run {java} -version: {exc}") from exc
    return parse_java_major(done.stderr + done.stdout, java)


def parse_java_major(output: str, java: str = "java") -> int:
    """Parse the major version out of ``java -version`` output (``1.8`` counts as 8).

    Raises:
        LocalKafkaError: no version in the output.
    """
    match = _VERSION_RE.search(output)
    if match is None:
        raise error_with_output(f"{java} -version printed no version", output)
    first = int(match.group(1))
    if first == 1 and match.group(2) is not None:
        return int(match.group(2))
    return first


def tools_logging_file(dist: KafkaDistribution) -> Path:
    """The logging configuration for tools, written into the distribution once.

    Log4j 2 syntax for 4.x, Log4j 1 (reload4j) syntax for 3.x. Written to a temporary name
    and renamed, so concurrent runs never see half a file.
    """
    if dist.logging == "reload4j":
        path = dist.conf_dir / "tools-log4j.properties"
        content = tools_log4j1_properties()
    else:
        path = dist.conf_dir / "tools-log4j2.properties"
        content = tools_log4j2_properties()
    try:
        if path.read_text(encoding="utf-8") == content:
            return path
    except OSError:
        pass
    dist.conf_dir.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tools-log4j2-", dir=dist.conf_dir)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(content)
    os.replace(tmp, path)
    return path


def java_tool_command(
    dist: KafkaDistribution,
    main_class: str,
    args: tuple[str, ...] | list[str],
    *,
    jvm_flags: tuple[str, ...] | None = None,
) -> list[str]:
    """The full command line that runs ``main_class`` from the distribution's jars.

    ``jvm_flags`` defaults to :func:`default_jvm_flags` of the class.
    """
    return [
        find_java(),
        *(jvm_flags if jvm_flags is not None else default_jvm_flags(main_class)),
        logging_jvm_flag(dist.logging, tools_logging_file(dist)),
        "-cp",
        dist.classpath,
        main_class,
        *args,
    ]


def run_java_tool(
    dist: KafkaDistribution,
    main_class: str,
    *args: str,
    timeout: float = 120.0,
    input: str | None = None,
    env: Mapping[str, str] | None = None,
    jvm_flags: tuple[str, ...] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run a Java main class from the Kafka jars and capture its output.

    Logging goes to stderr at WARN, so stdout holds only what the tool prints itself.
    The exit code is not checked: the caller decides what a failure is.

    Args:
        dist: the distribution whose jars form the classpath.
        main_class: e.g. ``"org.apache.kafka.tools.consumer.ConsoleConsumer"``.
        *args: the tool's arguments.
        timeout: seconds before the tool is killed and ``LocalKafkaError`` is raised.
        input: text for the tool's stdin (stdin is empty otherwise).
        env: extra environment variables.
        jvm_flags: JVM flags; default :func:`default_jvm_flags` (full JIT for perf tools,
            quick start for the rest).

    Raises:
        LocalKafkaError: Java is missing, or the tool did not finish within ``timeout``.
    """
    command = java_tool_command(dist, main_class, args, jvm_flags=jvm_flags)
    full_env = {**os.environ, **env} if env else None
    try:
        return subprocess.run(
            command,
            input=input,
            stdin=subprocess.DEVNULL if input is None else None,
            capture_output=True,
            text=True,
            timeout=timeout,
            env=full_env,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        output = _text(exc.stdout) + _text(exc.stderr)
        raise error_with_output(
            f"{main_class} did not finish within {timeout:.0f} s", output
        ) from exc


def _text(data: str | bytes | None) -> str:
    if data is None:
        return ""
    return data if isinstance(data, str) else data.decode("utf-8", "replace")
