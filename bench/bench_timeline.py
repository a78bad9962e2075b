"""The timeline model's longer run: many random timelines (tests/model/test_timeline.py's
strategy), with the figures: examples run, time per example, program runs and cache hits,
invariant checks made.

    venv/bin/python bench/bench_timeline.py 1000   (the argument: examples; default 1000)
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hypothesis import HealthCheck, given, settings  # noqa: E402

import tests.model.test_timeline as timeline_test  # noqa: E402
from tests.support import timeline  # noqa: E402


def main() -> int:
    examples = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
    figures = {"examples": 0, "checks": 0, "violations": 0}

    @settings(max_examples=examples, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(timeline_test.OPS_LISTS)
    def run(ops):
        w = timeline_test.play_ops(ops)
        figures["examples"] += 1
        figures["checks"] += w.checks
        figures["violations"] += len(w.violations)
        assert w.violations == [], w.violations

    start = time.monotonic()
    run()
    took = time.monotonic() - start
    n = max(figures["examples"], 1)
    print(f"examples run:       {figures['examples']}")
    print(f"time per example:   {took / n * 1000:.1f} ms ({took:.1f} s in all)")
    print(f"program runs:       {timeline.STATS['program_runs']} (cache hits {timeline.STATS['cache_hits']})")
    print(f"invariant checks:   {figures['checks']} group-at-size checks, plus every request and drain")
    print(f"violations:         {figures['violations']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
