"""The policy pack's invariants as pure functions over one resource.

Each rule takes the resource type token, its input properties and whether the resource
is `protect`ed, and returns the violations it finds (empty: compliant). They import
neither pulumi nor pulumi_policy, so tests run them on the plans `python -m offline.plan`
renders, and `policy/pack.py` wraps them for `pulumi preview --policy-pack policy/`.

Property names: the engine hands policies (and `plan.json`) camelCase names
(`metadataOptions.httpTokens`); a caller holding the SDK's snake_case names gets the
same answers, because every lookup tries both spellings. Tag keys are data and are
never renamed.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Iterable, Mapping, Sequence, Sized
from dataclasses import dataclass
from typing import Any

from model import tags as node_tags

FSX = "aws:fsx/lustreFileSystem:LustreFileSystem"
LAUNCH_TEMPLATE = "aws:ec2/launchTemplate:LaunchTemplate"
INSTANCE = "aws:ec2/instance:Instance"
SECURITY_GROUP = "aws:ec2/securityGroup:SecurityGroup"
SECURITY_GROUP_RULE = "aws:ec2/securityGroupRule:SecurityGroupRule"
VPC_INGRESS_RULE = "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule"
AUTOSCALING_GROUP = "aws:autoscaling/group:Group"

# Every resource type this program creates that takes tags. The cluster tag is what
# cost reports, `ops` look-ups and a human in the console find the cluster's resources
# by; a new taggable type belongs here too (tests/policy/test_policy_pack.py checks that every
# tagged resource in the shipped plans has its type listed).
TAGGED_TYPES = frozenset(
    {
        FSX,
        "aws:fsx/dataRepositoryAssociation:DataRepositoryAssociation",
        LAUNCH_TEMPLATE,
        INSTANCE,
        SECURITY_GROUP,
        VPC_INGRESS_RULE,
        "aws:vpc/securityGroupEgressRule:SecurityGroupEgressRule",
        AUTOSCALING_GROUP,
        "aws:iam/role:Role",
        "aws:iam/instanceProfile:InstanceProfile",
        "aws:s3/bucket:Bucket",
        "aws:s3/bucketObjectv2:BucketObjectv2",
        "aws:ec2/vpc:Vpc",
        "aws:ec2/subnet:Subnet",
        "aws:ec2/internetGateway:InternetGateway",
        "aws:ec2/natGateway:NatGateway",
        "aws:ec2/eip:Eip",
        "aws:ec2/routeTable:RouteTable",
        "aws:ec2/vpcEndpoint:VpcEndpoint",
        "aws:cloudwatch/logGroup:LogGroup",
    }
)
REQUIRED_TAGS = (node_tags.CLUSTER,)


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def get(props: Mapping[str, Any] | None, name: str) -> Any:
    """`props[name]` under its camelCase or snake_case spelling; None when absent."""
    if not isinstance(props, Mapping):
        return None
    if name in props:
        return props[name]
    return props.get(_snake(name))


def _list(value: Any) -> list[Any]:
    if value is None:
        return []
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        return [value]
    return list(value)


def _count(value: Any) -> int:
    """How many entries, without reading them: during a preview an entry can be an
    unknown value (a security group created in the same run), and reading it makes
    pulumi-policy stop the rule."""
    if value is None:
        return 0
    if isinstance(value, (str, bytes)) or not isinstance(value, Sized):
        return 1
    return len(value)


def _is_everywhere(cidr: Any) -> bool:
    """0.0.0.0/0, ::/0 or any other spelling of a zero-length prefix."""
    try:
        return ipaddress.ip_network(str(cidr), strict=False).prefixlen == 0
    except ValueError:
        return False


def fsx_protected(resource_type: str, props: Mapping[str, Any], protect: bool = False) -> list[str]:
    """A PERSISTENT file system holds the only copy of checkpoints and Slurm state: it is
    `protect`ed (a preview that deletes or replaces it fails) and keeps its final backup
    on delete. SCRATCH types take no backups at all and FSx refuses a final backup for
    them [FSX-SCRATCH], so they are disposable by design and not checked.

    A PERSISTENT file system linked to S3 takes no backups either [FSX-CREATEBACKUP]:
    its bucket is the durable copy, so it is still protected but skips the final backup
    and must not ask for automatic ones. The rule sees one resource, so "linked" is what
    that resource shows: an `import_path` (PERSISTENT_1), or the program's
    `GpuClusterDataRepository` tag (PERSISTENT_2 links through a separate data
    repository association; the config refuses that tag key among user tags)."""
    if resource_type != FSX:
        return []
    deployment = str(get(props, "deploymentType") or "")
    if not deployment.startswith("PERSISTENT"):
        return []
    out = []
    if not protect:
        out.append(
            f"FSx for Lustre ({deployment}) is not protected: set `fsx.protect: true` (the default) "
            "so that no preview can delete or replace /fsx"
        )
    linked = bool(get(props, "importPath")) or node_tags.DATA_REPOSITORY in _tag_keys(get(props, "tags"))[0]
    if linked:
        retention = get(props, "automaticBackupRetentionDays")
        if retention not in (None, 0, "0"):
            out.append(
                f"FSx for Lustre ({deployment}) is linked to S3 and asks for {retention} days of automatic "
                "backups, which FSx does not take of a linked file system: set fsx.backup_retention_days: 0 "
                "and fsx.allow_no_backups: true"
            )
    elif get(props, "skipFinalBackup") in (True, "true"):
        out.append(f"FSx for Lustre ({deployment}) skips its final backup on delete: set skip_final_backup=False")
    return out


def imdsv2_required(resource_type: str, props: Mapping[str, Any], protect: bool = False) -> list[str]:
    """Nodes read identity and credentials from instance metadata; IMDSv1 answers any
    unauthenticated GET, so every template and instance requires session tokens."""
    if resource_type not in (LAUNCH_TEMPLATE, INSTANCE):
        return []
    tokens = get(get(props, "metadataOptions"), "httpTokens")
    if tokens != "required":
        return [f"instance metadata allows IMDSv1 (metadata_options.http_tokens={tokens!r}): set it to 'required'"]
    return []


def no_open_ingress(resource_type: str, props: Mapping[str, Any], protect: bool = False) -> list[str]:
    """Nothing is reachable from the internet: the nodes' group admits only itself
    [EFA-START] and operators come in through SSM."""
    cidrs: list[Any] = []
    if resource_type == SECURITY_GROUP:
        for rule in _list(get(props, "ingress")):
            cidrs += _list(get(rule, "cidrBlocks")) + _list(get(rule, "ipv6CidrBlocks"))
    elif resource_type == SECURITY_GROUP_RULE:
        if get(props, "type") == "ingress":
            cidrs += _list(get(props, "cidrBlocks")) + _list(get(props, "ipv6CidrBlocks"))
    elif resource_type == VPC_INGRESS_RULE:
        cidrs += [get(props, "cidrIpv4"), get(props, "cidrIpv6")]
    return [f"ingress open to {c}: admit the cluster's own security group instead" for c in cidrs if _is_everywhere(c)]


def interfaces_have_security_groups(resource_type: str, props: Mapping[str, Any], protect: bool = False) -> list[str]:
    """An interface without groups gets the VPC's default group: EFA traffic between the
    nodes needs the cluster group on every interface, the efa-only ones included [EFA-START]."""
    if resource_type != LAUNCH_TEMPLATE:
        return []
    out = []
    for ni in _list(get(props, "networkInterfaces")):
        if not _count(get(ni, "securityGroups")):
            where = f"network card {get(ni, 'networkCardIndex')}, device {get(ni, 'deviceIndex')}"
            out.append(f"launch template interface at {where} has no security groups")
    return out


def no_top_level_security_groups(resource_type: str, props: Mapping[str, Any], protect: bool = False) -> list[str]:
    """EC2 refuses a launch whose template names instance-level security groups beside
    network interfaces; groups go on each interface [PA-SDK]."""
    if resource_type != LAUNCH_TEMPLATE or not _count(get(props, "networkInterfaces")):
        return []
    out = []
    for key in ("vpcSecurityGroupIds", "securityGroupNames"):
        if _count(get(props, key)):
            out.append(f"launch template sets `{_snake(key)}` beside network interfaces: EC2 refuses the launch")
    return out


def _tag_keys(tags: Any) -> tuple[set[str], set[str]]:
    """(keys, keys propagated at launch): a map, or an Auto Scaling group's tag list."""
    if isinstance(tags, Mapping):
        return set(tags), set()
    keys, propagated = set(), set()
    for tag in _list(tags):
        key = get(tag, "key")
        keys.add(key)
        if get(tag, "propagateAtLaunch") in (True, "true"):
            propagated.add(key)
    return keys, propagated


