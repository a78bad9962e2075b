"""Stack configuration: one object under `gpu-cluster:cluster`, validated once, early.

The root model holds `name` and `instance_type`; every other key is a section with its
own module (model/network.py, model/capacity.py, model/fsx.py, ...) holding the
section's model, constants and cross-field rules. Shape errors come from pydantic
(frozen models, `extra="forbid"`, model/shape_errors.py); meaning errors from the
sections' rule functions, composed by `semantic_problems`. Every problem is reported
at once as `path: message` (model/errors.py), with the fix, before any resource is
declared. No pulumi import here: the renderer and the tests use it too.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field, PrivateAttr, ValidationError, field_validator

from model import aws_rules, stand_ins
from model.accounting import AccountingConfig, accounting_problems
from model.base import Strict
from model.capacity import CapacityConfig, NodeGroup, block_date_problems, capacity_problems, node_groups
from model.catalog import CATALOG, SUPPORTED_INSTANCE_TYPES, InstanceSpec
from model.cluster_tags import tag_problems
from model.containers import ContainersConfig, containers_problems
from model.controller import ControllerConfig, controller_block, controller_problems
from model.errors import ConfigError
from model.fsx import FsxConfig, fsx_backup_problems, fsx_problems
from model.health import HealthConfig
from model.hooks import HooksConfig
from model.image import ImageConfig, image_pin_problems
from model.login import LoginConfig
from model.logs import LogsConfig, logs_problems
from model.network import NetworkConfig, configured_zones, network_problems, zone_problems
from model.node_iam import NodeIamConfig, inline_policy_problems, node_iam_problems, partition_problems
from model.paths import REGION_PATH, ROOT, loc_to_path, section_of
from model.repair import RepairConfig
from model.root_volume import RootVolumeConfig, root_volume_problems
from model.shape_errors import shape_problems
from model.slurm import SlurmConfig, slurm_problems
from model.users import UserConfig, users_problems
from model.validation import ValidationConfig

# Cluster names end up in the payload bucket's name prefix (S3: lowercase, at most 37
# characters with our `gpu-cluster-` and `-`), in logical names (IAM role and instance
# profile names are derived from them, 64 characters), in Slurm's ClusterName
# (lowercase only) and in paths on /fsx.
_CLUSTER_NAME = re.compile(r"^[a-z][a-z0-9-]{0,22}[a-z0-9]$")


class ClusterConfig(Strict):
    name: str = Field(
        description="Cluster name: Slurm ClusterName, /fsx paths, the GpuClusterName tag; defaults to the stack name.",
        json_schema_extra={"doc_default": "the stack name"},
    )
    instance_type: str = Field(description="GPU instance type from the catalog.")
    network: NetworkConfig = Field(description="Where the nodes live: one subnet in one AZ.")
    capacity: CapacityConfig = Field(description="How many nodes, and which Capacity Blocks hold them.")
    controller: ControllerConfig = Field(
        ControllerConfig(), description="Where slurmctld runs: on a block's GPU node, or a dedicated CPU instance."
    )
    fsx: FsxConfig = Field(FsxConfig(), description="FSx for Lustre mounted at /fsx on every node.")
    image: ImageConfig = Field(ImageConfig(), description="Node image (one image for every node).")
    root_volume: RootVolumeConfig = Field(RootVolumeConfig(), description="Encrypted gp3 root volume.")
    slurm: SlurmConfig = Field(SlurmConfig(), description="Slurm settings.")
    validation: ValidationConfig = Field(ValidationConfig(), description="First-boot validation gate.")
    health: HealthConfig = Field(
        HealthConfig(), description="Node health program Slurm runs on every node (docs/health.md)."
    )
    repair: RepairConfig = Field(
        RepairConfig(),
        description="What the controller's repair agent does with nodes drained for hardware (docs/health.md).",
    )
    node_iam: NodeIamConfig = Field(NodeIamConfig(), description="Extra permissions for the node role.")
    hooks: HooksConfig = Field(HooksConfig(), description="Site-specific scripts the nodes run at boot.")
    containers: ContainersConfig = Field(
        ContainersConfig(), description="Private container registries: ECR access and registry logins."
    )
    accounting: AccountingConfig = Field(
        AccountingConfig(), description="Slurm accounting on an RDS for MariaDB database (docs/team.md)."
    )
    users: tuple[UserConfig, ...] = Field(
        (),
        description="People sharing the cluster: POSIX accounts on every node and Slurm associations (docs/team.md).",
    )
    login: LoginConfig = Field(LoginConfig(), description="Login nodes people submit from (docs/team.md).")
    logs: LogsConfig = Field(
        LogsConfig(), description="Node logs and cluster metrics in CloudWatch, and a dashboard (docs/logs.md)."
    )
    tags: dict[Annotated[str, Field(min_length=1)], str] = Field(
        default_factory=dict, description="Tags on every resource."
    )

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not _CLUSTER_NAME.match(v):
            raise ValueError(
                f"'{v}' is not a valid cluster name; use 2-24 lowercase letters, digits or '-', starting with a letter (AWS names and Slurm ClusterName)"
            )
        return v

    @field_validator("instance_type")
    @classmethod
    def _type(cls, v: str) -> str:
        if v not in CATALOG:
            raise ValueError(f"'{v}' is not supported; use one of {', '.join(SUPPORTED_INSTANCE_TYPES)}")
        return v

    # The Pulumi stack the config was read for (parse_config(raw, stack=...)); not a key.
    _stack: str | None = PrivateAttr(None)

    # Derived values, computed once so components and renderers agree.
    @property
    def stack(self) -> str | None:
        return self._stack

    @property
    def aws_name_base(self) -> str:
        """What the program's fixed AWS names derive from: the stack name, else the cluster name.

        Launch template and Auto Scaling group names are unique per account and region
        and fixed (operators and `ops` find the groups by name). A stack file copied
        without renaming keeps its `name`, so names built from the cluster name would
        collide with the original stack's; the stack name cannot (one project's stacks
        have distinct names), and with the default `name` it is the cluster name anyway.
        Everything else is auto-named by Pulumi (a random suffix: IAM role and profile,
        payload bucket, placement group, security group) or has no account-wide name.
        """
        return self._stack or self.name

    @property
    def aws_name_prefix(self) -> str:
        return f"gpu-cluster-{self.aws_name_base}"

    @property
    def spec(self) -> InstanceSpec:
        return CATALOG[self.instance_type]

    @property
    def block_end_margin_minutes(self) -> int:
        return self.capacity.block_end_margin_minutes

    @property
    def uses_capacity_blocks(self) -> bool:
        return bool(self.capacity.capacity_blocks)

    @property
    def uses_placement_group(self) -> bool:
        if self.uses_capacity_blocks:
            return False
        return self.capacity.placement_group is not False

    @property
    def dedicated_controller(self) -> bool:
        return self.controller.dedicated

    def node_groups(self) -> list[NodeGroup]:
        """Nodes per group (model/capacity.py `node_groups`): the controller group first."""
        return node_groups(self.capacity, self.dedicated_controller, controller_block(self.controller, self.capacity))


def semantic_problems(cfg: ClusterConfig) -> list[tuple[str, str]]:
    """Every section's cross-field rules, in the order the problems have always been listed."""
    net, cap, fsx = cfg.network, cfg.capacity, cfg.fsx
    problems = network_problems(net)
    ctl = cfg.controller
    problems += capacity_problems(cap, net.availability_zone, ctl.dedicated, controller_block(ctl, cap))
    problems += controller_problems(ctl, cap)
    problems += fsx_problems(fsx)
    problems += block_date_problems(cap)
    problems += fsx_backup_problems(fsx)
    problems += containers_problems(cfg.containers)
    problems += image_pin_problems(cfg.image)
    problems += zone_problems(net, cap)
    problems += root_volume_problems(cfg.root_volume)
    problems += tag_problems(cfg.tags)
    problems += node_iam_problems(cfg.node_iam)
    problems += accounting_problems(cfg.accounting, net.subnet_id)
    problems += users_problems(cfg.users, cfg.accounting.enabled)
    problems += slurm_problems(cfg.slurm, [b.name for b in cap.capacity_blocks])
    problems += logs_problems(cfg.logs, aws_rules.az_region(net.availability_zone))
    # The registries' policy is only sized for a well-formed containers section.
    if not any(section_of(path) == "containers" for path, _ in problems):
        problems += inline_policy_problems(cfg.node_iam, cfg.containers, net.availability_zone, cfg.name)
    return problems


