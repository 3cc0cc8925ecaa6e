"""Spark's own Kafka sink (spark-sql-kafka-0-10) from Maven Central, cached like Kafka's jars.

The artifact's compile dependencies that a pyspark install does not already ship are fetched
with ``maven-dependency-plugin:copy-dependencies`` into
``~/.cache/aiokprod/spark-sql-kafka-<version>/lib`` (``AIOKPROD_KAFKA_CACHE`` moves the
root); a ``complete.json`` marker, written last, makes the folder usable. There is no 4.3.0
of the artifact on Maven Central; 4.2.0 works with pyspark 4.3.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

SPARK_KAFKA_VERSION = "4.2.0"
# Exactly the jars Spark's sink needs beyond pyspark's own (the versions of the 4.2.0 POM).
ARTIFACTS = (
    ("org.apache.spark", "spark-sql-kafka-0-10_2.13", SPARK_KAFKA_VERSION),
    ("org.apache.spark", "spark-token-provider-kafka-0-10_2.13", SPARK_KAFKA_VERSION),
    ("org.apache.kafka", "kafka-clients", "3.9.2"),
    ("org.apache.commons", "commons-pool2", "2.13.1"),
)
DEPENDENCY_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:3.8.1"


def cache_dir() -> Path:
    root = os.environ.get("AIOKPROD_KAFKA_CACHE") or os.path.expanduser("~/.cache/aiokprod")
    return Path(root) / f"spark-sql-kafka-{SPARK_KAFKA_VERSION}"


def _pom() -> str:
    deps = "\n".join(
        f"    <dependency><groupId>{g}</groupId><artifactId>{a}</artifactId>"
        f"<version>{v}</version>"
        "<exclusions><exclusion><groupId>*</groupId><artifactId>*</artifactId></exclusion>"
        "</exclusions></dependency>"
        for g, a, v in ARTIFACTS
    )
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        '<project xmlns="http://maven.apache.org/POM/4.0.0">\n'
        "  <modelVersion>4.0.0</modelVersion>\n"
        "  <groupId>local.aiokprod</groupId><artifactId>spark-kafka-sink</artifactId>"
        "<version>1</version><packaging>pom</packaging>\n"
        f"  <dependencies>\n{deps}\n  </dependencies>\n</project>\n"
    )


def ensure_jars(timeout: float = 600.0) -> list[Path]:
    """The sink's jars, downloaded on first use (under a file lock)."""
    home = cache_dir()
    marker = home / "complete.json"
    if marker.exists():
        return [home / "lib" / name for name in json.loads(marker.read_text())["jars"]]
    home.parent.mkdir(parents=True, exist_ok=True)
    with open(home.parent / f".{home.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if marker.exists():
            return ensure_jars(timeout)
        mvn = shutil.which("mvn")
        if mvn is None:
            raise RuntimeError("Maven ('mvn') is needed once to fetch Spark's Kafka sink")
        work = Path(tempfile.mkdtemp(prefix=f".{home.name}-", dir=home.parent))
        (work / "pom.xml").write_text(_pom())
        subprocess.run(
            [
                mvn,
                "-B",
                "-q",
                "--no-transfer-progress",
                f"{DEPENDENCY_PLUGIN}:copy-dependencies",
                f"-DoutputDirectory={work / 'lib'}",
            ],
            cwd=work,
            check=True,
            timeout=timeout,
            capture_output=True,
        )
        jars = sorted(p.name for p in (work / "lib").glob("*.jar"))
        if len(jars) != len(ARTIFACTS):
            raise RuntimeError(f"expected {len(ARTIFACTS)} jars, Maven gave {jars}")
        (work / "complete.json").write_text(json.dumps({"jars": jars}))
        if home.exists():
            shutil.rmtree(home)
        work.rename(home)
    return ensure_jars(timeout)


if __name__ == "__main__":
    print(",".join(str(p) for p in ensure_jars()))
