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

.PHONY: demo test test-quick lint clean browser protos

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

lint: $(VENV)/.installed
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy

clean:
	rm -rf $(VENV) $(V5_VENV) $(NODE5_DIR) build *.egg-info .pytest_cache .mypy_cache .ruff_cache
