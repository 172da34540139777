# ringmq: the two commands are `make run` and `make test`.
PY      ?= python3
VENV    ?= .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed
HYPOTHESIS_PROFILE ?= dev
export HYPOTHESIS_PROFILE

.PHONY: install run test lint unit bench clean

RUN_STAMP := $(VENV)/.installed-run

$(BIN)/uv:
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip uv

# Everything the tests, lint and benchmarks need (the Spark extra included).
$(STAMP): pyproject.toml | $(BIN)/uv
	$(BIN)/uv pip install -q --python $(BIN)/python -e '.[test,lint,spark]'
	touch $(STAMP)

# Only what the broker needs to run.
$(RUN_STAMP): pyproject.toml | $(BIN)/uv
	$(BIN)/uv pip install -q --python $(BIN)/python -e .
	touch $(RUN_STAMP)

# rhea, the JavaScript AMQP 1.0 client of tests/integration/amqp10/test_rhea.py (best effort:
# without npm or the registry those tests skip with the reason; npm ci writes the stamp).
RHEA    := tests/integration/amqp10/rhea
RHEA_STAMP := $(RHEA)/node_modules/.package-lock.json

$(RHEA_STAMP): $(RHEA)/package-lock.json
	@if command -v npm >/dev/null 2>&1; then \
	  (cd $(RHEA) && npm ci --no-audit --no-fund --loglevel=error >/dev/null) \
	    || echo "rhea could not be installed: its AMQP 1.0 tests will be skipped"; \
	else echo "no npm on PATH: the rhea AMQP 1.0 tests will be skipped"; fi

# The browser builds of @stomp/stompjs and MQTT.js that tests/integration/test_browser.py's page
# loads in headless Chromium (best effort, as rhea above).
BROWSER := tests/integration/browser
BROWSER_STAMP := $(BROWSER)/node_modules/.package-lock.json

$(BROWSER_STAMP): $(BROWSER)/package-lock.json
	@if command -v npm >/dev/null 2>&1; then \
	  (cd $(BROWSER) && npm ci --no-audit --no-fund --loglevel=error >/dev/null) \
	    || echo "stompjs/mqtt.js could not be installed: the browser test will be skipped"; \
	else echo "no npm on PATH: the browser test will be skipped"; fi

# The Debian packages of the console, mosquitto and rabbitmqadmin tests, when missing and run as
# root with apt-get (best effort: otherwise those tests skip and say why).
DEPS_STAMP := $(VENV)/.test-deps

$(DEPS_STAMP): tools/test_deps.sh | $(BIN)/uv
	@tools/test_deps.sh
	@touch $(DEPS_STAMP)

install: $(STAMP) $(RHEA_STAMP) $(BROWSER_STAMP) $(DEPS_STAMP)

# make run ARGS="--amqp-port 5673 --http-port 15673 --data-dir /var/lib/ringmq"
run: $(RUN_STAMP)
	$(BIN)/ringmq serve $(ARGS)

lint: $(STAMP)
	$(BIN)/ruff format --check src tests benchmarks tools
	$(BIN)/ruff check src tests benchmarks tools
	$(BIN)/mypy
	$(BIN)/lint-imports --no-cache  # the layer contracts in pyproject.toml

# Everything: lint and types, the broker's tests, then the Spark tests (need Java 17).
test: lint $(RHEA_STAMP) $(BROWSER_STAMP)
	$(BIN)/pytest -m "not spark" -q
	@if command -v java >/dev/null 2>&1; then $(BIN)/pytest -m spark -q; \
	else echo "SKIPPED: Spark tests (no java on PATH; Java 17 is needed)"; fi

# The fast subset while developing: no Spark, no slow tests.
unit: $(STAMP)
	$(BIN)/pytest -m "not spark and not slow" -q

# 20,000 MQTT connections take over 10 minutes a round: `make bench` runs the quick mode
# (2,000) unless MQTTCONN_BENCH_ARGS says otherwise ("--rounds 2" for the full load).
MQTTCONN_BENCH_ARGS ?= --quick --rounds 1

bench: $(STAMP)  # BENCH_ARGS="--quick --rounds 1 --scenarios a,g", AMQP10_BENCH_ARGS, PROTO_BENCH_ARGS, STREAMPROTO_BENCH_ARGS, CLUSTER_BENCH_ARGS, MQTTCONN_BENCH_ARGS (docs/benchmarks.md)
	@if [ -f benchmarks/engine_bench.py ]; then $(BIN)/python benchmarks/engine_bench.py; fi
	$(BIN)/python benchmarks/paging_bench.py --runs 3
	$(BIN)/python -m benchmarks.run_all $(BENCH_ARGS)
	$(BIN)/python -m benchmarks.amqp10_bench $(AMQP10_BENCH_ARGS)
	$(BIN)/python -m benchmarks.proto_bench $(PROTO_BENCH_ARGS)
	$(BIN)/python -m benchmarks.mqttconn_bench $(MQTTCONN_BENCH_ARGS)
	$(BIN)/python -m benchmarks.streamproto_bench $(STREAMPROTO_BENCH_ARGS)
	$(BIN)/python -m benchmarks.cluster_bench $(CLUSTER_BENCH_ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis

.PHONY: pipeline
pipeline: $(STAMP)  # Spark example: ticks -> ring queue -> windowed aggregates -> LVQ dashboard
	$(BIN)/python -c 'import pyspark, pyarrow' 2>/dev/null || \
		$(BIN)/uv pip install -q --python $(BIN)/python -e '.[spark]'
	$(BIN)/python examples/stock_pipeline.py $(if $(MASTER),--master $(MASTER)) $(PIPELINE_ARGS)
