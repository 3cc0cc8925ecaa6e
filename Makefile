# aiokprod: every target creates the virtualenv and installs what it needs on first use.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
# the benchmark suite's peers and tools too (make bench; make lint type-checks benchmarks/)
BENCH_STAMP := $(VENV)/.installed-bench

.PHONY: demo test test-compiled test-uvloop wheels test-unit test-versions test-spark-chaos test-spark-stalls test-under-load test-pythons lint format docs docs-check kafka bench clean simulate model-check

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test,dev,spark]'
	@# the Kerberos tests' GSS bindings: built from source against libkrb5-dev (.ci/run installs
	@# it); without it only a warning here (the Kerberos tests skip), a failure under CI=true
	$(PY) -m pip install --quiet -e '.[gssapi]' || { [ "$$CI" != true ] && \
		echo "warning: the gssapi extra did not install (apt-get install libkrb5-dev): the Kerberos tests will be skipped" >&2; }
	touch $(STAMP)

## demo: start a local Apache Kafka, run the quickstart against it, stop Kafka; says first which
##       build runs it: the pure-Python one of .venv, or with COMPILED=1 the compiled wheel in
##       .venv-mypyc (make test-compiled installs it)
DEMO_PY := $(if $(COMPILED),.venv-mypyc/bin/python,$(PY))
demo: $(STAMP)
	@test -x $(DEMO_PY) || { echo "$(DEMO_PY) is missing: make test-compiled installs it"; exit 1; }
	@# -P: not the source tree (pure Python) first on sys.path
	@echo "make demo runs: $$($(DEMO_PY) -P -m aiokprod --version)"
	$(PY) -m aiokprod.testing exec --topic quickstart:6 -- $(DEMO_PY) examples/quickstart.py

## test: every test, unit and integration (starts local Kafka brokers itself)
test: $(STAMP)
	$(PY) -m pytest

## wheels: the release files in dist/ (docs/compiled.md, "Installing"): the sdist, the pure
##         py3-none-any wheel built from it, and a compiled manylinux_2_17 wheel for every
##         CPython >= 3.11 pyenv has (tools/pythons.py; PYTHONS=... to choose), each built from
##         the sdist with build isolation and AIOKPROD_MYPYC=1, repaired by auditwheel (a glibc
##         symbol newer than 2.17 fails), then all checked by tools/check_wheels.py
##         (tools/build_wheels.py; ~3 min, two builds at a time)
WHEELS_STAMP  := dist/.built
WHEEL_SOURCES := pyproject.toml setup.py MANIFEST.in README.md CHANGELOG.md pyspark_aiokprod.py \
	build_backend/aiokprod_build.py tools/build_wheels.py tools/check_wheels.py tools/pythons.py \
	$(shell find aiokprod -name '*.py')
$(WHEELS_STAMP): $(STAMP) $(WHEEL_SOURCES)
	$(PY) tools/build_wheels.py --dist dist
	touch $@

wheels: $(WHEELS_STAMP)

## test-compiled: the compiled wheels of dist/ (made by make wheels first), each installed from
##                its file into a venv of its Python (.venv-mypyc for this one, .venv-mypyc-py3.X):
##                the whole unit suite, simulator included, on every one; the round-trip
##                integration tests on .venv-mypyc (tools/test_wheels.py). tests/conftest.py
##                fails a run that imports the source tree instead of the wheel.
test-compiled: $(WHEELS_STAMP)
	$(PY) tools/test_wheels.py --dist dist

## test-uvloop: the integration tests of the network and send path (round trip, lifecycle,
##              faults, hostile brokers) on uvloop instead of asyncio's own loop (a few min)
UVLOOP_TESTS ?= event_loop or roundtrip or lifecycle or faults or hostile
test-uvloop: $(STAMP)
	AIOKPROD_TEST_LOOP=uvloop $(PY) -m pytest tests/integration -k "$(UVLOOP_TESTS)" $(PYTEST_ARGS)

## test-versions: the broker version matrix on every supported Apache Kafka release (3.6 to the
##                newest 4.x; 1 and 3 nodes; ~10 min). `make test` runs only its smoke subset.
test-versions: $(STAMP)
	$(PY) -m pytest tests/integration/test_broker_versions.py --kafka-versions=all

## test-spark-chaos: the Spark chaos scenarios long (docs/spark.md, "Chaos-tested"): every
##                   scenario 3 times against our sink exactly-once and at-least-once and
##                   Spark's own format("kafka"), the stream variants, more driver kills (inside
##                   the exactly-once commit too), executor loss and speculation on a standalone
##                   cluster; prints the chaos table and saves it to
##                   benchmarks/results/spark-chaos.json (~36 min here)
test-spark-chaos: $(STAMP)
	AIOKPROD_SPARK_CHAOS=long AIOKPROD_SPARK_CHAOS_JSON=benchmarks/results/spark-chaos.json \
		$(PY) -m pytest tests/integration/test_spark_chaos.py tests/integration/test_spark_chaos_cluster.py -p no:cacheprovider $(PYTEST_ARGS)

## test-unit: only the tests that need no broker
test-unit: $(STAMP)
	$(PY) -m pytest tests/unit

## test-under-load: the integration tests with a CPU hog on every core (tools/load.py): the
##                  hogs end with the tests (killed by PID, also on Ctrl-C or failure) and
##                  never outlive LOAD_SECONDS (default and maximum 2400 = 40 min);
##                  LOAD_HOGS=N for another count, PYTEST_ARGS="-x -k ..." to narrow the run
LOAD_SECONDS ?= 2400
LOAD_HOGS    ?= $(shell nproc 2>/dev/null || echo 2)
test-under-load: $(STAMP)
	$(PY) tools/load.py --hogs $(LOAD_HOGS) --seconds $(LOAD_SECONDS) -- \
		$(PY) -m pytest tests/integration $(PYTEST_ARGS)