def _semantic_problems_beside(
    raw: dict, shape: list[tuple[str, str]], context: dict[str, Any] | None = None
) -> list[tuple[str, str]]:
    """Meaning errors of the sections that passed shape validation (model/stand_ins.py)."""
    try:
        cfg = ClusterConfig.model_validate(stand_ins.stand_in(raw, shape, ClusterConfig.model_fields), context=context)
    except ValidationError:
        return []
    return stand_ins.beside(semantic_problems(cfg), raw, shape)


def _name_from_stack(problems: list[tuple[str, str]], stack: str) -> list[tuple[str, str]]:
    """A refused default name says where it came from: the user never wrote it."""
    name_path = loc_to_path(("name",))
    return [
        (
            path,
            f"not set, so it defaults to the stack name '{stack}', which is not a valid cluster name "
            "(2-24 lowercase letters, digits or '-', starting with a letter: it becomes Slurm's "
            "ClusterName and part of AWS names); add name: to the stack file",
        )
        if path == name_path
        else (path, message)
        for path, message in problems
    ]


def region_problems(cfg: ClusterConfig, region: str) -> list[tuple[str, str]]:
    """`aws:region` must exist and hold the configured AZs (network and blocks).

    The model never reads `aws:region` itself (it is Pulumi's provider setting); callers
    that know it (infra/stack.py, ops) pass it here or to parse_config(region=...).
    """
    problem = aws_rules.region_problem(region)
    if problem:
        return [(REGION_PATH, problem)]
    out = partition_problems(cfg.node_iam, cfg.containers, region)
    for parts, az in configured_zones(cfg.network, cfg.capacity):
        az_region = aws_rules.az_region(az)
        if az_region is None or az_region == region or az_region not in aws_rules.REGIONS:
            continue  # malformed or unknown: reported by parse_config already
        out.append(
            (
                loc_to_path(parts),
                f"{az} is a zone of {az_region}, but aws:region is {region}; use a zone of {region} "
                f"(e.g. {region}a) or set aws:region to {az_region}",
            )
        )
    return out


