"""The benchmark suite: aiokprod against its peers on one local Apache Kafka, in one run.

``python -m benchmarks`` (or ``make bench``) starts a single-node Kafka from the Maven jars,
runs every client in its own subprocess against a fresh topic per run, verifies on the broker
that every record arrived, and writes ``benchmarks/results/latest.{json,md}``,
``docs/benchmarks.png`` and the results section of ``docs/benchmarks.md``.

Modules:

* :mod:`benchmarks.settings`: the common settings, the workloads and the clients.
* :mod:`benchmarks.harness`: the orchestrator (broker, topics, subprocesses, verification).
* :mod:`benchmarks.runners`: one runner script per Python client; the Java perf tool is driven
  by :mod:`benchmarks.java_perf`.
* :mod:`benchmarks.report`: the markdown tables, the chart and the docs page.
* :mod:`benchmarks.profiling`: a py-spy profile of the aiokprod runner.
"""
