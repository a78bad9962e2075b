# The README's commands: `make check` (fast loop: no root, no apt), `make test`
# (everything, as root), `make local-cluster` (main job without AWS).
# The interpreter that creates the virtualenv (Debian's python3 works: nothing is
# installed into it, PEP 668); everything else runs in the virtualenv.
PYTHON ?= python3
STACK ?= dev
OUT ?= build/render-$(STACK)
# The project virtualenv: the directory Pulumi.yaml names, so `pulumi`, `make check`,
# `make test` and `make local-cluster` share one set of pinned packages
# (tests/repo/test_install.py keeps the two names equal).
VENV ?= venv
VENV_PYTHON = $(VENV)/bin/python
# Recipes that run tests or the local cluster see the virtualenv first on PATH, as an
# activated virtualenv would (subprocesses that call python3 get the same packages).
VENV_PATH = PATH="$(abspath $(VENV))/bin:$$PATH"
FAST ?= not slurm and not localcluster and not faithful and not package
# Every test that needs root or a daemon lives here; `make check` does not even collect it
# (the markers above stay, so `-m` still selects lanes within it).
DAEMON_TESTS ?= tests/daemons
# The config fuzz's case count in `make check` (the first cases of the same seeded
# sequence); `make test` runs all of them.
FUZZ_CASES ?= 100
# The CLI fuzz's cases per CLI in `make check` (tests/clitools/test_cli_fuzz.py; `make test`
# runs 300 per CLI).
CLI_FUZZ_CASES ?= 30
# The timeline model's random timelines in `make check` (the first of the same seeded
# sequence; `make test` runs 200, bench/bench_timeline.py more).
TIMELINE_CASES ?= 10
# Fresh processes of the plan writer's refusal test in `make check` (its exit-time
# traceback showed on some runs only; tests/offline/test_plan_cli.py; `make test` runs 4).
REFUSAL_RUNS ?= 1
# pytest-xdist workers for `make check` (0 runs in one process): one more than the cores,
# since a worker waiting on a subprocess, a sleep or a lock leaves its core to the extra
# one (2 cores: 54-56 s against 60-62 s with one worker per core, runs taken in turns).
# Whole modules go to a worker (--dist loadscope), so a module's fixtures (a program run,
# a render, fresh processes) are built once, not once per worker; tests/conftest.py hands
# out the longest modules first.
JOBS ?= $(shell echo $$(( $$(nproc) + 1 )))
# The same for the tests outside tests/daemons in `make test`, which run (niced) beside
# the daemon tests: one per core, so the lanes' daemons keep their share.
TEST_JOBS ?= auto
# Enroot/Pyxis release tarballs for the faithful lane's local mirror (scripts/vendor-dir.sh;
# `make vendor` fetches them into ./vendor).
GPU_CLUSTER_VENDOR_DIR ?= $(shell scripts/vendor-dir.sh)
export GPU_CLUSTER_VENDOR_DIR

.PHONY: deps test render bench check check-deps lint typecheck golden lock diff vendor
# Debian's packages (as root) and the virtualenv (scripts/install-deps.sh).
deps:
	PYTHON=$(PYTHON) VENV=$(VENV) ./scripts/install-deps.sh

# Machine lanes (tests/support/lane_clusters.py; CONTRIBUTING.md "What `make test` costs,
# and the CI budget"). The broad faithful module (tests/daemons/test_localcluster_faithful.py:
# cluster, container jobs, reboot, late /fsx, a local apt repository) runs on every lane in
# FAITHFUL_LANES, its node-behaviour tests and the lifecycle and dedicated-controller modules
# on LIFECYCLE_LANE, one shared cluster per lane: slurm2311, the nodes' own Slurm 23.11 (built
# here, installed through step 20's apt path). bookworm (22.05) and trixie (24.11) keep the
# smaller set: their roots baked by step 20 from Debian's archive (test_images_root) and
# 22.05's daemons reading the rendered files (test_slurm_oracle). One broad run instead of
# two pays for the Slurm build (CI budget: docs/images.md).
FAITHFUL_LANES ?= slurm2311
LIFECYCLE_LANE ?= slurm2311

# Everything: the lane roots build in the background, the tests outside tests/daemons run
# under xdist beside the daemon tests (scripts/test-all.sh says why each part runs when).
# pytest's "no tests ran" (exit 5) is a failure here, not a pass.
test: deps
	@GPU_CLUSTER_FAITHFUL_LANES=$(FAITHFUL_LANES) GPU_CLUSTER_LIFECYCLE_LANE=$(LIFECYCLE_LANE) \
	  VENV_PYTHON=$(VENV_PYTHON) JOBS=$(TEST_JOBS) $(VENV_PATH) scripts/test-all.sh

render: check-deps
	$(VENV_PYTHON) -m offline.plan --stack $(STACK) --out $(OUT)

