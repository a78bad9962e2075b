"""Top-level wiring: parsed config -> components -> stack outputs.

`build(cfg, region)` is the whole program; `infra/stack.py` (pulumi up) and
`offline/plan.py` (offline, under mocks) both call it. Components get plain values
and Outputs, never `pulumi.Config`. This is the one place the node renderer is called:
once, when the FSx endpoint and the payload bucket are known.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import pulumi
import pulumi_aws as aws

from infra.accounting import AccountingDatabase, AccountingDatabaseArgs, secret_read_policy
from infra.iam import (
    NodeIdentity,
    NodeIdentityArgs,
    object_read_policy,
    registry_read_policy,
    repair_policy,
    topology_read_policy,
)
from infra.launch_template import NodeLaunchTemplate, NodeLaunchTemplateArgs, image_id
from infra.logs import ClusterLogs, ClusterLogsArgs, logs_write_policy, metrics_put_policy
from infra.network import Network, NetworkArgs, other_zone
from infra.nodes import NodeGroups, NodeGroupsArgs
from infra.payload import (
    BlockEndsObject,
    BlockEndsObjectArgs,
    PayloadBucket,
    PayloadBucketArgs,
    PayloadObject,
    PayloadObjectArgs,
    payload_uri_template,
)
from infra.preflight import controller_move_problems, preflight
from infra.registry_secrets import RegistrySecrets, RegistrySecretsArgs
from infra.security import NodeSecurityGroup, NodeSecurityGroupArgs
from infra.storage import FileSystem, FileSystemArgs
from model import tags as node_tags
from model.accounting import db_identifier
from model.block_ends import block_ends_document, block_ends_uri
from model.capacity import NodeGroup, iso_utc
from model.catalog import InstanceSpec
from model.config import ClusterConfig
from model.errors import ConfigError
from model.fsx_identity import fsx_identity
from model.login import GROUP as LOGIN_GROUP
from model.logs import metrics_namespace
from model.node_iam import node_iam_policy
from model.registries import RegistryAccess, needs_account, registry_access, stack_parameter_name, stack_secrets
from model.schedule import BlockSchedule, cluster_schedule
from model.tags import ON_DEMAND
from userdata import layout
from userdata.accounting_files import AccountingEndpoint
from userdata.render import FsxEndpoint, NodeFiles, render_userdata


@dataclass
class BuildResult:
    outputs: dict[str, object]  # stack outputs (values may be Outputs)
    node_files: pulumi.Output  # Output[userdata.render.NodeFiles], shared by all templates


def render_node_files(
    cfg: ClusterConfig,
    spec: InstanceSpec,
    dns_name: pulumi.Input[str],
    mount_name: pulumi.Input[str],
    bucket: pulumi.Input[str],
    region: str = "",
    account: pulumi.Input[str] = "",
    database: AccountingDatabase | None = None,
) -> pulumi.Output:
    """Output[NodeFiles]: the pure renderer, called once the FSx endpoint and bucket are known.

    Only a function call happens inside apply; no resource is declared there. `region`
    and `account` resolve `containers` (model/registries.py); with Capacity Blocks the
    nodes also get where the program publishes the block ends (model/block_ends.py).
    `database`: with accounting, where slurmdbd's database and its secret are.
    """
    db: list[pulumi.Input] = [database.address, database.port, database.secret_arn] if database else []

    def render(values: list) -> NodeFiles:
        dns, mount, bucket_name, acct = values[:4]
        endpoint = AccountingEndpoint(values[4], int(values[5]), values[6], region) if database else None
        return render_userdata(
            cfg,
            spec,
            FsxEndpoint(dns_name=dns, mount_name=mount),
            payload_uri_template(bucket_name),
            registries=registry_access(cfg.containers, region, acct, cfg.name),
            block_ends_uri=block_ends_uri(bucket_name) if cfg.uses_capacity_blocks else "",
            region=region,
            accounting=endpoint,
        )

    return pulumi.Output.all(dns_name, mount_name, bucket, account, *db).apply(render)


def encode_user_data(node_files: NodeFiles) -> str:
    """Base64 of the exact bytes: LaunchTemplate.user_data is not encoded by the provider."""
    return base64.b64encode(node_files.user_data).decode("ascii")


def controller_commands(region: str, controller_asg: str) -> tuple[str, str]:
    """(command printing the controller's instance id, command opening a shell on it).

    The id is not known at `pulumi up`: the group launches the instance (maybe when the
    block starts), and a replaced controller gets a new id. The group name is stable.
    """
    find = (
        f"aws autoscaling describe-auto-scaling-groups --region {region} "
        f"--auto-scaling-group-names {controller_asg} "
        "--query \"AutoScalingGroups[0].Instances[?LifecycleState=='InService'] | [0].InstanceId\" "
        "--output text"
    )
    return find, f"aws ssm start-session --region {region} --target $({find})"


def group_output(g, asg_name: pulumi.Output[str], schedule: BlockSchedule) -> dict[str, object]:
    """One `node_groups` entry: what the group is and when it runs."""
    out: dict[str, object] = {
        "asg_name": asg_name,
        "role": g.role,
        "size": g.size,
        "block": g.block.name if g.block is not None else ON_DEMAND,
        "capacity_block_id": g.block.reservation_id if g.block is not None else None,
    }
    if g.block is not None:
        s = schedule.of(g.name)
        out.update(
            size_now=s.size_now,
            block_start=iso_utc(g.block.start),
            block_end=s.block_end_iso,
            scale_out_at=iso_utc(s.scale_out_at) if s.scale_out_at else None,
            scale_in_at=iso_utc(s.scale_in_at) if s.scale_in_at else None,
        )
    return out


def _registry_policy(cfg: ClusterConfig, region: str, account: str) -> str:
    access = registry_access(cfg.containers, region, account, cfg.name)
    assert isinstance(access, RegistryAccess)  # only called with containers enabled
    return registry_read_policy(access)


def containers_wiring(
    cfg: ClusterConfig, region: str, passwords: dict[str, pulumi.Output[str]], tags: dict[str, str]
) -> tuple[pulumi.Input[str], pulumi.Output[str] | None, list[pulumi.Output]]:
    """`containers` (docs/images.md): (account for the renderer, node role policy or None,
    the stored stack secrets the launch template must wait for).

    The stack's own account names its ECR registry and the secrets given by name; it is
    looked up only then, so stacks without `containers` make no extra call.
    """
    account: pulumi.Input[str] = aws.get_caller_identity_output().account_id if needs_account(cfg.containers) else ""
    policy = None
    if cfg.containers.enabled:
        policy = pulumi.Output.from_input(account).apply(lambda acct: _registry_policy(cfg, region, acct))
    stored: list[pulumi.Output] = []
    wanted = stack_secrets(cfg.containers)
    if wanted:
        secrets = RegistrySecrets(
            cfg.name,
            RegistrySecretsArgs(
                cluster_name=cfg.name,
                secrets={s: (stack_parameter_name(cfg.name, s), login, passwords[s]) for s, login in wanted.items()},
                tags=tags,
            ),
        )
        stored.append(secrets.parameter_names)
    return account, policy, stored


@dataclass
class _NodePayload:
    """The rendered node files, the bucket and object carrying them, and the user data."""

    bucket: PayloadBucket
    payload: PayloadObject
    block_ends: BlockEndsObject | None  # only with Capacity Blocks
    node_files: pulumi.Output
    user_data_b64: pulumi.Output
    registry_policy: pulumi.Output[str] | None


def _database_zone(cfg: ClusterConfig) -> str | None:
    """A created VPC's second zone for the database subnet (accounting only): a lookup,
    so stacks without accounting make no extra call."""
    if not cfg.accounting.enabled or cfg.network.subnet_id:
        return None
    zones = tuple(aws.get_availability_zones(state="available").names or ())
    return other_zone(zones, cfg.network.availability_zone)


def _network(cfg: ClusterConfig, region: str, tags: dict[str, str]) -> Network:
    return Network(
        cfg.name,
        NetworkArgs(
            cluster_name=cfg.name,
            availability_zone=cfg.network.availability_zone,
            subnet_id=cfg.network.subnet_id,
            vpc_cidr=cfg.network.vpc_cidr,
            region=region,
            tags=tags,
            database_zone=_database_zone(cfg),
        ),
    )


def _accounting_database(
    cfg: ClusterConfig, net: Network, sg: NodeSecurityGroup, tags: dict[str, str]
) -> AccountingDatabase | None:
    if not cfg.accounting.enabled:
        return None
    second = cfg.accounting.second_subnet_id or net.database_subnet_id
    assert second is not None  # model/accounting.py accounting_problems
    return AccountingDatabase(
        cfg.name,
        AccountingDatabaseArgs(
            cluster_name=cfg.name,
            config=cfg.accounting,
            identifier=db_identifier(cfg.aws_name_prefix),
            availability_zone=cfg.network.availability_zone,
            subnet_ids=[net.subnet_id, second],
            security_group_id=sg.security_group_id,
            tags=tags,
        ),
    )


def _file_system(cfg: ClusterConfig, net: Network, sg: NodeSecurityGroup, tags: dict[str, str]) -> FileSystem:
    name = cfg.name
    return FileSystem(
        name,
        FileSystemArgs(
            cluster_name=name,
            fsx=cfg.fsx,
            subnet_id=net.subnet_id,
            security_group_id=sg.security_group_id,
            tags=tags,
            port_rules=sg.self_rules,
        ),
    )


def _node_payload(
    cfg: ClusterConfig,
    region: str,
    fsx: FileSystem,
    registry_passwords: dict[str, pulumi.Output[str]],
    tags: dict[str, str],
    database: AccountingDatabase | None = None,
) -> _NodePayload:
    # One render for the whole cluster: the bytes do not depend on node count or block
    # (node contract), so every node boots the same user data. The node files always
    # travel as the S3 payload: they are twice EC2's user-data limit (README, design).
    name = cfg.name
    bucket = PayloadBucket(name, PayloadBucketArgs(cluster_name=name, tags=tags))
    account, registry_policy, stored = containers_wiring(cfg, region, registry_passwords, tags)
    node_files = render_node_files(
        cfg, cfg.spec, fsx.dns_name, fsx.mount_name, bucket.bucket_name, region, account, database
    )
    payload = PayloadObject(
        name,
        PayloadObjectArgs(
            bucket_name=bucket.bucket_name, s3_payload=node_files.apply(lambda nf: nf.s3_payload), tags=tags
        ),
    )
    block_ends = None
    if cfg.uses_capacity_blocks:
        # Only the cluster tag: S3 takes at most 10 tags per object, and this object is
        # found by its fixed key, not by tags.
        block_ends = BlockEndsObject(
            name,
            BlockEndsObjectArgs(
                bucket_name=bucket.bucket_name,
                document=block_ends_document(cfg),
                tags={node_tags.CLUSTER: cfg.name},
            ),
        )
    # Tie the user data to the uploaded objects: no node boots before its payload (and
    # the block ends it reads) exists. Stack secrets are in SSM before any node can boot
    # and read them.
    waits = [payload.key, *([block_ends.key] if block_ends else []), *stored]
    user_data_b64 = pulumi.Output.all(node_files, *waits).apply(lambda v: encode_user_data(v[0]))
    return _NodePayload(bucket, payload, block_ends, node_files, user_data_b64, registry_policy)


def _cluster_logs(cfg: ClusterConfig, region: str, tags: dict[str, str]) -> ClusterLogs | None:
    if not cfg.logs.enabled:
        return None
    return ClusterLogs(
        cfg.name,
        ClusterLogsArgs(
            cluster_name=cfg.name, aws_name_base=cfg.aws_name_base, region=region, config=cfg.logs, tags=tags
        ),
    )


def _node_identity(
    cfg: ClusterConfig,
    node: _NodePayload,
    tags: dict[str, str],
    region: str,
    controller: bool = False,
    database: AccountingDatabase | None = None,
    cluster_logs: ClusterLogs | None = None,
) -> NodeIdentity:
    """The workers' role, or (`controller`) the controller's own role: the same grants, and
    what only the controller needs on it alone, each its own inline policy (the published
    block ends, read by its agent loop alone; the repair agent's, model/repair.py; the
    accounting database's secret, infra/accounting.py; the topology read,
    nodeside/topology.py; the cluster's metrics, infra/logs.py). With `logs`, both ship to
    the cluster's log group."""
    extra = cfg.node_iam.statements
    repair = controller and cfg.repair.replaces
    own: dict[str, pulumi.Input[str]] = {}
    if controller and node.block_ends is not None:
        own["block-ends"] = node.block_ends.object_arn.apply(object_read_policy)
    if controller and database is not None:
        own["accounting-secret"] = database.secret_arn.apply(secret_read_policy)
    if controller and cfg.slurm.topology == "tree":
        own["topology"] = topology_read_policy()
    if cluster_logs is not None:
        own["logs"] = cluster_logs.log_group_arn.apply(logs_write_policy)
        if controller:
            own["metrics"] = metrics_put_policy(metrics_namespace(cfg.aws_name_base))
    return NodeIdentity(
        f"{cfg.name}-controller" if controller else cfg.name,
        NodeIdentityArgs(
            cluster_name=cfg.name,
            holders="controller" if controller else "GPU nodes",
            payload_object_arn=node.payload.object_arn,
            tags=tags,
            registry_policy=node.registry_policy,
            managed_policy_arns=cfg.node_iam.managed_policy_arns,
            extra_policy=json.dumps(node_iam_policy(extra), sort_keys=True) if extra else None,
            repair_policy=repair_policy(cfg.name, region, cfg.aws_name_prefix) if repair else None,
            own_policies=own,
        ),
    )


def _launch_template(
    cfg: ClusterConfig,
    sg: NodeSecurityGroup,
    identity: NodeIdentity,
    user_data_b64: pulumi.Output,
    tags: dict[str, str],
) -> NodeLaunchTemplate:
    return NodeLaunchTemplate(
        cfg.name,
        _template_args(
            cfg,
            sg,
            identity,
            user_data_b64,
            tags,
            capacity_blocks=cfg.uses_capacity_blocks,
            placement_group=cfg.uses_placement_group,
        ),
    )


def _template_args(
    cfg: ClusterConfig,
    sg: NodeSecurityGroup,
    identity: NodeIdentity,
    user_data_b64: pulumi.Output,
    tags: dict[str, str],
    **role: Any,
) -> NodeLaunchTemplateArgs:
    """What the workers' and the controller's templates share (same image, same user
    data, the group's security group); `role` holds what differs."""
    return NodeLaunchTemplateArgs(
        cluster_name=cfg.name,
        spec=cfg.spec,
        image_id=image_id(cfg),
        security_group_id=sg.security_group_id,
        instance_profile_arn=identity.instance_profile_arn,
        user_data_base64=user_data_b64,
        root_volume=cfg.root_volume,
        tags=tags,
        aws_name_base=cfg.aws_name_base,
        **role,
    )


def _controller_launch_template(
    cfg: ClusterConfig,
    sg: NodeSecurityGroup,
    identity: NodeIdentity,
    workers: NodeLaunchTemplate,
    user_data_b64: pulumi.Output,
    tags: dict[str, str],
) -> NodeLaunchTemplate:
    """The controller's own template: same image and user data, its own profile.

    Colocated, the workers' settings (EFA, market type, their placement group);
    dedicated, a small CPU type with no EFA, no market options and no placement group."""
    dedicated = cfg.dedicated_controller
    return NodeLaunchTemplate(
        f"{cfg.name}-controller",
        _template_args(
            cfg,
            sg,
            identity,
            user_data_b64,
            tags,
            capacity_blocks=cfg.uses_capacity_blocks and not dedicated,
            controller=True,
            dedicated_instance_type=cfg.controller.instance_type if dedicated else None,
            placement_group_name=None if dedicated else workers.placement_group_name,
        ),
    )


def _login_launch_template(
    cfg: ClusterConfig,
    sg: NodeSecurityGroup,
    identity: NodeIdentity,
    user_data_b64: pulumi.Output,
    tags: dict[str, str],
) -> NodeLaunchTemplate | None:
    """The login nodes' template (model/login.py): the same image and user data, the
    workers' role (they need nothing more: SSM and the payload), a small CPU type with
    one plain interface, on demand, no block and no placement group."""
    if not cfg.login.count:
        return None
    return NodeLaunchTemplate(
        f"{cfg.name}-login",
        _template_args(
            cfg, sg, identity, user_data_b64, tags, login=True, dedicated_instance_type=cfg.login.instance_type
        ),
    )


def login_groups(cfg: ClusterConfig) -> list[NodeGroup]:
    """The login nodes' on-demand group (none without login nodes)."""
    return [NodeGroup(LOGIN_GROUP, "login", cfg.login.count, None)] if cfg.login.count else []


def _node_groups(
    cfg: ClusterConfig,
    net: Network,
    lt: NodeLaunchTemplate,
    ctl_lt: NodeLaunchTemplate,
    schedule: BlockSchedule,
    login_lt: NodeLaunchTemplate | None = None,
) -> NodeGroups:
    return NodeGroups(
        cfg.name,
        NodeGroupsArgs(
            cluster_name=cfg.name,
            groups=cfg.node_groups() + login_groups(cfg),
            total_nodes=cfg.capacity.nodes,
            subnet_id=net.subnet_id,
            launch_template_id=lt.launch_template_id,
            launch_template_version=lt.latest_version,
            controller_launch_template_id=ctl_lt.launch_template_id,
            controller_launch_template_version=ctl_lt.latest_version,
            login_launch_template_id=login_lt.launch_template_id if login_lt else None,
            login_launch_template_version=login_lt.latest_version if login_lt else None,
            schedule=schedule,
            tags=cfg.tags,
            aws_name_base=cfg.aws_name_base,
        ),
    )


@dataclass
class _Declared:
    """The components `build` declared, as `_stack_outputs` reads them."""

    net: Network
    sg: NodeSecurityGroup
    fsx: FileSystem
    node: _NodePayload
    lt: NodeLaunchTemplate
    ctl_lt: NodeLaunchTemplate
    ctl_identity: NodeIdentity
    nodes: NodeGroups
    database: AccountingDatabase | None = None
    logs: ClusterLogs | None = None


def _stack_outputs(cfg: ClusterConfig, region: str, schedule: BlockSchedule, d: _Declared) -> dict[str, object]:
    controller_asg = d.nodes.asg_names["controller"]
    find_cmd = controller_asg.apply(lambda n: controller_commands(region, n)[0])
    ssm_cmd = controller_asg.apply(lambda n: controller_commands(region, n)[1])
    asg_names = d.nodes.asg_names
    out: dict[str, object] = {
        "cluster_name": cfg.name,
        "region": region,
        "subnet_id": d.net.subnet_id,
        "security_group_id": d.sg.security_group_id,
        "controller_asg_name": controller_asg,
        "controller_instance_id_command": find_cmd,
        "controller_ssm_command": ssm_cmd,
        "fsx_dns_name": d.fsx.dns_name,
        "fsx_mount_name": d.fsx.mount_name,
        "launch_template_id": d.lt.launch_template_id,
        "launch_template_version": d.lt.latest_version,
        "controller_placement": cfg.controller.placement,
        "controller_launch_template_id": d.ctl_lt.launch_template_id,
        "controller_launch_template_version": d.ctl_lt.latest_version,
        "controller_role_name": d.ctl_identity.role_name,
        "node_groups": {
            g.name: group_output(g, asg_names[g.name], schedule)
            for g in cfg.node_groups() + login_groups(cfg)
            if g.name in asg_names
        },
        "capacity_block_ids": [b.reservation_id for b in cfg.capacity.capacity_blocks],
        "validation_results_path": layout.validation_results(cfg.name),
        "user_data_payload_bucket": d.node.bucket.bucket_name,
        # Copy into fsx.pinned after the first `pulumi up` (model/fsx_identity.py).
        "fsx_identity": fsx_identity(cfg).model_dump(),
        "fsx_protected": d.fsx.protected,
        "image_id": image_id(cfg),
    }
    if LOGIN_GROUP in asg_names:
        # A shell on a login node, as yourself: docs/team.md (Session Manager run-as).
        out["login_ssm_command"] = asg_names[LOGIN_GROUP].apply(lambda n: controller_commands(region, n)[1])
    if d.database is not None:
        # Where slurmdbd's history lives; the ARN names the secret, never its value.
        out["accounting_database"] = {
            "identifier": db_identifier(cfg.aws_name_prefix),
            "address": d.database.address,
            "port": d.database.port,
            "secret_arn": d.database.secret_arn,
        }
    if d.logs is not None:
        # Where the nodes' logs and the cluster's metrics are (docs/logs.md, `ops logs`).
        out["logs"] = {
            "log_group_name": d.logs.log_group_name,
            "dashboard_name": d.logs.dashboard_name,
            "metrics_namespace": metrics_namespace(cfg.aws_name_base),
        }
    if d.node.block_ends is not None:
        # Where the controller reads each block's current end (docs/operations.md, extending).
        out["block_ends_uri"] = d.node.bucket.bucket_name.apply(block_ends_uri)
    return out


def build(
    cfg: ClusterConfig,
    region: str,
    now: datetime,
    registry_passwords: dict[str, pulumi.Output[str]] | None = None,
    allow_example_values: bool = False,
) -> BuildResult:
    """Declare the cluster in `region` (infra/stack.py reads it from `aws:region`).

    `now` decides which blocks have started (infra/stack.py reads the clock once; plans
    and tests pass a fixed time, so their output does not depend on the wall clock).
    `registry_passwords`: the Pulumi secrets of `containers` entries of kind stack
    (infra/stack.py reads them), stored in SSM for the nodes.
    `allow_example_values`: the offline plan renders the shipped stack files' example ids.
    Components are declared in dependency order; the plan lists them in this order.
    """
    preflight(cfg, region, now, allow_example_values)
    # Time enters once: the groups and the outputs read the same schedule.
    schedule = cluster_schedule(cfg, now)
    # Before anything is declared: a controller move must not shrink a running group.
    moves = controller_move_problems(cfg, region, schedule)
    if moves:
        raise ConfigError(moves)
    tags = {**cfg.tags, node_tags.CLUSTER: cfg.name}
    net = _network(cfg, region, tags)
    sg = NodeSecurityGroup(cfg.name, NodeSecurityGroupArgs(cluster_name=cfg.name, vpc_id=net.vpc_id, tags=tags))
    fsx = _file_system(cfg, net, sg, tags)
    database = _accounting_database(cfg, net, sg, tags)
    node = _node_payload(cfg, region, fsx, registry_passwords or {}, tags, database)
    cluster_logs = _cluster_logs(cfg, region, tags)
    identity = _node_identity(cfg, node, tags, region, cluster_logs=cluster_logs)
    lt = _launch_template(cfg, sg, identity, node.user_data_b64, tags)
    ctl_identity = _node_identity(
        cfg, node, tags, region, controller=True, database=database, cluster_logs=cluster_logs
    )
    ctl_lt = _controller_launch_template(cfg, sg, ctl_identity, lt, node.user_data_b64, tags)
    login_lt = _login_launch_template(cfg, sg, identity, node.user_data_b64, tags)
    nodes = _node_groups(cfg, net, lt, ctl_lt, schedule, login_lt)
    outputs = _stack_outputs(
        cfg, region, schedule, _Declared(net, sg, fsx, node, lt, ctl_lt, ctl_identity, nodes, database, cluster_logs)
    )
    return BuildResult(outputs=outputs, node_files=node.node_files)