def parse_config(
    raw: Any, stack: str | None = None, region: str | None = None, base_dir: Path | None = None
) -> ClusterConfig:
    """Validate the raw `gpu-cluster:cluster` object; raise ConfigError with every problem.

    `stack`: the Pulumi stack name; `name` defaults to it, and AWS names derive from it
    (ClusterConfig.aws_name_base). `region`: `aws:region`, checked with region_problems.
    `base_dir`: where `hooks.on_node_ready.path` is read from (the project directory, where
    Pulumi.yaml and the stack files are); the current directory when not given, which is
    the project directory when Pulumi runs the program.
    """
    if not isinstance(raw, dict):
        raise ConfigError(
            [(ROOT, "missing or not an object; set it in Pulumi.<stack>.yaml (see docs/config-reference.md)")]
        )
    from_stack = stack is not None and raw.get("name") is None
    if from_stack:
        raw = {**raw, "name": stack}
    region_only = [(REGION_PATH, m) for m in [aws_rules.region_problem(region)] if m] if region is not None else []
    context = {"base_dir": base_dir}
    try:
        cfg = ClusterConfig.model_validate(raw, context=context)
    except ValidationError as err:
        shape = shape_problems(err)
        problems = shape + _semantic_problems_beside(raw, shape, context) + region_only
        if from_stack:
            problems = _name_from_stack(problems, str(stack))
        raise ConfigError(problems) from None
    problems = semantic_problems(cfg)
    if region is not None:
        problems += region_problems(cfg, region)
    if problems:
        raise ConfigError(_name_from_stack(problems, str(stack)) if from_stack else problems)
    cfg._stack = stack
    return cfg
