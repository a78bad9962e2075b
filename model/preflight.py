"""Preflight: what must be true in the AWS account before `pulumi up`, as pure checks.

The checks take a parsed `ClusterConfig` and plain facts (dataclasses below) and return
every finding at once as `path: message` with the fix, in the config's own paths
(`gpu-cluster:cluster.capacity.capacity_blocks[0].reservation_id`). No boto3 or pulumi
import here: `ops/` gathers the facts with boto3 (`python3 -m ops preflight`), and the
Pulumi program can gather the same facts from provider lookups and run the same checks.

A fact that could not be read (AccessDenied, throttled to death) is carried as a
`lookup_errors` entry rather than guessed: a preflight that cannot see a block must
not say the block is fine.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Literal

from model.block_dates import date_problems
from model.capacity import CapacityBlock
from model.config import ClusterConfig
from model.image import UNSUPPORTED_UBUNTU
from model.login import GROUP as LOGIN_GROUP
from model.paths import loc_to_path
from model.tags import CLUSTER as CLUSTER_TAG

# Capacity Block states a cluster can launch into now or later. The others
# (expired, cancelled, failed, payment-failed, unsupported, unavailable, and the
# transitional pending, payment-pending, assessing, delayed) cannot hold nodes yet or
# any more ([BOTO-EC2] CapacityReservationState).
USABLE_STATES = ("scheduled", "active")
CAPACITY_BLOCK_TYPE = "capacity-block"  # [BOTO-EC2] CapacityReservationType
# CLUSTER_TAG (GpuClusterName) is on every resource of a cluster (infra/cluster.py); it
# tells our own launch template / groups from someone else's with the same name.
# Service Quotas code of "Running On-Demand P instances" (a vCPU count) per instance
# family prefix; every type in the catalog is a P instance.
QUOTA_CODES = {"p": ("L-417A185B", "Running On-Demand P instances")}

Severity = Literal["error", "warning"]


@dataclass(frozen=True)
class BlockFacts:
    """One DescribeCapacityReservations record (found=False: no such id here)."""

    reservation_id: str
    found: bool
    state: str = ""
    reservation_type: str = ""
    instance_type: str = ""
    availability_zone: str = ""
    total_instance_count: int = 0
    start: datetime | None = None
    end: datetime | None = None


@dataclass(frozen=True)
class SubnetFacts:
    """The existing subnet, its effective route table's default route and its VPC."""

    subnet_id: str
    found: bool
    availability_zone: str = ""
    vpc_id: str = ""
    # Target of the 0.0.0.0/0 route (igw-, nat-, tgw-, eni-, i-, pcx-, vgw- ...), None if none.
    default_route_target: str | None = None
    vpc_dns_support: bool | None = None


@dataclass(frozen=True)
class NameFacts:
    """A fixed AWS name the program will create, and whether it already exists."""

    kind: str  # "launch template" | "Auto Scaling group"
    name: str
    exists: bool
    cluster_tag: str | None = None  # value of GpuClusterName on the existing one


@dataclass(frozen=True)
class QuotaFacts:
    quota_code: str
    quota_name: str
    value: float | None  # vCPUs; None when it could not be read
    reason: str = ""  # why it could not be read (AccessDenied, NoSuchResource ...)


@dataclass(frozen=True)
class PreflightFacts:
    region: str
    now: datetime
    region_zones: tuple[str, ...] | None = None  # None: not read (see lookup_errors)
    blocks: dict[str, BlockFacts] = field(default_factory=dict)
    subnet: SubnetFacts | None = None
    names: tuple[NameFacts, ...] = ()
    quota: QuotaFacts | None = None
    # (config path, message): a lookup that failed, reported as a problem at that path.
    lookup_errors: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Finding:
    path: str
    message: str
    severity: Severity = "error"

    def line(self) -> str:
        prefix = "warning: " if self.severity == "warning" else ""
        return f"{prefix}{self.path}: {self.message}"


def path(*parts: str | int) -> str:
    return loc_to_path(parts)


def launch_template_name(name_base: str, controller: bool = False, login: bool = False) -> str:
    """The workers' (or the controller's own, or the login nodes') template's name
    (infra/launch_template.py); `name_base`: ClusterConfig.aws_name_base."""
    if login:
        return f"gpu-cluster-{name_base}-login"
    return f"gpu-cluster-{name_base}-controller" if controller else f"gpu-cluster-{name_base}"


def asg_name(name_base: str, group_name: str) -> str:
    """A group's name (infra/nodes.py); `name_base`: ClusterConfig.aws_name_base."""
    return f"gpu-cluster-{name_base}-{group_name}"


def fixed_names(cfg: ClusterConfig) -> list[tuple[str, str]]:
    """(kind, name) of every AWS name the program fixes (not auto-named by Pulumi)."""
    base = cfg.aws_name_base
    names = [("launch template", launch_template_name(base)), ("launch template", launch_template_name(base, True))]
    # Groups of size 0 get no ASG (infra/nodes.py).
    names += [("Auto Scaling group", asg_name(cfg.aws_name_base, g.name)) for g in cfg.node_groups() if g.size > 0]
    if cfg.login.count:
        names += [("launch template", launch_template_name(base, login=True))]
        names += [("Auto Scaling group", asg_name(base, LOGIN_GROUP))]
    return names


