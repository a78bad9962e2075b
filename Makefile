# The README's commands: `make check` (fast loop: no root, no apt), `make test`
# (everything, as root), `make local-cluster` (main job without AWS).
PYTHON ?= python3
STACK ?= dev
OUT ?= build/render-$(STACK)
# The fast loop's own virtualenv; the same directory Pulumi.yaml names, so
# `pulumi` and `make check` share one set of pinned packages.
VENV ?= venv
FAST ?= not slurm and not localcluster and not faithful
# Every test that needs root or a daemon lives here; `make check` does not even collect it
# (the markers above stay, so `-m` still selects lanes within it).
DAEMON_TESTS ?= tests/daemons
# The config fuzz's case count in `make check` (the first cases of the same seeded
# sequence); `make test` runs all of them.
FUZZ_CASES ?= 100
# The timeline model's random timelines in `make check` (the first of the same seeded
# sequence; `make test` runs 200, bench/bench_timeline.py more).
TIMELINE_CASES ?= 10
# pytest-xdist workers for `make check` (auto: one per core; 0 runs in one process).
JOBS ?= auto
# Enroot/Pyxis release tarballs for the faithful lane's local mirror (scripts/vendor-dir.sh).
GPU_CLUSTER_VENDOR_DIR ?= $(shell scripts/vendor-dir.sh)
export GPU_CLUSTER_VENDOR_DIR

.PHONY: deps test render bench check check-deps lint typecheck golden lock diff
deps:
	PYTHON=$(PYTHON) ./scripts/install-deps.sh

# Faithful-lane tests run on both OS lanes that bracket the nodes' Ubuntu 24.04
# (Slurm 22.05 and 24.11); the lifecycle tests pin themselves to one lane.
FAITHFUL_LANES ?= bookworm,trixie

# pytest exits 5 when it collected no tests; that is a failure here, not a pass.
test: deps
	@GPU_CLUSTER_FAITHFUL_LANES=$(FAITHFUL_LANES) $(PYTHON) -m pytest -q; rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "make test: pytest ran no tests" >&2; exit 1; fi; exit $$rc

render: deps
	$(PYTHON) -m offline.plan --stack $(STACK) --out $(OUT)

# What a change does to every stack, offline: `make diff BASE=origin/main` (FORMAT=markdown
# for a PR comment, OUT=file to write it; OUT's default above is render's, so only an OUT
# given on the command line or in the environment counts). Needs only the Python packages.
BASE ?= origin/main
FORMAT ?= text
diff:
	$(PYTHON) -m offline.review --base $(BASE) --format $(FORMAT) $(if $(filter-out file,$(origin OUT)),--out $(OUT))

bench: deps
	$(PYTHON) bench/bench_stack.py

# --- fast loop --------------------------------------------------------------------------
# pip only (hash-checked lock, shellcheck comes as a wheel); reinstalls only when the
# lock changes.
check-deps: $(VENV)/.installed
$(VENV)/.installed: requirements-dev.txt requirements.txt
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install -q --disable-pip-version-check --require-hashes -r requirements-dev.txt
	touch $@

# Everything that needs no daemon, no root and no apt. The shellcheck runs are tests
# (tests/userdata/test_userdata_render.py, tests/repo/test_shell_scripts.py), so the file lists have
# one home; they skip when shellcheck is missing, hence the explicit probe first.
check: check-deps
	@export PATH="$(CURDIR)/$(VENV)/bin:$$PATH"; set -e; \
	shellcheck --version >/dev/null || { echo "make check: shellcheck missing from $(VENV)" >&2; exit 1; }; \
	rc=0; \
	echo "== ruff check"; ruff check --output-format concise . || rc=1; \
	echo "== ruff format --check"; ruff format --check --output-format concise . || rc=1; \
	echo "== mypy"; mypy || rc=1; \
	echo "== pytest -m '$(FAST)'"; GPU_CLUSTER_FUZZ_CASES=$(FUZZ_CASES) GPU_CLUSTER_TIMELINE_CASES=$(TIMELINE_CASES) python -m pytest -q -n $(JOBS) -m "$(FAST)" --ignore=$(DAEMON_TESTS) || { r=$$?; [ $$r -eq 5 ] && echo "make check: pytest ran no tests" >&2; rc=1; }; \
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

-include mk/*.mk
