"""streamWriter() tells Spark's planning call from its commit call (aiokprod.spark.source).

PySpark runs ``streamWriter()`` in ``write_into_data_source.py`` to plan a micro-batch (the
writer is then pickled to the tasks) and in ``python_streaming_sink_runner.py`` before each
commit or abort. Only the first opens a run. These tests pin both files' names and calls in
the installed PySpark, so that a PySpark that moves them fails here, not in production.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

if importlib.util.find_spec("pyspark") is None:  # pragma: no cover - the spark extra
    pytest.skip("PySpark is not installed", allow_module_level=True)

from aiokprod.errors import ConfigError
from aiokprod.spark.source import _planning_call


def call_from(filename: str) -> bool:
    namespace: dict[str, object] = {"probe": lambda: _planning_call()}
    code = compile("def caller():\n    return probe()\n", filename, "exec")
    exec(code, namespace)  # a frame whose file is the named PySpark worker
    result = namespace["caller"]()  # type: ignore[operator]
    assert isinstance(result, bool)
    return result


def test_planning_and_committing_are_told_apart() -> None:
    assert call_from("/x/pyspark/sql/worker/write_into_data_source.py") is True
    assert call_from("/x/pyspark/sql/worker/python_streaming_sink_runner.py") is False


def test_any_other_caller_is_refused() -> None:
    with pytest.raises(ConfigError, match="neither to plan"):
        call_from("/x/somewhere_else.py")


def source_of(module: str) -> str:
    """A module's source, read without importing it (importing PySpark's worker modules would
    make this process look like a Spark worker to the code that checks for one)."""
    spec = importlib.util.find_spec(module)
    assert spec is not None
    assert spec.origin is not None
    return Path(spec.origin).read_text()


def test_the_installed_pyspark_calls_stream_writer_from_those_files() -> None:
    planner = source_of("pyspark.sql.worker.write_into_data_source")
    assert "streamWriter(" in planner
    assert "is_streaming" in planner
    assert "streamWriter(" in source_of("pyspark.sql.worker.python_streaming_sink_runner")