def quota_for(instance_type: str) -> tuple[str, str] | None:
    family = instance_type.split(".")[0]
    return QUOTA_CODES.get(family[0]) if family else None


def iso(t: datetime | None) -> str:
    if t is None:
        return "?"
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


_FIND_BLOCK = "run `python3 -m ops find-blocks` to find and buy one"


def _block_state_findings(b: CapacityBlock, f: BlockFacts, rid: str, facts: PreflightFacts) -> list[Finding]:
    """The reservation is a Capacity Block nodes can still launch into."""
    out: list[Finding] = []
    if f.reservation_type and f.reservation_type != CAPACITY_BLOCK_TYPE:
        out.append(
            Finding(
                rid,
                f"{b.reservation_id} is a '{f.reservation_type}' Capacity Reservation, not a "
                f"Capacity Block; the launch template uses market type capacity-block, so "
                f"give the id of a Capacity Block",
            )
        )
    ended = f.end is not None and f.end <= facts.now
    if f.state not in USABLE_STATES:
        when = f" (ended {iso(f.end)})" if f.state == "expired" else ""
        out.append(
            Finding(
                rid,
                f"block {b.reservation_id} is {f.state}{when}, not scheduled or active; "
                f"no node can launch into it: {_FIND_BLOCK} and replace this entry",
            )
        )
    elif ended:
        out.append(
            Finding(rid, f"block {b.reservation_id} ended at {iso(f.end)}; {_FIND_BLOCK} and replace this entry")
        )
    return out


def _block_declared_findings(
    cfg: ClusterConfig, i: int, b: CapacityBlock, f: BlockFacts, stack: str | None = None
) -> list[Finding]:
    """What the stack file declares about the block matches EC2's record of it."""
    out: list[Finding] = []
    if f.instance_type and f.instance_type != cfg.instance_type:
        out.append(
            Finding(
                path("capacity", "capacity_blocks", i, "reservation_id"),
                f"block {b.reservation_id} holds {f.instance_type} but instance_type is "
                f"{cfg.instance_type}; a block launches only its own type: use a "
                f"{cfg.instance_type} block or change instance_type",
            )
        )
    if f.availability_zone and f.availability_zone != b.availability_zone:
        out.append(
            Finding(
                path("capacity", "capacity_blocks", i, "availability_zone"),
                f"block {b.reservation_id} is in {f.availability_zone}, not {b.availability_zone}; "
                f"set it to {f.availability_zone} (and network.availability_zone with a subnet there)",
            )
        )
    if f.total_instance_count and f.total_instance_count != b.instance_count:
        out.append(
            Finding(
                path("capacity", "capacity_blocks", i, "instance_count"),
                f"block {b.reservation_id} holds {f.total_instance_count} instances, not "
                f"{b.instance_count}; set instance_count: {f.total_instance_count}",
            )
        )
    out += block_date_findings(i, b, f, stack)
    return out


def block_date_findings(i: int, b: CapacityBlock, f: BlockFacts, stack: str | None = None) -> list[Finding]:
    """The declared start and end against EC2's record (model/block_dates.py)."""
    return [Finding(p, m) for p, m in date_problems(i, b, f.start, f.end, stack)]


def check_blocks(cfg: ClusterConfig, facts: PreflightFacts, stack: str | None = None) -> list[Finding]:
    out: list[Finding] = []
    for i, b in enumerate(cfg.capacity.capacity_blocks):
        f = facts.blocks.get(b.reservation_id)
        rid = path("capacity", "capacity_blocks", i, "reservation_id")
        if f is None:
            continue  # not read: the lookup error says why
        if not f.found:
            out.append(
                Finding(
                    rid,
                    f"{b.reservation_id} does not exist in this account in {facts.region}; "
                    f"check the id and aws:region, or {_FIND_BLOCK}",
                )
            )
            continue
        out += _block_state_findings(b, f, rid, facts)
        out += _block_declared_findings(cfg, i, b, f, stack)
    return out


def _route_finding(s: SubnetFacts, sp: str) -> Finding | None:
    """The subnet's default route: private, out through a NAT gateway."""
    target = s.default_route_target
    if target is None:
        return Finding(
            sp,
            f"{s.subnet_id} has no 0.0.0.0/0 route; nodes need egress for SSM, S3 and "
            "image pulls: add a route to a NAT gateway",
        )
    if target.startswith("igw-"):
        return Finding(
            sp,
            f"{s.subnet_id} is public (0.0.0.0/0 goes to {target}); nodes have no public IP "
            "and must not be reachable: use a private subnet whose 0.0.0.0/0 goes to a NAT gateway",
        )
    if not target.startswith("nat-"):
        return Finding(
            sp,
            f"0.0.0.0/0 of {s.subnet_id} goes to {target}, not a NAT gateway; make sure it "
            "reaches SSM, S3 and the container registry",
            "warning",
        )
    return None


