"""`python -m localcluster up|down|status|replace|reboot|relaunch|launch-block|end-block`: the local cluster's commands.

Exit status (clitools/exits.py): 0 ok, 1 a boot or bring-up failed, 2 usage (a bad
argument, not root, a cluster already up or not up), 4 an internal error.
"""

from __future__ import annotations

import argparse
import os
import re
import sys

from clitools import exits, help, inputs
from clitools.errors import UsageError
from clitools.runner import guarded
from localcluster.cluster import DEFAULT_LANE, LANES, LocalCluster
from localcluster.nodes import CLUSTER_NAME, CLUSTER_NAME_RULE
from localcluster.profile import PLACEMENTS
from model.slurm import SLURM_NAME
from model.tags import ON_DEMAND

PROG = "python -m localcluster"
# The lanes' machines are real processes on a 2-core machine: 64 is a typo's bound, not a goal.
MAX_NODES = 64
_HOSTNAME = re.compile(r"[a-z0-9][a-z0-9-]{0,62}")


def _root_check() -> None:
    if os.geteuid() != 0:
        raise UsageError(f"{PROG}: the local cluster needs root (network namespaces, mounts, cgroups)")


def _parser() -> argparse.ArgumentParser:
    p = help.parser(
        PROG,
        "A real Slurm cluster from gpu-cluster's user data, on this machine (root).",
        "python -m localcluster up --nodes 2 --lane bookworm",
        "python -m localcluster down",
    )
    p.add_argument(
        "--name",
        default="local",
        type=inputs.name(CLUSTER_NAME, CLUSTER_NAME_RULE),
        help="cluster name (and state directory)",
    )
    p.add_argument("--subnet", type=inputs.number(int, 0, 255), default=0, help="third octet of 10.77.X.0/24")
    sub = p.add_subparsers(dest="cmd", required=True, metavar="COMMAND")
    _up_command(sub)
    _other_commands(sub)
    return p


_BLOCK = inputs.name(SLURM_NAME, "a block name is a letter, then up to 31 letters, digits, '-' or '_'")
_HOST = inputs.name(_HOSTNAME, "a node is its hostname, e.g. ip-10-77-0-12")


def _up_command(sub) -> None:
    block = _BLOCK
    up = help.command(sub, "up", "render the user data and boot N nodes", "python -m localcluster up -n 4")
    up.add_argument(
        "--nodes", "-n", type=inputs.number(int, 2, MAX_NODES), default=2, help="nodes to boot (capacity.nodes)"
    )
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
    up.add_argument(
        "--block", default=ON_DEMAND, type=block, help="GpuClusterBlock tag of the workers (default %(default)s)"
    )
    up.add_argument(
        "--timeout", type=inputs.number(float, 1, 86400, "seconds"), default=900, help="seconds for the whole bring-up"
    )
    up.add_argument("--no-demo", action="store_true", help="skip sinfo/srun/sbatch/validation output")


def _other_commands(sub) -> None:
    nodes, host, block = inputs.number(int, 1, MAX_NODES), _HOST, _BLOCK
    help.command(
        sub, "down", "remove every process, namespace, link, mount and directory", "python -m localcluster down"
    )
    help.command(sub, "status", "nodes, their boot status and sinfo", "python -m localcluster status")
    rp = help.command(
        sub,
        "replace",
        "destroy NODE and boot a fresh node from the same user data",
        "python -m localcluster replace ip-10-77-0-12",
    )
    rp.add_argument("node", type=host, help="the node's hostname")
    rb = help.command(
        sub,
        "reboot",
        "reboot NODE (machine lanes): systemctl reboot inside, or --hard",
        "python -m localcluster reboot ip-10-77-0-12 --hard",
    )
    rb.add_argument("node", type=host, help="the node's hostname")
    rb.add_argument("--hard", action="store_true", help="pull the plug and boot again instead")
    help.command(
        sub,
        "relaunch",
        "destroy every machine and boot new ones against the kept /fsx",
        "python -m localcluster relaunch",
    )
    lb = help.command(
        sub,
        "launch-block",
        "boot a new block's workers into the running cluster",
        "python -m localcluster launch-block b -n 2",
    )
    lb.add_argument("block", type=block, help="the new block's name")
    lb.add_argument("--nodes", "-n", type=nodes, default=2, help="workers to boot")
    eb = help.command(
        sub,
        "end-block",
        "kill every machine of BLOCK at once, as EC2 does at a block's end",
        "python -m localcluster end-block a",
    )
    eb.add_argument("block", type=block, help="the block's name")


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
        raise UsageError(f"{PROG}: local cluster '{a.name}' is already up; run `python -m localcluster down` first")
    try:
        secs = lc.up(a.nodes, timeout=a.timeout, block=a.block)
    except (TimeoutError, RuntimeError) as e:
        print(f"bring-up failed: {e}", file=sys.stderr)
        return exits.FAILED
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
        return exits.FAILED
    lc.wait_idle(len(lc.c.nodes))
    print(f"{a.node}: back and idle")
    lc.show_srun()
    return 0


def _relaunch(lc: LocalCluster, a: argparse.Namespace) -> int:
    if not lc.c.nodes:
        raise UsageError(f"{PROG}: local cluster '{a.name}' is not up; start it with `python -m localcluster up`")
    try:
        secs = lc.relaunch()
    except (TimeoutError, RuntimeError) as e:
        print(f"relaunch failed: {e}", file=sys.stderr)
        return exits.FAILED
    print(f"\nall {len(lc.c.nodes)} new nodes idle in sinfo {secs:.1f}s after the relaunch started")
    lc.show_srun()
    return 0


def _replace(lc: LocalCluster, a: argparse.Namespace) -> int:
    w = lc.replace(a.node)
    if w.rc != 0:
        print(f"{w.node.hostname}: boot failed (exit {w.rc})", file=sys.stderr)
        return exits.FAILED
    lc.wait_idle(len(lc.c.nodes))
    lc.show_srun()
    return 0


def _launch_block(lc: LocalCluster, a: argparse.Namespace) -> int:
    if not lc.c.nodes:
        raise UsageError(f"{PROG}: local cluster '{a.name}' is not up; start it with `python -m localcluster up`")
    try:
        lc.launch_block(a.block, a.nodes)
    except (TimeoutError, RuntimeError) as e:
        print(f"block {a.block}: {e}", file=sys.stderr)
        return exits.FAILED
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

    def body() -> int:
        _root_check()
        lc = LocalCluster(
            a.name,
            a.subnet,
            out=lambda s="": print(s, flush=True),
            lane=getattr(a, "lane", None),
            placement=getattr(a, "controller", None),
        )
        return _COMMANDS[a.cmd](lc, a)

    return guarded(f"{PROG} {a.cmd}", body)
