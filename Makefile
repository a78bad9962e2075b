# The README's two commands: `make local-cluster` (main job without AWS) and
# `make test`. Both install what they need first.
PYTHON ?= python3
STACK ?= dev
OUT ?= build/render-$(STACK)

.PHONY: deps test render bench
deps:
	PYTHON=$(PYTHON) ./scripts/install-deps.sh

# pytest exits 5 when it collected no tests; that is a failure here, not a pass.
test: deps
	@$(PYTHON) -m pytest -q; rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "make test: pytest ran no tests" >&2; exit 1; fi; exit $$rc

render: deps
	$(PYTHON) -m infra.render --stack $(STACK) --out $(OUT)

bench: deps
	$(PYTHON) bench/bench_stack.py

-include mk/*.mk
