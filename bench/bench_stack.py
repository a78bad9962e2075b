"""Stack evaluation time and user-data size for 2, 64 and 1024 nodes (not a test).

    python bench/bench_stack.py [--repeat N]

Runs the real program (`infra.stack.run()` -> `infra.cluster.build`) under the offline
plan's mocks, with the dev stack file's config resized: 2 nodes in one block, 64 in
one block, 1024 across 16 blocks of 64.

Two figures per size, each the best (minimum) of N runs, with the median beside it; the
minimum is the least disturbed by other work on the machine (timeit's convention):
  process s  a fresh Python process that imports and evaluates the program, as the
             Pulumi language host does on every `pulumi preview`/`up` (interpreter
             start, imports, evaluation, every resource registered). This is the
             stack evaluation time users wait for, and the 1.5x criterion.
  eval s     only the evaluation inside an already warm process (no imports): the
             marginal cost of the resources themselves.
Nodes come from one Auto Scaling group per block and one launch template for the
cluster, so the resource count grows by one group per block, never with nodes: 64 nodes
in one block cost the same as 2. Both columns include the one user-data render, a fixed
cost.
"""

from __future__ import annotations

import argparse
import base64
import copy
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # run as a script from anywhere

SIZES = ((2, 1), (64, 1), (1024, 16))  # (nodes, blocks of up to 64)


def sized(raw: dict, nodes: int, blocks: int) -> dict:
    raw = copy.deepcopy(raw)
    az = raw["network"]["availability_zone"]
    per = -(-nodes // blocks)
    raw["capacity"] = {
        "nodes": nodes,
        "capacity_blocks": [
            {
                "name": f"b{i:02d}",
                "reservation_id": f"cr-{i:017x}",
                "instance_count": per,
                "availability_zone": az,
                "start": "2026-12-01T11:30:00Z",
                "end": "2026-12-08T11:30:00Z",
            }
            for i in range(blocks)
        ],
    }
    return raw


def one(nodes: int, blocks: int, warm: bool) -> dict:
    """Evaluate once in this process; with `warm`, after an untimed warm-up run."""
    from offline.mocks import run_under_mocks
    from offline.plan import load_stack_config

    base, region = load_stack_config("dev")
    raw = sized(base, nodes, blocks)
    if warm:
        run_under_mocks(raw, region)
    t0 = time.perf_counter()
    mocks, _, _, node_files = run_under_mocks(raw, region)
    return {
        "eval_s": time.perf_counter() - t0,
        "resources": len(mocks.resources),
        "user_data": len(node_files.user_data),
        "user_data_b64": len(base64.b64encode(node_files.user_data)),
    }


def in_fresh_process(nodes: int, blocks: int) -> tuple[float, dict]:
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, __file__, "--one", str(nodes), str(blocks)],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    )
    return time.perf_counter() - t0, json.loads(proc.stdout)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--one", nargs=2, type=int, metavar=("NODES", "BLOCKS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one(*args.one, warm=False)))
        return 0

    proc_s, eval_s = {}, {}
    print(
        f"{'nodes':>6} {'blocks':>6} {'resources':>9} {'process s min/median':>21} {'eval s min/median':>18} "
        f"{'user-data B':>12} {'base64 B':>9}"
    )
    for nodes, blocks in SIZES:
        runs = [in_fresh_process(nodes, blocks) for _ in range(args.repeat)]
        warm = [one(nodes, blocks, warm=(i == 0)) for i in range(args.repeat)]
        p = [r[0] for r in runs]
        e = [w["eval_s"] for w in warm]
        proc_s[nodes], eval_s[nodes] = min(p), min(e)
        info = runs[0][1]
        print(
            f"{nodes:>6} {blocks:>6} {info['resources']:>9} {min(p):>10.3f}/{statistics.median(p):<10.3f} "
            f"{min(e):>8.3f}/{statistics.median(e):<9.3f} {info['user_data']:>12} {info['user_data_b64']:>9}"
        )
    ratio = proc_s[1024] / proc_s[2]
    print(f"1024 vs 2 nodes, stack evaluation (process): {ratio:.2f}x (target <= 1.5x)")
    print(
        f"1024 vs 2 nodes, warm evaluation only:       {eval_s[1024] / eval_s[2]:.2f}x "
        f"(17 groups vs 2; one launch template either way)"
    )
    return 0 if ratio <= 1.5 else 1


if __name__ == "__main__":
    sys.exit(main())