def _subnet_findings(s: SubnetFacts, az: str, region: str) -> list[Finding]:
    sp = path("network", "subnet_id")
    if not s.found:
        return [
            Finding(
                sp,
                f"{s.subnet_id} does not exist in this account in {region}; "
                "check the id, or omit subnet_id to create a VPC",
            )
        ]
    out: list[Finding] = []
    if s.availability_zone and s.availability_zone != az:
        out.append(
            Finding(
                sp,
                f"{s.subnet_id} is in {s.availability_zone} but network.availability_zone is {az}; "
                f"use a private subnet in {az}",
            )
        )
    route = _route_finding(s, sp)
    if route is not None:
        out.append(route)
    if s.vpc_dns_support is False:
        out.append(
            Finding(
                sp,
                f"VPC {s.vpc_id} has DNS support off; the FSx and SSM endpoint names do not "
                f"resolve: aws ec2 modify-vpc-attribute --vpc-id {s.vpc_id} --enable-dns-support",
            )
        )
    return out


def check_network(cfg: ClusterConfig, facts: PreflightFacts) -> list[Finding]:
    out: list[Finding] = []
    az = cfg.network.availability_zone
    if facts.region_zones is not None and az not in facts.region_zones:
        zones = ", ".join(facts.region_zones) or "none"
        out.append(
            Finding(
                path("network", "availability_zone"),
                f"{az} is not an available zone of {facts.region} ({zones}); use one of them or fix aws:region",
            )
        )
    if cfg.network.subnet_id is None or facts.subnet is None:
        return out
    return out + _subnet_findings(facts.subnet, az, facts.region)


def check_names(cfg: ClusterConfig, facts: PreflightFacts) -> list[Finding]:
    out = []
    for n in facts.names:
        if not n.exists or n.cluster_tag == cfg.name:
            continue  # free, or ours from an earlier `pulumi up` of this cluster
        owner = f"tagged {CLUSTER_TAG}={n.cluster_tag}" if n.cluster_tag else f"without a {CLUSTER_TAG} tag"
        out.append(
            Finding(
                path("name"),
                f"{n.kind} {n.name} already exists in {facts.region} ({owner}); "
                "choose another cluster name, or delete it if nothing uses it",
            )
        )
    return out


def check_quota(cfg: ClusterConfig, facts: PreflightFacts) -> list[Finding]:
    q = facts.quota
    if q is None:
        return []
    need = cfg.capacity.nodes * cfg.spec.vcpus
    np = path("capacity", "nodes")
    if q.value is None:
        return [
            Finding(
                np,
                f"could not read the {q.quota_name} quota ({q.quota_code}): {q.reason}; check by hand "
                f"that it allows {need} vCPUs ({cfg.capacity.nodes} x {cfg.spec.vcpus})",
                "warning",
            )
        ]
    if q.value >= need:
        return []
    message = (
        f"{cfg.capacity.nodes} x {cfg.instance_type} need {need} vCPUs but the {q.quota_name} quota "
        f"({q.quota_code}) in {facts.region} is {q.value:g}; request an increase in Service Quotas"
    )
    # Whether instances in a Capacity Block count against the On-Demand quota is not
    # clearly documented; refuse only on-demand clusters, warn for blocks.
    return [Finding(np, message, "warning" if cfg.uses_capacity_blocks else "error")]


def preflight_findings(cfg: ClusterConfig, facts: PreflightFacts, stack: str | None = None) -> list[Finding]:
    """Every finding, errors and warnings, in config order within each check; `stack`
    names the stack in the printed edits (`pulumi config set --stack ...`)."""
    found = [Finding(p, m) for p, m in facts.lookup_errors]
    found += check_blocks(cfg, facts, stack)
    for check in (check_network, check_names, check_quota):
        found += check(cfg, facts)
    return found


def errors(findings: list[Finding]) -> list[Finding]:
    return [f for f in findings if f.severity == "error"]


# Every catalog instance type is x86_64.
IMAGE_ARCHITECTURE = "x86_64"


def image_refusal(ami_id: str, name: str, description: str = "", architecture: str = "") -> str | None:
    """Why a pinned AMI cannot boot a node, or None. One rule for the program's preflight
    (provider lookup) and `ops pin`/`ops preflight` (DescribeImages)."""
    if UNSUPPORTED_UBUNTU.search(name) or UNSUPPORTED_UBUNTU.search(description):
        return (
            f"{ami_id} is '{name}', an Ubuntu 22.04 image: its Slurm 21.08 has no dynamic nodes "
            "(slurmd -Z came in 22.05); pin an Ubuntu 24.04 DLAMI"
        )
    if architecture and architecture != IMAGE_ARCHITECTURE:
        return (
            f"{ami_id} is '{name}', an {architecture} image; the GPU instance types are "
            f"{IMAGE_ARCHITECTURE}: pin an {IMAGE_ARCHITECTURE} DLAMI"
        )
    return None
