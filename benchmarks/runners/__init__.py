"""One runner script per Python client; each runs in its own subprocess.

Invoked by the harness as ``python -m benchmarks.runners.<client>_runner --spec JSON --result
FILE``. A runner connects and fetches the topic's metadata, then times the workload from its
first send to its last acknowledgement, and writes a JSON result (see
:func:`benchmarks.runners.common.finish`). It never decides whether the run succeeded: the
harness checks the broker's high watermarks.
"""