# What a change does to every stack, offline: `make diff BASE=origin/main` (FORMAT=markdown
# for a PR comment, OUT=file to write it; OUT's default above is render's, so only an OUT
# given on the command line or in the environment counts). Needs only the Python packages.
BASE ?= origin/main
FORMAT ?= text
diff: check-deps
	$(VENV_PYTHON) -m offline.review --base $(BASE) --format $(FORMAT) $(if $(filter-out file,$(origin OUT)),--out $(OUT))

# The release sources the local lanes build from, downloaded and checked against
# model/pins.py into ./vendor (MIRROR=file:///dir or http://host/path fetches <MIRROR>/<file>).
vendor: check-deps
	$(VENV_PYTHON) -m localcluster.vendor --dir vendor $(if $(MIRROR),--mirror $(MIRROR))

bench: check-deps
	$(VENV_PYTHON) bench/bench_stack.py

# --- fast loop --------------------------------------------------------------------------
# pip only (hash-checked lock, shellcheck comes as a wheel), no root, no apt; refills
# only when the lock changes.
check-deps: $(VENV)/.installed
$(VENV)/.installed: requirements-dev.txt requirements.txt pyproject.toml scripts/install-deps.sh
	PYTHON=$(PYTHON) VENV=$(VENV) ./scripts/install-deps.sh --venv

# Everything that needs no daemon, no root and no apt. The shellcheck runs are tests
# (tests/userdata/test_userdata_render.py, tests/repo/test_shell_scripts.py), so the file lists have
# one home; they skip when shellcheck is missing, hence the explicit probe first.
# Bytecode is kept under build/pycache whatever PYTHONDONTWRITEBYTECODE says: without it
# each xdist worker and each Python the tests start (CLIs, node programs, the gate's
# verdict) compiles every module it imports again, about 10 s of a run; the prefix
# keeps the tree itself free of __pycache__.
check: check-deps
	@export PATH="$(CURDIR)/$(VENV)/bin:$$PATH" PYTHONDONTWRITEBYTECODE= PYTHONPYCACHEPREFIX="$(CURDIR)/build/pycache"; set -e; \
	shellcheck --version >/dev/null || { echo "make check: shellcheck missing from $(VENV)" >&2; exit 1; }; \
	rc=0; \
	echo "== ruff check"; ruff check --output-format concise . || rc=1; \
	echo "== ruff format --check"; ruff format --check --output-format concise . || rc=1; \
	echo "== mypy"; mypy || rc=1; \
	echo "== pytest -m '$(FAST)'"; GPU_CLUSTER_FUZZ_CASES=$(FUZZ_CASES) GPU_CLUSTER_CLI_FUZZ_CASES=$(CLI_FUZZ_CASES) GPU_CLUSTER_TIMELINE_CASES=$(TIMELINE_CASES) GPU_CLUSTER_REFUSAL_RUNS=$(REFUSAL_RUNS) python -m pytest -q -n $(JOBS) --dist loadscope -m "$(FAST)" --ignore=$(DAEMON_TESTS) || { r=$$?; [ $$r -eq 5 ] && echo "make check: pytest ran no tests" >&2; rc=1; }; \
	exit $$rc

lint: check-deps
	$(VENV)/bin/ruff check . && $(VENV)/bin/ruff format --check .

typecheck: check-deps
	$(VENV)/bin/mypy

# Rewrites tests/golden/** from the current renderers (every test module that takes the
# update_golden fixture); review the diff before committing.
GOLDEN_TESTS = $(shell grep -rl --include='test_*.py' update_golden tests)
golden: check-deps
	$(VENV)/bin/python -m pytest -q --update-golden $(GOLDEN_TESTS)

# Re-resolves the hashed locks from the .in files (keeps current pins; LOCKFLAGS=--upgrade
# moves them). Resolves against the public index only: a machine's local pip config
# (find-links, extra indexes) would pin hashes of local copies instead of every wheel.
LOCKFLAGS ?=
lock:
	test -x build/lock-venv/bin/pip-compile || { $(PYTHON) -m venv build/lock-venv && \
	  build/lock-venv/bin/pip install -q --disable-pip-version-check pip-tools==7.6.2; }
	for f in requirements requirements-dev; do \
	  env -u PIP_FIND_LINKS -u PIP_EXTRA_INDEX_URL -u PIP_INDEX_URL PIP_CONFIG_FILE=/dev/null \
	    CUSTOM_COMPILE_COMMAND="make lock" build/lock-venv/bin/pip-compile -q $(LOCKFLAGS) \
	    --generate-hashes --allow-unsafe --strip-extras --no-emit-index-url --no-emit-find-links \
	    -o $$f.txt $$f.in || exit 1; \
	done
	$(PYTHON) scripts/aws-requirements.py

-include mk/*.mk