## lint: ruff (rules, complexity, format) over all Python code; mypy --strict on the package
##       and the examples; mypy on the tests (bodies checked, annotations optional: pyproject.toml)
##       and on the benchmarks (pyproject.toml's settings: strict), and --strict on the release
##       and on the release tooling (tools/, the build backend); actionlint on the release
##       workflow (built once from the Go module proxy into .venv/bin: needs go) and
##       tools/check_release.py on its cibuildwheel settings (docs/compiled.md, "Releasing")
LINTED := aiokprod pyspark_aiokprod.py tests examples benchmarks tools build_backend docs/gen_config.py docs/check_site.py docs/griffe_sphinx_roles.py
ACTIONLINT := $(VENV)/bin/actionlint
$(ACTIONLINT): | $(STAMP)
	GOBIN=$(abspath $(VENV)/bin) go install github.com/rhysd/actionlint/cmd/actionlint@v1.7.12

lint: $(BENCH_STAMP) $(ACTIONLINT)
	$(VENV)/bin/ruff check $(LINTED)
	$(VENV)/bin/ruff format --check $(LINTED)
	$(VENV)/bin/mypy --strict aiokprod pyspark_aiokprod.py examples
	$(VENV)/bin/mypy tests
	$(VENV)/bin/mypy benchmarks
	MYPYPATH=tools $(VENV)/bin/mypy --strict tools/build_wheels.py tools/check_wheels.py \
		tools/test_wheels.py tools/check_release.py tools/pythons.py build_backend
	$(ACTIONLINT) .github/workflows/*.yml
	$(PY) tools/check_release.py

## format: rewrite all Python code in the project's style (ruff format, then ruff's safe fixes)
format: $(STAMP)
	$(VENV)/bin/ruff format $(LINTED)
	$(VENV)/bin/ruff check --fix $(LINTED)

## test-pythons: the unit tests on every CPython >= 3.11 pyenv has, each in its own venv
##               (.venv-py3.X); PYTHONS="/path/python ..." or SKIP_PYTHONS="3.11" to choose
test-pythons:
	.ci/test-pythons

## docs: build the documentation (mkdocs, strict: a broken link or page fails)
docs: $(STAMP)
	$(VENV)/bin/mkdocs build --strict --quiet

## model-check: the model checker of the Spark sink's exactly-once protocol
##              (docs/design.md, "Exactly-once from Spark"): every interleaving and crash point
##              of the larger configurations of aiokprod/testing/eos_model/configs.py, then
##              WALKS seeded random runs of the widest (make test explores the small ones)
WALKS ?= 20000
model-check: $(STAMP)
	$(PY) -m aiokprod.testing.eos_model --long --walks $(WALKS)

## test-spark-stalls: how long read_committed consumers are held back after an exactly-once
##                    write ends without committing, 20 runs of each scenario (a query stopped
##                    mid-batch with its workers frozen, a failed job with an attempt still
##                    writing, the first query on a fresh broker stopped at once), and a job of
##                    10,000 Spark partitions (~1 hour here)
test-spark-stalls: $(STAMP)
	AIOKPROD_SPARK_CHAOS=long AIOKPROD_STALL_RUNS=20 $(PY) -m pytest -s -p no:cacheprovider \
		tests/integration/test_spark_no_open_transaction.py -k "holds_nobody_back" $(PYTEST_ARGS)
	AIOKPROD_SPARK_CHAOS=long $(PY) -m pytest -s -p no:cacheprovider $(PYTEST_ARGS) \
		"tests/integration/test_spark_exactly_once.py::test_ten_thousand_partitions_in_one_job"

## simulate: the deterministic simulation of the producer under faults (docs/simulation.md);
##           SEEDS=N seeds from START=S (default 10000 from 0); replay one: SEED=X
SEEDS ?= 10000
START ?= 0
simulate: $(STAMP)
	$(PY) -m aiokprod.testing.sim $(if $(SEED),--seed $(SEED) --verbose,--seeds $(SEEDS) --start $(START))

## docs-check: build the site, then render every page in headless Chromium (the system's
##             /usr/bin/chromium: apt-get install -y chromium; none is downloaded) and fail on
##             console errors, missing assets, requests leaving 127.0.0.1, unhighlighted code
docs-check: docs
	$(PY) docs/check_site.py --self-test
	$(PY) docs/check_site.py site

## kafka: run a local single-node Apache Kafka on 127.0.0.1:9092 (a free port, said, when
##        9092 is taken; python -m aiokprod.testing run --port N for another) until Ctrl-C
kafka: $(STAMP)
	$(PY) -m aiokprod.testing run

## bench: aiokprod against its peers on a local Kafka, 3 interleaved repetitions (10-15 min);
##        results in benchmarks/results/, docs/benchmarks.{md,png}.
##        BENCH_ARGS="--quick" for a smoke run; also --clients/--workloads (see --help)
$(BENCH_STAMP): $(STAMP) pyproject.toml
	$(PY) -m pip install --quiet -e '.[test,dev,bench]'
	touch $(BENCH_STAMP)

bench: $(BENCH_STAMP)
	$(PY) -m benchmarks $(BENCH_ARGS)

FORCE:

clean:
	rm -rf $(VENV) .venv-mypyc .venv-mypyc-py3.* .venv-py3.* dist .pytest_cache .mypy_cache .ruff_cache