def required_tags(resource_type: str, props: Mapping[str, Any], protect: bool = False) -> list[str]:
    """Every taggable resource carries the cluster tag; a launch template tags what it
    launches with it; an Auto Scaling group propagates the identity tags the boot reads
    from instance metadata (model/tags.py) to every instance it launches."""
    if resource_type not in TAGGED_TYPES:
        return []
    keys, propagated = _tag_keys(get(props, "tags"))
    out = [f"missing tag {k!r}" for k in REQUIRED_TAGS if k not in keys]
    if resource_type == LAUNCH_TEMPLATE:
        for spec in _list(get(props, "tagSpecifications")):
            spec_keys, _ = _tag_keys(get(spec, "tags"))
            out += [
                f"tag_specifications[{get(spec, 'resourceType')}] missing tag {k!r}"
                for k in REQUIRED_TAGS
                if k not in spec_keys
            ]
    if resource_type == AUTOSCALING_GROUP:
        out += [
            f"tag {k!r} is not propagated at launch: nodes read it from instance metadata"
            for k in node_tags.NODE_IDENTITY
            if k not in propagated
        ]
    return out


Check = Callable[[str, Mapping[str, Any], bool], list[str]]


@dataclass(frozen=True)
class Rule:
    name: str
    description: str
    check: Check


RULES: Sequence[Rule] = (
    Rule(
        "fsx-protected",
        "FSx for Lustre (PERSISTENT) is protected and keeps a final backup (unless linked to S3).",
        fsx_protected,
    ),
    Rule("imdsv2-required", "Launch templates and instances require IMDSv2 session tokens.", imdsv2_required),
    Rule("no-open-ingress", "No security group ingress from 0.0.0.0/0 or ::/0.", no_open_ingress),
    Rule(
        "interfaces-have-security-groups",
        "Every launch-template network interface names its security groups.",
        interfaces_have_security_groups,
    ),
    Rule(
        "no-top-level-security-groups",
        "No instance-level security groups beside launch-template network interfaces.",
        no_top_level_security_groups,
    ),
    Rule("required-tags", "Taggable resources carry the cluster tag; groups propagate node identity.", required_tags),
)


def violations(resource_type: str, props: Mapping[str, Any], protect: bool = False) -> dict[str, list[str]]:
    """Rule name -> its violations, for the rules this resource breaks."""
    found = {rule.name: rule.check(resource_type, props, protect) for rule in RULES}
    return {name: msgs for name, msgs in found.items() if msgs}
