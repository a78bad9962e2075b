"""`python -m localcluster up|down|status|replace|reboot|relaunch|launch-block|end-block`: the local cluster's commands."""

from __future__ import annotations

import argparse
import os
import sys

from localcluster.cluster import DEFAULT_LANE, LANES, LocalCluster
from localcluster.profile import PLACEMENTS
from model.tags import ON_DEMAND


def _root_check() -> None:
    if os.geteuid() != 0:
        raise SystemExit("the local cluster needs root (network namespaces, mounts, cgroups)")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m localcluster", description="A real Slurm cluster from gpu-cluster's user data, on this machine"
    )
    p.add_argument("--name", default="local", help="cluster name (and state directory); default 'local'")
    p.add_argument("--subnet", type=int, default=0, help="third octet of 10.77.X.0/24 (default 0)")
    sub = p.add_subparsers(dest="cmd", required=True)
    up = sub.add_parser("up", help="render the user data and boot N nodes")
    up.add_argument("--nodes", "-n", type=int, default=2)
    up.add_argument(
        "--lane",
        choices=LANES,
        default=DEFAULT_LANE,
        help="bookworm/trixie: systemd-nspawn machines booting with systemd and cloud-init "
        "(Debian 12/13 roots); namespace: fast direct-mode nodes (default %(default)s)",
    )
    up.add_argument(
        "--controller",
        choices=PLACEMENTS,
        default="block",
        help="controller.placement: block (one of the N nodes is the controller) or dedicated "
        "(a controller machine running slurmctld only, besides N workers); default %(default)s",
    )
    up.add_argument("--block", default=ON_DEMAND, help="GpuClusterBlock tag of the workers (default %(default)s)")
    up.add_argument("--timeout", type=float, default=900, help="seconds for the whole bring-up")
    up.add_argument("--no-demo", action="store_true", help="skip sinfo/srun/sbatch/validation output")
    sub.add_parser("down", help="remove every process, namespace, link, mount and directory")
    sub.add_parser("status", help="nodes, their boot status and sinfo")
    rp = sub.add_parser("replace", help="destroy NODE and boot a fresh node from the same user data")
    rp.add_argument("node")
    rb = sub.add_parser("reboot", help="reboot NODE (machine lanes): systemctl reboot inside, or --hard")
    rb.add_argument("node")
    rb.add_argument("--hard", action="store_true", help="pull the plug and boot again instead")
    sub.add_parser("relaunch", help="destroy every machine and boot new ones against the kept /fsx")
    lb = sub.add_parser("launch-block", help="boot a new block's workers into the running cluster")
    lb.add_argument("block")
    lb.add_argument("--nodes", "-n", type=int, default=2)
    eb = sub.add_parser("end-block", help="kill every machine of BLOCK at once, as EC2 does at a block's end")
    eb.add_argument("block")
    return p


def _print_machine_costs(lc: LocalCluster, secs: float) -> None:
    for host, m in lc.memory().items():
        print(
            f"  {host}: memory {m['pss_mib']:.0f} MiB (PSS of its processes), "
            f"{m.get('usage_mib', 0):.0f} MiB charged to its cgroup; IMDS stand-in {m['imds_rss_mib']:.0f} MiB RSS"
        )
    cold = (
        f"cold: root built in {lc.root_seconds:.0f}s + nodes idle in {secs:.0f}s"
        if lc.root_built
        else f"warm (root cached, {lc.root_seconds:.1f}s): nodes idle in {secs:.1f}s"
    )
    print(f"timing, lane {lc.lane}: {cold}")


def _up(lc: LocalCluster, a: argparse.Namespace) -> int:
    if lc.c.nodes:
        raise SystemExit(f"local cluster '{a.name}' is already up; run `python -m localcluster down` first")
    try:
        secs = lc.up(a.nodes, timeout=a.timeout, block=a.block)
    except (TimeoutError, RuntimeError) as e:
        print(f"bring-up failed: {e}", file=sys.stderr)
        return 1
    print(f"\nall {a.nodes} nodes idle in sinfo {secs:.1f}s after start")
    if lc.machines:
        _print_machine_costs(lc, secs)
    if not a.no_demo:
        lc.show()
    print("\nremove it with: make local-cluster-down")
    return 0


def _down(lc: LocalCluster, a: argparse.Namespace) -> int:
    removed = lc.c.down()
    print(
        f"local cluster '{a.name}': removed {len(removed)} item(s)"
        if removed
        else f"local cluster '{a.name}': nothing to remove"
    )
    return 0


def _status(lc: LocalCluster, a: argparse.Namespace) -> int:
    lc.status()
    return 0


def _reboot(lc: LocalCluster, a: argparse.Namespace) -> int:
    w = lc.reboot(a.node, hard=a.hard)
    if w.rc != 0:
        print(f"{a.node}: boot after reboot failed (exit {w.rc})", file=sys.stderr)
        return 1
    lc.wait_idle(len(lc.c.nodes))
    print(f"{a.node}: back and idle")
    lc.show_srun()
    return 0


def _relaunch(lc: LocalCluster, a: argparse.Namespace) -> int:
    if not lc.c.nodes:
        raise SystemExit(f"local cluster '{a.name}' is not up")
    try:
        secs = lc.relaunch()
    except (TimeoutError, RuntimeError) as e:
        print(f"relaunch failed: {e}", file=sys.stderr)
        return 1
    print(f"\nall {len(lc.c.nodes)} new nodes idle in sinfo {secs:.1f}s after the relaunch started")
    lc.show_srun()
    return 0


def _replace(lc: LocalCluster, a: argparse.Namespace) -> int:
    w = lc.replace(a.node)
    if w.rc != 0:
        print(f"{w.node.hostname}: boot failed (exit {w.rc})", file=sys.stderr)
        return 1
    lc.wait_idle(len(lc.c.nodes))
    lc.show_srun()
    return 0


def _launch_block(lc: LocalCluster, a: argparse.Namespace) -> int:
    if not lc.c.nodes:
        raise SystemExit(f"local cluster '{a.name}' is not up")
    try:
        lc.launch_block(a.block, a.nodes)
    except (TimeoutError, RuntimeError) as e:
        print(f"block {a.block}: {e}", file=sys.stderr)
        return 1
    print(f"block {a.block}: {a.nodes} node(s) booted; they join through the controller's join gate")
    lc.status()
    return 0


def _end_block(lc: LocalCluster, a: argparse.Namespace) -> int:
    gone = lc.end_block(a.block)
    print(f"block {a.block}: ended {len(gone)} machine(s): {', '.join(gone)}")
    return 0


_COMMANDS = {
    "up": _up,
    "down": _down,
    "status": _status,
    "reboot": _reboot,
    "relaunch": _relaunch,
    "replace": _replace,
    "launch-block": _launch_block,
    "end-block": _end_block,
}


def main(argv: list[str] | None = None) -> int:
    a = _parser().parse_args(argv)
    _root_check()
    lc = LocalCluster(
        a.name,
        a.subnet,
        out=lambda s="": print(s, flush=True),
        lane=getattr(a, "lane", None),
        placement=getattr(a, "controller", None),
    )
    return _COMMANDS[a.cmd](lc, a)
