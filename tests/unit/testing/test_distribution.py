"""The Maven-based jar cache, driven by a fake ``mvn`` (no network, no Java)."""

from __future__ import annotations

import json
import os
import stat
import sys
import threading
from pathlib import Path

import pytest

from aiokprod.testing import distribution
from aiokprod.testing.distribution import (
    DEFAULT_KAFKA_VERSION,
    cache_root,
    ensure_distribution,
    ensure_tools_distribution,
    find_distribution,
    kafka_version,
    log4j_version_from_pom,
)
from aiokprod.testing.errors import LocalKafkaError
from aiokprod.testing.releases import FALLBACK_LOG4J2_VERSION, TOOLS_VERSION

FAKE_MVN = r'''
import os, re, sys, time
args = sys.argv[1:]
with open(os.environ["FAKE_MVN_LOG"], "a") as log:
    log.write(" ".join(args) + "\n")
if os.environ.get("FAKE_MVN_FAIL"):
    for i in range(60):
        print(f"[INFO] noise {i}")
    print("[ERROR] Could not find artifact org.apache.kafka:kafka-server:pom:9.9.9")
    sys.exit(1)
time.sleep(float(os.environ.get("FAKE_MVN_SLEEP", "0")))
out = next(a.split("=", 1)[1] for a in args if a.startswith("-DoutputDirectory="))
if any(a.endswith(":copy") for a in args):
    _, artifact, version, _ = next(a for a in args if a.startswith("-Dartifact=")).split(":")
    if artifact in os.environ.get("FAKE_MVN_MISSING", "").split(","):
        print(f"[ERROR] Could not find artifact org.apache.kafka:{artifact}:pom:{version}")
        sys.exit(1)
    os.makedirs(out, exist_ok=True)
    log4j = "" if os.environ.get("FAKE_MVN_NO_LOG4J") else """<dependency>
<groupId>org.apache.logging.log4j</groupId><artifactId>log4j-api</artifactId>
<version>2.99.1</version></dependency>
<dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-core</artifactId>
<version>2.99.1</version></dependency>"""
    with open(os.path.join(out, f"{artifact}-{version}.pom"), "w") as pom:
        pom.write(f"""<project xmlns="http://maven.apache.org/POM/4.0.0"><dependencies>
{log4j}</dependencies></project>""")
else:
    os.makedirs(out, exist_ok=True)
    pom = open(args[args.index("-f") + 1]).read()
    deps = re.findall(r"<artifactId>(.*)</artifactId>\s*<version>(.*)</version>", pom)
    kafka = dict(deps)["kafka_2.13"]
    names = [f"{a}-{v}" for a, v in deps if a != "kafka-runtime"]
    names += [f"kafka-server-{kafka}", f"kafka-clients-{kafka}", "scala-library-2.13.18"]
    if os.environ.get("FAKE_MVN_DROP"):
        names.remove(os.environ["FAKE_MVN_DROP"])
    for name in names:
        open(os.path.join(out, name + ".jar"), "wb").close()
'''


