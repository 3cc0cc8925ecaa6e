# aiokprod: every target creates the virtualenv and installs what it needs on first use.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
# the benchmark suite's peers and tools too (make bench; make lint type-checks benchmarks/)
BENCH_STAMP := $(VENV)/.installed-bench

.PHONY: demo test test-compiled test-uvloop wheels test-unit test-versions test-spark-chaos test-under-load test-pythons lint format docs docs-check kafka bench clean simulate

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test,dev,spark]'
	touch $(STAMP)

## demo: start a local Apache Kafka, run the quickstart against it, stop Kafka
demo: $(STAMP)
	$(PY) -m aiokprod.testing exec --topic quickstart:6 -- $(PY) examples/quickstart.py

## test: every test, unit and integration (starts local Kafka brokers itself)
test: $(STAMP)
	$(PY) -m pytest

## test-compiled: the unit tests (the simulator included) against the optional mypyc build
##                (docs/compiled.md), installed from a wheel built with AIOKPROD_MYPYC=1 into
##                its own venv (.venv-mypyc; ~3 min the first time)
MYPYC_VENV  := .venv-mypyc
MYPYC_STAMP := $(MYPYC_VENV)/.installed
# The compiled wheel is built once, into dist/compiled, and installed from there: what
# test-compiled tests is the file `make wheels` ships.
MYPYC_WHEEL := $(wildcard dist/compiled/aiokprod-*.whl)
$(MYPYC_STAMP): pyproject.toml setup.py $(shell find aiokprod -name '*.py') $(if $(MYPYC_WHEEL),,FORCE)
	rm -rf $(MYPYC_VENV) build dist/compiled
	$(PYTHON) -m venv $(MYPYC_VENV)
	$(MYPYC_VENV)/bin/python -m pip install --quiet --upgrade pip 'setuptools>=77' wheel 'mypy>=1.11'
	$(MYPYC_VENV)/bin/python -m pip install --quiet '.[test,spark]'  # the dependencies mypyc type-checks against
	AIOKPROD_MYPYC=1 $(MYPYC_VENV)/bin/python -m pip wheel --quiet --no-build-isolation --no-deps --wheel-dir dist/compiled .
	$(MYPYC_VENV)/bin/python -m pip install --quiet --no-deps --force-reinstall dist/compiled/aiokprod-*.whl
	rm -rf build
	touch $(MYPYC_STAMP)

# The venv's pytest script, not `python -m pytest`: that would put the source tree (pure
# Python) first on sys.path.
test-compiled: $(MYPYC_STAMP)
	AIOKPROD_EXPECT_COMPILED=1 $(MYPYC_VENV)/bin/pytest -p no:cacheprovider tests/unit

## wheels: the release wheels in dist/ (docs/compiled.md, "Installing"): the pure-Python one
##         (py3-none-any: every platform, CPython >= 3.11) and the compiled one for this
##         platform and CPython (mypyc; the same file test-compiled tests), then checks both
wheels: $(MYPYC_STAMP)
	rm -rf build dist/*.whl
	$(MYPYC_VENV)/bin/python -m pip wheel --quiet --no-build-isolation --no-deps --wheel-dir dist .
	rm -rf build
	cp dist/compiled/aiokprod-*.whl dist/
	$(MYPYC_VENV)/bin/python tools/check_wheels.py dist

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
##                   Spark's own format("kafka"), more driver kills; prints the chaos table and
##                   saves it to benchmarks/results/spark-chaos.json (~30-40 min here)
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
##       and on the benchmarks (pyproject.toml's settings: strict)
LINTED := aiokprod tests examples benchmarks tools docs/gen_config.py docs/check_site.py docs/griffe_sphinx_roles.py
lint: $(BENCH_STAMP)
	$(VENV)/bin/ruff check $(LINTED)
	$(VENV)/bin/ruff format --check $(LINTED)
	$(VENV)/bin/mypy --strict aiokprod examples
	$(VENV)/bin/mypy tests
	$(VENV)/bin/mypy benchmarks

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

## kafka: run a local single-node Apache Kafka until Ctrl-C
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
	rm -rf $(VENV) $(MYPYC_VENV) .venv-py3.* dist .pytest_cache .mypy_cache .ruff_cache
