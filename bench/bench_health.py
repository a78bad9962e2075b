"""The health program's own run time with every tool present (issue 18: goal under 5 s).

Runs nodeside/health.py as slurmd runs it, in a sandbox where every tool it calls is a
fake that answers at once (tests/support/health_node.py: nvidia-smi, dcgmi, chronyc,
munge, sinfo, scontrol, a 32-device EFA tree, a kernel log of --log-lines lines with XIDs),
so the figure is the program's own cost: Python start-up, eleven checks, the process
launches, the XID scan and the records. Real tools add their own time on a node
(nvidia-smi about 0.1-1 s per call, `dcgmi diag -r 1` seconds).

`--real-tools`: every tool this machine really has replaces its fake (nvidia-smi, dcgmi,
chronyc, munge/unmunge, dmesg: the XID source becomes the kernel log), and the clock is
measured against a real SNTP exchange with the lanes' reference (localcluster/timesync.py);
the run changes nothing in Slurm (--no-slurm), since the real sinfo/scontrol need a
controller. The first line says which tools were real.

Prints one line per run and the best, median and worst; exit 1 when the median is not
under --goal seconds.

Usage: python bench/bench_health.py [--runs 5] [--log-lines 200000] [--goal 5] [--real-tools] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support.health_node import make_node  # noqa: E402

# Tools the program calls that a machine may really have; sinfo/scontrol need a controller.
REAL_CANDIDATES = ("nvidia-smi", "dcgmi", "chronyc", "munge", "unmunge", "dmesg", "timedatectl")


def use_real_tools(node) -> tuple[list[str], list[str], list[str]]:
    """Drop the fakes of the tools this machine has; (real tools, extra health args, cluster.env lines)."""
    real = [t for t in REAL_CANDIDATES if shutil.which(t)]
    for t in real:
        (node.root / "bin" / t).unlink(missing_ok=True)
    env = []
    if "dmesg" in real:
        env.append("HEALTH_XID_SOURCE=kernel")
    if "munge" in real and not Path("/run/munge/munge.socket.2").exists():
        real = [t for t in real if t not in ("munge", "unmunge")]  # no munged here: keep the fakes
    return real, ["--no-slurm"], env


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--log-lines", type=int, default=200_000, help="kernel log lines before the first run")
    p.add_argument("--goal", type=float, default=5.0)
    p.add_argument("--real-tools", action="store_true", help="use the tools this machine has instead of fakes")
    p.add_argument("--json", type=Path)
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-health-") as tmp:
        node = make_node(Path(tmp), efa=32)
        extra: list[str] = []
        reference = None
        try:
            if args.real_tools:
                from localcluster import timesync

                real, extra, env_lines = use_real_tools(node)
                reference = timesync.serve("127.0.0.1", 0)
                env_lines.append(f"HEALTH_CLOCK_REFERENCE=127.0.0.1:{reference.getsockname()[1]}")
                with (node.root / "etc" / "cluster.env").open("a") as f:
                    f.write("".join(line + "\n" for line in env_lines))
                print(f"real tools: {', '.join(real) or 'none'}; clock: a real SNTP exchange; the rest faked")
            with node.xid_log.open("a") as f:
                for i in range(args.log_lines):
                    f.write(f"[{10 + i / 1000:12.6f}] eth0: some kernel message {i}\n")
            node.add_xid(13)
            times, own = [], []
            for n in range(args.runs):
                node.add_xid(31)  # something new to read every run
                start = time.monotonic()
                record = node.run(*extra, path=f"{node.root / 'bin'}:/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin")
                times.append(time.monotonic() - start)
                own.append(record["seconds"])
                label = "first run (whole log)" if n == 0 else "next run (new lines)"
                print(f"run {n + 1}: {times[-1]:.3f} s wall, {own[-1]:.3f} s in the program, {label}")
        finally:
            node.stop()
            if reference is not None:
                reference.close()
    median = statistics.median(times)
    print(f"best {min(times):.3f} s, median {median:.3f} s, worst {max(times):.3f} s (goal < {args.goal} s)")
    if args.json:
        args.json.write_text(json.dumps({"wall": times, "program": own, "goal": args.goal}, indent=2) + "\n")
    return 0 if median < args.goal else 1


if __name__ == "__main__":
    sys.exit(main())
