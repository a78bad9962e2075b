"""`python -m localcluster up|down|status|replace`: the local cluster's commands."""

from __future__ import annotations

import argparse
import os
import sys

from localcluster.cluster import LocalCluster


def _root_check() -> None:
    if os.geteuid() != 0:
        raise SystemExit("the local cluster needs root (network namespaces, mounts, cgroups)")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m localcluster",
                                description="A real Slurm cluster from gpu-cluster's user data, in namespaces")
    p.add_argument("--name", default="local", help="cluster name (and state directory); default 'local'")
    p.add_argument("--subnet", type=int, default=0, help="third octet of 10.77.X.0/24 (default 0)")
    sub = p.add_subparsers(dest="cmd", required=True)
    up = sub.add_parser("up", help="render the user data and boot N nodes")
    up.add_argument("--nodes", "-n", type=int, default=2)
    up.add_argument("--timeout", type=float, default=900, help="seconds for the whole bring-up")
    up.add_argument("--no-demo", action="store_true", help="skip sinfo/srun/sbatch/validation output")
    sub.add_parser("down", help="remove every process, namespace, link, mount and directory")
    sub.add_parser("status", help="nodes, their boot status and sinfo")
    rp = sub.add_parser("replace", help="destroy NODE and boot a fresh node from the same user data")
    rp.add_argument("node")
    a = p.parse_args(argv)
    _root_check()
    lc = LocalCluster(a.name, a.subnet, out=lambda s="": print(s, flush=True))
    if a.cmd == "up":
        if lc.c.nodes:
            raise SystemExit(f"local cluster '{a.name}' is already up; run `python -m localcluster down` first")
        try:
            secs = lc.up(a.nodes, timeout=a.timeout)
        except (TimeoutError, RuntimeError) as e:
            print(f"bring-up failed: {e}", file=sys.stderr)
            return 1
        print(f"\nall {a.nodes} nodes idle in sinfo {secs:.1f}s after start")
        if not a.no_demo:
            lc.show()
        print("\nremove it with: make local-cluster-down")
    elif a.cmd == "down":
        removed = lc.c.down()
        print(f"local cluster '{a.name}': removed {len(removed)} item(s)" if removed
              else f"local cluster '{a.name}': nothing to remove")
    elif a.cmd == "status":
        lc.status()
    elif a.cmd == "replace":
        w = lc.replace(a.node)
        if w.rc != 0:
            print(f"{w.node.hostname}: boot failed (exit {w.rc})", file=sys.stderr)
            return 1
        lc.wait_idle(len(lc.c.nodes))
        lc.show_srun()
    return 0
