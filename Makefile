# Two commands do everything on a fresh machine with Python 3.11 and Java 17:
#   make demo   creates .venv when missing, installs everything, runs the main job
#   make test   creates .venv when missing, installs everything, runs the whole test suite
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV ?= .venv
PY := $(VENV)/bin/python
# Spark starts Python workers with PYSPARK_PYTHON; point it at the venv (see docs/spark.md).
export PYSPARK_PYTHON := $(abspath $(PY))
export SPARK_LOCAL_IP := 127.0.0.1

# the official RocketMQ 5.x Python client, for tests/interop/v5/: a venv of its own, since its top-level
# package `rocketmq` is not the one of rocketmq==0.4.4 in $(VENV)
V5_VENV ?= .venv-rmq5
V5_CLIENT ?= rocketmq-python-client==5.1.2
# the official 5.x Node.js client, for tests/interop/v5/test_v5_nodejs.py
NODE5_DIR ?= .node-rmq5
NODE5_CLIENT ?= rocketmq-client-nodejs@1.0.8

# the oldest PySpark the connector supports (pyproject's `spark` extra), in a venv of its own, and the
# Spark tests of the paths that differ by version (docs/spark.md, "Spark versions"): the 4.0/4.1 stream
# reader (latestOffset() without a start, restarts, the AvailableNow fallback, the version errors), batch
# 0 replays, 4.0's Arrow stream writer (plain, idempotent and transactional), batch reads and pushdown
OLDEST_PYSPARK ?= 4.0.5
OLDEST_VENV ?= .venv-oldest-spark
OLDEST_PY := $(OLDEST_VENV)/bin/python
OLDEST_SPARK_TESTS ?= tests/spark/test_versions.py tests/spark/test_source_replay.py tests/spark/test_pushdown.py \
	tests/spark/test_source.py::test_available_now_reads_exactly_the_messages_of_8_queues_on_2_brokers \
	tests/spark/test_source.py::test_stopped_query_continues_where_it_stopped \
	tests/spark/test_source.py::test_explicit_registration_still_works \
	tests/spark/test_source.py::test_batch_reads_between_offsets_and_times \
	tests/spark/test_sink.py::test_rate_stream_into_a_topic_is_read_back_completely \
	tests/spark/test_sink.py::test_batch_write_keeps_bodies_tags_keys_and_properties \
	tests/spark/test_exactly_once.py::test_a_task_that_fails_after_sending_some_rows_is_run_again_without_duplicates \
	tests/spark/test_sink_transactions.py::test_a_failed_task_leaves_nothing_visible_and_the_rerun_writes_every_row_once

.PHONY: demo test test-quick test-oldest-spark lint clean browser protos

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	# compat mode puts the source tree itself on sys.path, so Spark's pkgutil scan finds
	# pyspark_rocketmq and Spark's Python workers import the code being developed. The `spark` extra
# brings PySpark (a plain `pip install rocketspark` has none: docs/getting-started.md).
	$(PY) -m pip install --quiet -e '.[spark,test,dev,dashboard]' --config-settings editable_mode=compat
	$(MAKE) --no-print-directory browser
	touch $@

# the dashboard's browser tests (tests/dashboard/) drive Debian's headless chromium with its chromedriver
browser:
	@if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then :; \
	elif [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver; \
	else sudo -n sh -c 'apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver' \
		|| echo "warning: install chromium and chromium-driver (apt) for tests/dashboard"; fi

$(V5_VENV)/.installed:
	test -x $(V5_VENV)/bin/python || $(PYTHON) -m venv $(V5_VENV)
	$(V5_VENV)/bin/python -m pip install --quiet '$(V5_CLIENT)'
	touch $@

$(NODE5_DIR)/.installed:
	npm install --silent --no-audit --no-fund --prefix $(NODE5_DIR) '$(NODE5_CLIENT)'
	touch $@

# the generated code of broker/grpc/v2/*.proto (committed; run after editing a .proto)
protos: $(VENV)/.installed
	$(PY) -m grpc_tools.protoc -I . --python_out=. --pyi_out=. broker/grpc/v2/definition.proto
	$(PY) -m grpc_tools.protoc -I . --python_out=. --pyi_out=. --grpc_python_out=. broker/grpc/v2/service.proto

demo: $(VENV)/.installed
	$(PY) -m jobs.main

# two xdist workers: the Spark tests in one (one SparkSession), the rest beside them (tests/conftest.py)
test: $(VENV)/.installed $(V5_VENV)/.installed $(NODE5_DIR)/.installed
	$(PY) -m pytest -n 2 --dist loadgroup

test-quick: $(VENV)/.installed $(V5_VENV)/.installed $(NODE5_DIR)/.installed
	$(PY) -m pytest -n 2 --dist loadgroup -m "not slow"

$(OLDEST_VENV)/.installed: pyproject.toml
	test -x $(OLDEST_PY) || $(PYTHON) -m venv $(OLDEST_VENV)
	$(OLDEST_PY) -m pip install --quiet --upgrade pip
	echo 'pyspark==$(OLDEST_PYSPARK)' > $(OLDEST_VENV)/constraints.txt
	$(OLDEST_PY) -m pip install --quiet -c $(OLDEST_VENV)/constraints.txt -e '.[spark,test,dashboard]' --config-settings editable_mode=compat
	touch $@

# the Spark tests whose paths differ by PySpark version, on the oldest one (docs/spark.md, "Spark versions")
test-oldest-spark: $(OLDEST_VENV)/.installed
	PYSPARK_PYTHON=$(abspath $(OLDEST_PY)) $(OLDEST_PY) -m pytest -p no:cacheprovider $(OLDEST_SPARK_TESTS)

lint: $(VENV)/.installed
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy

clean:
	rm -rf $(VENV) $(V5_VENV) $(NODE5_DIR) $(OLDEST_VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache
