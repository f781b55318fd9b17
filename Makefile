# Two commands do everything on a fresh machine with Python 3.11 and Java 17:
#   make demo   creates .venv when missing, installs everything, runs the main job
#   make test   creates .venv when missing, installs everything, runs the whole test suite
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV ?= .venv
PY := $(VENV)/bin/python
# Spark starts Python workers with PYSPARK_PYTHON; point it at the venv (see docs/spark.md).
export PYSPARK_PYTHON := $(abspath $(PY))
export SPARK_LOCAL_IP := 127.0.0.1

.PHONY: demo test test-quick lint clean browser

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

demo: $(VENV)/.installed
	$(PY) -m jobs.main

# two xdist workers: the Spark tests in one (one SparkSession), the rest beside them (tests/conftest.py)
test: $(VENV)/.installed
	$(PY) -m pytest -n 2 --dist loadgroup

test-quick: $(VENV)/.installed
	$(PY) -m pytest -n 2 --dist loadgroup -m "not slow"

lint: $(VENV)/.installed
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache
