"""Settings AWS and the program accept but that are probably not what was meant.

Printed (never fatal) wherever the config is loaded: `pulumi preview`/`up`
(infra/stack.py, as Pulumi warnings) and the plan CLI.
"""

from __future__ import annotations

from datetime import datetime

from model import aws_rules
from model.config import ClusterConfig
from model.paths import loc_to_path


def config_warnings(cfg: ClusterConfig) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    p = lambda *parts: loc_to_path(parts)  # noqa: E731
    blocks = cfg.capacity.capacity_blocks
    if blocks:
        held = sum(b.instance_count for b in blocks)
        if cfg.capacity.nodes < held:
            out.append(
                (
                    p("capacity", "nodes"),
                    f"{cfg.capacity.nodes} nodes use {cfg.capacity.nodes} of the {held} instances the "
                    f"Capacity Blocks hold: {held - cfg.capacity.nodes} paid slot(s) stay idle; raise "
                    f"capacity.nodes to {held} to use them",
                )
            )
    if cfg.stack is not None and cfg.name != cfg.stack:
        out.append(
            (
                p("name"),
                f"the cluster is named '{cfg.name}' but the stack is '{cfg.stack}': if this stack file "
                "was copied from another stack, both clusters carry the same GpuClusterName tag and "
                "Slurm ClusterName (only the stack-based group names tell them apart); remove name (it defaults to the "
                "stack name) unless that is what you want",
            )
        )
    if cfg.network.subnet_id is None and not aws_rules.is_private(cfg.network.vpc_cidr):
        out.append(
            (
                p("network", "vpc_cidr"),
                f"{cfg.network.vpc_cidr} is not a private range (10.0.0.0/8, 172.16.0.0/12, "
                "192.168.0.0/16): the nodes could not reach the public addresses it overlaps; "
                "use e.g. 10.0.0.0/16",
            )
        )
    if "Name" in cfg.tags:
        out.append(
            (
                p("tags"),
                "tag 'Name' is replaced by the program's own Name on the VPC, subnets, security "
                "group, file system and instances (it stays on the others); remove it",
            )
        )
    if cfg.repair.replaces and not cfg.validation.enabled:
        out.append(
            (
                p("repair", "policy"),
                f"'{cfg.repair.policy}' replaces nodes drained for hardware, and validation.enabled is false, so "
                "a replacement takes jobs without passing the join gate; enable validation, or set "
                "repair.policy to isolate or none",
            )
        )
    out += _protection_warnings(cfg)
    out += controller_warnings(cfg)
    out += node_iam_warnings(cfg)
    return out


def _protection_warnings(cfg: ClusterConfig) -> list[tuple[str, str]]:
    out = []
    if cfg.fsx.persistent and cfg.fsx.protect is False:
        out.append(
            (
                loc_to_path(("fsx", "protect")),
                "false: a preview that deletes or replaces the file system no longer fails, and "
                "/fsx (Slurm state, checkpoints) would be lost with it",
            )
        )
    if cfg.image.allow_unpinned:
        out.append(
            (
                loc_to_path(("image", "allow_unpinned")),
                "nodes boot whatever AMI the SSM parameter names at each launch: a replaced node "
                "may get another kernel than its peers; pin image.ami_id (`python3 -m ops pin --image`)",
            )
        )
    return out


def node_iam_warnings(cfg: ClusterConfig) -> list[tuple[str, str]]:
    """Allowed, but worth a second look in review: broad grants to every node.

    Every process on a node (every job of every user) can use the instance role, so a
    wildcard grant is a grant to whoever can submit a job."""
    out = []
    for i, s in enumerate(cfg.node_iam.statements):
        if s.Effect != "Allow":
            continue
        path = loc_to_path(("node_iam", "statements", i, "Action"))
        wide = [a for a in s.Action if a.split(":", 1)[1] == "*"]
        if wide:
            out.append((path, f"{', '.join(wide)} allows every action of the service to every job on the nodes"))
        iam = [a for a in s.Action if a.split(":", 1)[0] in ("iam", "sts") and a not in wide]
        if iam and "*" in s.Resource:
            out.append(
                (path, f"{', '.join(iam)} on Resource '*': IAM and STS rights on every role can escalate to admin")
            )
    return out


def block_gaps(cfg: ClusterConfig) -> list[tuple[str, str]]:
    """(earlier block, later block) pairs with time between them that no block covers."""
    dated = sorted((b.start, b.end, b.name) for b in cfg.capacity.capacity_blocks if b.start and b.end)
    gaps = []
    covered: tuple[datetime, str] | None = None  # the latest end so far, and its block
    for start, end, name in dated:
        if covered is not None and start > covered[0]:
            gaps.append((covered[1], name))
        if covered is None or end > covered[0]:
            covered = (end, name)
    return gaps


def controller_warnings(cfg: ClusterConfig) -> list[tuple[str, str]]:
    """A colocated controller ends with its block: between blocks there is no queue."""
    if cfg.controller.dedicated:
        return []
    out = [
        (
            loc_to_path(("controller", "placement")),
            f"blocks '{a}' and '{b}' do not overlap and the controller runs on a block node: "
            "between blocks there is no controller (no squeue, no sbatch, and the next block starts "
            "with an empty queue): set controller.placement: dedicated",
        )
        for a, b in block_gaps(cfg)
    ]
    host = next((g.block for g in cfg.node_groups() if g.role == "controller" and g.block is not None), None)
    later = [b.name for b in cfg.capacity.capacity_blocks if host and host.end and b.end and b.end > host.end]
    if host is not None and later:
        out.append(
            (
                loc_to_path(("controller", "placement")),
                f"the controller runs in block '{host.name}', which ends before {', '.join(later)}: from its end "
                "on the remaining nodes have no controller: set controller.placement: dedicated",
            )
        )
    return out