@pytest.fixture
def fake_mvn(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Put a fake ``mvn`` first on PATH; returns the file where it logs its calls."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "mvn"
    script.write_text(f"#!{sys.executable}\n{FAKE_MVN}", encoding="utf-8")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    log = tmp_path / "mvn-calls.log"
    log.touch()
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.setenv("FAKE_MVN_LOG", str(log))
    monkeypatch.delenv(distribution.LOG4J_ENV, raising=False)
    return log


def _calls(log: Path) -> list[str]:
    return log.read_text(encoding="utf-8").splitlines()


def test_download_once_then_cached(tmp_path: Path, fake_mvn: Path) -> None:
    root = tmp_path / "cache"
    assert find_distribution("9.9.9", root) is None

    dist = ensure_distribution("9.9.9", root=root)

    assert dist.version == "9.9.9"
    assert dist.log4j_version == "2.99.1"  # read from kafka-server's POM
    assert dist.home == root / "kafka-9.9.9"
    assert dist.classpath == f"{root / 'kafka-9.9.9' / 'lib'}{os.sep}*"
    assert (dist.lib_dir / "log4j-slf4j-impl-2.99.1.jar").exists()
    assert (dist.logging, dist.has_tools) == ("log4j2", True)
    pom = (dist.home / "pom.xml").read_text(encoding="utf-8")
    assert "<artifactId>kafka-tools</artifactId>" in pom
    assert "<artifactId>log4j-slf4j-impl</artifactId>\n      <version>2.99.1</version>" in pom
    assert json.loads((dist.home / "complete.json").read_text())["kafka_version"] == "9.9.9"
    calls = _calls(fake_mvn)
    # kafka-server's POM (exists? Log4j version?), kafka-tools' POM, then copy-dependencies
    assert len(calls) == 3
    assert "org.apache.kafka:kafka-server:9.9.9:pom" in calls[0]
    assert "org.apache.kafka:kafka-tools:9.9.9:pom" in calls[1]
    assert "-DincludeScope=runtime" in calls[2]

    assert ensure_distribution("9.9.9", root=root) == dist
    assert find_distribution("9.9.9", root) == dist
    assert len(_calls(fake_mvn)) == 3
    assert [p.name for p in root.iterdir() if p.name.startswith(".kafka-9.9.9-")] == []


def test_concurrent_callers_download_once(
    tmp_path: Path, fake_mvn: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_MVN_SLEEP", "0.5")
    root = tmp_path / "cache"
    results: list[object] = []

    def fetch() -> None:
        results.append(ensure_distribution("9.9.9", root=root))

    threads = [threading.Thread(target=fetch) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert len(results) == 3
    assert len(set(results)) == 1
    assert len(_calls(fake_mvn)) == 3


def test_log4j_version_can_be_forced(
    tmp_path: Path, fake_mvn: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(distribution.LOG4J_ENV, "2.25.4")
    dist = ensure_distribution("9.9.9", root=tmp_path / "cache")
    assert dist.log4j_version == "2.25.4"
    assert (dist.lib_dir / "log4j-core-2.25.4.jar").exists()


def test_maven_failure_is_reported_and_leaves_nothing(
    tmp_path: Path, fake_mvn: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_MVN_FAIL", "1")
    root = tmp_path / "cache"
    with pytest.raises(LocalKafkaError, match="Maven exited with code 1") as caught:
        ensure_distribution("9.9.9", root=root)
    message = str(caught.value)
    assert message.startswith("Apache Kafka 9.9.9 is not on Maven Central")
    assert "Could not find artifact" in message
    assert "noise 59" in message
    assert "noise 5\n" not in message  # only the tail
    assert [p for p in root.iterdir() if not p.name.endswith(".lock")] == []


def test_incomplete_download_is_rejected(
    tmp_path: Path, fake_mvn: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_MVN_DROP", "log4j-slf4j-impl-2.99.1")
    root = tmp_path / "cache"
    with pytest.raises(LocalKafkaError, match=r"lacks log4j-slf4j-impl-2\.99\.1\.jar"):
        ensure_distribution("9.9.9", root=root)
    assert find_distribution("9.9.9", root) is None


def test_stale_partial_folder_is_replaced(tmp_path: Path, fake_mvn: Path) -> None:
    root = tmp_path / "cache"
    stale = root / "kafka-9.9.9"
    (stale / "lib").mkdir(parents=True)
    (stale / "lib" / "half.jar").touch()  # no marker: a download that died
    dist = ensure_distribution("9.9.9", root=root)
    assert not (dist.lib_dir / "half.jar").exists()


def test_missing_maven(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    with pytest.raises(LocalKafkaError, match="Maven"):
        ensure_distribution("9.9.9", root=tmp_path / "cache")


def test_marker_of_other_version_is_ignored(tmp_path: Path) -> None:
    home = tmp_path / "kafka-9.9.9"
    home.mkdir()
    (home / "complete.json").write_text('{"kafka_version": "1.0.0", "log4j_version": "2"}')
    assert find_distribution("9.9.9", tmp_path) is None
    (home / "complete.json").write_text("not json")
    assert find_distribution("9.9.9", tmp_path) is None


def test_version_and_cache_from_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(distribution.VERSION_ENV, raising=False)
    assert kafka_version() == DEFAULT_KAFKA_VERSION
    monkeypatch.setenv(distribution.VERSION_ENV, "4.2.0")
    assert kafka_version() == "4.2.0"
    monkeypatch.setenv(distribution.VERSION_ENV, "../../etc")
    with pytest.raises(LocalKafkaError, match="not a Kafka version"):
        kafka_version()

    monkeypatch.setenv(distribution.CACHE_ENV, str(tmp_path / "c"))
    assert cache_root() == (tmp_path / "c").resolve()
    monkeypatch.delenv(distribution.CACHE_ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_root() == (tmp_path / "xdg" / "aiokprod").resolve()


def test_log4j_version_from_pom() -> None:
    ns = 'xmlns="http://maven.apache.org/POM/4.0.0"'
    dep = (
        "<dependency><groupId>org.apache.logging.log4j</groupId>"
        "<artifactId>{a}</artifactId><version>{v}</version></dependency>"
    )

    def pom(deps: str) -> str:
        return f"<project {ns}><dependencies>{deps}</dependencies></project>"

    assert log4j_version_from_pom(pom(dep.format(a="log4j-api", v="2.1"))) == "2.1"
    both = dep.format(a="log4j-api", v="2.1") + dep.format(a="log4j-core", v="2.2")
    assert log4j_version_from_pom(pom(both)) == "2.2"
    assert log4j_version_from_pom(f"<project {ns}/>") is None


def test_kafka_3x_gets_reload4j_and_no_tools(tmp_path: Path, fake_mvn: Path) -> None:
    dist = ensure_distribution("3.9.2", root=tmp_path / "cache")
    assert (dist.logging, dist.has_tools, dist.log4j_version) == ("reload4j", False, "1.2.25")
    calls = _calls(fake_mvn)
    assert len(calls) == 2  # kafka_2.13's POM (does 3.9.2 exist?), then copy-dependencies
    assert "org.apache.kafka:kafka_2.13:3.9.2:pom" in calls[0]
    pom = (dist.home / "pom.xml").read_text(encoding="utf-8")
    assert "<artifactId>slf4j-reload4j</artifactId>" in pom
    assert "<artifactId>reload4j</artifactId>" in pom
    assert "log4j-slf4j-impl" not in pom
    assert "kafka-tools" not in pom
    assert (dist.lib_dir / "slf4j-reload4j-1.7.36.jar").exists()
    assert find_distribution("3.9.2", tmp_path / "cache") == dist


def test_release_without_kafka_tools_still_starts(
    tmp_path: Path, fake_mvn: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_MVN_MISSING", "kafka-tools")
    root = tmp_path / "cache"
    dist = ensure_distribution("9.9.9", root=root)
    assert dist.has_tools is False
    assert "kafka-tools" not in (dist.home / "pom.xml").read_text(encoding="utf-8")
    monkeypatch.delenv("FAKE_MVN_MISSING")
    tools = ensure_tools_distribution(dist)
    assert tools.version == TOOLS_VERSION
    assert tools.home == root / f"kafka-{TOOLS_VERSION}"
    assert tools.has_tools is True
    assert ensure_tools_distribution(tools) is tools


def test_release_not_on_maven_central_names_the_version(
    tmp_path: Path, fake_mvn: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_MVN_MISSING", "kafka-server,kafka_2.13")
    with pytest.raises(LocalKafkaError, match=r"^Apache Kafka 4\.9\.7 is not on Maven Central"):
        ensure_distribution("4.9.7", root=tmp_path / "cache")
    with pytest.raises(LocalKafkaError, match=r"^Apache Kafka 3\.9\.7 is not on Maven Central"):
        ensure_distribution("3.9.7", root=tmp_path / "cache")


def test_log4j2_falls_back_when_the_pom_names_none(
    tmp_path: Path, fake_mvn: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_MVN_NO_LOG4J", "1")  # like kafka-server 4.0.x
    dist = ensure_distribution("4.0.2", root=tmp_path / "cache")
    assert dist.log4j_version == FALLBACK_LOG4J2_VERSION
    assert (dist.lib_dir / f"log4j-slf4j-impl-{FALLBACK_LOG4J2_VERSION}.jar").exists()


def test_release_older_than_supported_is_refused_before_maven(
    tmp_path: Path, fake_mvn: Path
) -> None:
    with pytest.raises(LocalKafkaError, match=r"3\.5\.2 is older than 3\.6"):
        ensure_distribution("3.5.2", root=tmp_path / "cache")
    assert _calls(fake_mvn) == []


def test_marker_without_logging_fields_reads_as_log4j2_with_tools(tmp_path: Path) -> None:
    home = tmp_path / "kafka-4.3.1"
    home.mkdir()
    (home / "complete.json").write_text('{"kafka_version": "4.3.1", "log4j_version": "2.25.4"}')
    dist = find_distribution("4.3.1", tmp_path)
    assert dist is not None
    assert (dist.logging, dist.has_tools) == ("log4j2", True)
