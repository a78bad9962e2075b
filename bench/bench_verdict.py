"""Verdict engine speed: big logs and long lines (issue 11: parsing must be linear).

Prints, for each shape, its size and the seconds `evaluate()` takes (best of --repeat):
- a 50 MB log of one nccl-tests run whose rank processes print NCCL_DEBUG=INFO lines
  (the usual way a log gets big), labelled by `srun -l`;
- a 50 MB log of many complete runs back to back (every real log of tests/data/verdict
  joined, again and again: the splitter and every parser at once);
- single 1 MB lines of shapes that make backtracking regular expressions go quadratic,
  each in front of a real log.

Usage: python bench/bench_verdict.py [--mb 50] [--repeat 3] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from nodeside import verdict  # noqa: E402

DATA = ROOT / "tests" / "data" / "verdict"
LONG_LINES = {
    "word characters": "a" * 1_000_000,
    "repeated fi_": "fi_" * 340_000,
    "repeated srun labels": "0: " * 330_000,
    "spaces": " " * 1_000_000 + "x",
    "digits": "9" * 1_000_000,
    "NCCL host prefixes": "x:1:1 [0] NCCL " * 60_000,
    "fi_pingpong words": "fi_pingpong " * 80_000,
    "Rank line pieces": "Rank 0 Pid 1 on " * 60_000,
    "ping-pong row head": "64 10 =10 " + "1" * 1_000_000,
    "No such": "No such" * 140_000,
    "result row of numbers": "8 2 float " + "1.0 " * 250_000,
    "header then labels": "# nThread 1 nGpus 1 minBytes 8 maxBytes 8 step: 2(factor) " + "0: " * 300_000,
}


def info_log(mb: int) -> str:
    """One run: header, rank lines, then NCCL INFO lines from 16 tasks until mb, then the table."""
    run = [ln[3:] for ln in (DATA / "efa_p5_allreduce_16g.log").read_text().splitlines()]
    info = [
        f"{t:2d}: gpu-{t // 8}:{4000 + t}:{4100 + t} [{t % 8}] NCCL INFO Channel {c:02d}/0 : {t}[{t % 8}] -> "
        f"{(t + 8) % 16}[{t % 8}] [send] via NET/AWS Libfabric/{t % 8}/GDRDMA"
        for c in range(32)
        for t in range(16)
    ]
    block = "\n".join(info) + "\n"
    body = block * max(1, (mb << 20) // len(block))
    return f" 0: {run[0]}\n{body}" + "".join(f" 0: {ln}\n" for ln in run[1:])


def many_runs_log(mb: int) -> str:
    one = "".join(p.read_text() for p in sorted(DATA.glob("*.log")))
    return one * max(1, (mb << 20) // len(one))


def best(text: str, repeat: int) -> tuple[float, dict]:
    times, r = [], {}
    for _ in range(repeat):
        start = time.perf_counter()
        r = verdict.evaluate(text, expect_transport="efa", expect_nics=32, min_algbw=240.0)
        times.append(time.perf_counter() - start)
    return min(times), r


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mb", type=int, default=50)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--json", type=Path)
    a = p.parse_args()
    tail = (DATA / "efa_p5_allreduce_16g.log").read_text()
    shapes = {
        f"{a.mb} MB, one run with NCCL INFO lines": info_log(a.mb),
        f"{a.mb} MB, complete runs back to back": many_runs_log(a.mb),
    }
    shapes.update({f"1 MB line: {k}": v + "\n" + tail for k, v in LONG_LINES.items()})
    out = []
    for name, text in shapes.items():
        secs, r = best(text, a.repeat)
        row = {"shape": name, "mbytes": round(len(text) / (1 << 20), 1), "seconds": round(secs, 3)}
        row.update(runs=len(r["runs"]), verdict=r["verdict"])
        out.append(row)
        print(f"{name:48} {row['mbytes']:7.1f} MB {row['seconds']:8.3f} s  {row['runs']:6d} run(s) {r['verdict']}")
    if a.json:
        a.json.write_text(json.dumps(out, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
