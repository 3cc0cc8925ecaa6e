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
    find_distribution,
    kafka_version,
    log4j_version_from_pom,
)
from aiokprod.testing.errors import LocalKafkaError

FAKE_MVN = r'''
import os, re, sys, time
args = sys.argv[1:]
with open(os.environ["FAKE_MVN_LOG"], "a") as log:
    log.write(" ".join(args) + "\n")
if os.environ.get("FAKE_MVN_FAIL"):
    for i in range(60):
        print(f"[INFO] noise {i}")
    print("[ERROR] Could not find artifact org.apache.kafka:kafka-tools:jar:9.9.9")
    sys.exit(1)
time.sleep(float(os.environ.get("FAKE_MVN_SLEEP", "0")))
out = next(a.split("=", 1)[1] for a in args if a.startswith("-DoutputDirectory="))
os.makedirs(out, exist_ok=True)
if any(a.endswith(":copy") for a in args):
    version = next(a for a in args if a.startswith("-Dartifact=")).split(":")[2]
    with open(os.path.join(out, f"kafka-server-{version}.pom"), "w") as pom:
        pom.write("""<project xmlns="http://maven.apache.org/POM/4.0.0"><dependencies>
<dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-api</artifactId>
<version>2.99.1</version></dependency>
<dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-core</artifactId>
<version>2.99.1</version></dependency></dependencies></project>""")
else:
    pom = open(args[args.index("-f") + 1]).read()
    kafka = re.search(r"<kafka.version>(.*)</kafka.version>", pom).group(1)
    log4j = re.search(r"<log4j2.version>(.*)</log4j2.version>", pom).group(1)
    names = [f"kafka_2.13-{kafka}", f"kafka-tools-{kafka}", f"kafka-server-{kafka}",
             f"kafka-clients-{kafka}", f"log4j-core-{log4j}", f"log4j-api-{log4j}",
             f"log4j-slf4j-impl-{log4j}", "scala-library-2.13.18"]
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
    pom = (dist.home / "pom.xml").read_text(encoding="utf-8")
    assert "<log4j2.version>2.99.1</log4j2.version>" in pom
    assert json.loads((dist.home / "complete.json").read_text())["kafka_version"] == "9.9.9"
    assert len(_calls(fake_mvn)) == 2  # POM lookup + copy-dependencies
    assert "-DincludeScope=runtime" in _calls(fake_mvn)[1]

    assert ensure_distribution("9.9.9", root=root) == dist
    assert find_distribution("9.9.9", root) == dist
    assert len(_calls(fake_mvn)) == 2
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
    assert len(_calls(fake_mvn)) == 2


def test_log4j_version_can_be_forced(
    tmp_path: Path, fake_mvn: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(distribution.LOG4J_ENV, "2.25.4")
    dist = ensure_distribution("9.9.9", root=tmp_path / "cache")
    assert dist.log4j_version == "2.25.4"
    assert len(_calls(fake_mvn)) == 1  # no POM lookup


def test_maven_failure_is_reported_and_leaves_nothing(
    tmp_path: Path, fake_mvn: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_MVN_FAIL", "1")
    root = tmp_path / "cache"
    with pytest.raises(LocalKafkaError, match="Maven exited with code 1") as caught:
        ensure_distribution("9.9.9", root=root)
    message = str(caught.value)
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
