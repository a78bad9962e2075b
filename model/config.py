"""Stack configuration: one object under `gpu-cluster:cluster`, validated once, early.

Shape errors come from pydantic (frozen models, `extra="forbid"`); meaning errors
(cross-field rules: AZs, block sizes, FSx increments) come from `_semantic_errors`.
Every problem is reported at once as `path: message`, with the fix, before any
resource is declared. No pulumi import here: the renderer and the tests use it too.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from model import aws_rules
from model import tags as node_tags
from model.catalog import CATALOG, SUPPORTED_INSTANCE_TYPES

CONFIG_NAMESPACE = "gpu-cluster"
CONFIG_KEY = "cluster"
ROOT = f"{CONFIG_NAMESPACE}:{CONFIG_KEY}"

DLAMI_SSM_PARAMETER = "/aws/service/deeplearning/ami/x86_64/base-oss-nvidia-driver-gpu-ubuntu-24.04/latest/ami-id"

# Capacity Blocks hold at most 64 instances each [CB-USE].
MAX_INSTANCES_PER_BLOCK = 64
# Every Capacity Block ends at 11:30 UTC [CB-PURCHASE]. Start times and durations are
# not checked here: an offering that starts today starts before 11:30 and is shorter
# than whole days, and extensions change the end; preflight compares the declared
# dates with EC2's own record of the block instead.
BLOCK_END_UTC = (11, 30)
# EC2 starts terminating a block's instances 30 minutes before its end [CB-USE]; the
# group must be at zero by then ([ASG-CB]: scale to zero at least 30 minutes before).
EC2_BLOCK_END_LEAD_MINUTES = 30
DEFAULT_BLOCK_END_MARGIN_MINUTES = 40
# FSx automatic backup retention, days (0 disables them) [BOTO-FSX].
MAX_BACKUP_RETENTION_DAYS = 90
# Ubuntu 22.04 ships Slurm 21.08, which has no dynamic nodes (`slurmd -Z` came in
# 22.05), and cannot load Enroot's AppArmor profile: every node would fail to join.
UNSUPPORTED_UBUNTU = re.compile(r"ubuntu[-_ ]?22[.-]04", re.IGNORECASE)

# FSx for Lustre storage increments, GiB [BOTO-FSX].
_FSX_INCREMENT = {"SCRATCH_1": 3600, "SCRATCH_2": 2400, "PERSISTENT_1": 2400, "PERSISTENT_2": 2400}
# Per-unit storage throughput, MB/s/TiB, SSD storage [BOTO-FSX].
_FSX_THROUGHPUT = {"PERSISTENT_1": (50, 100, 200), "PERSISTENT_2": (125, 250, 500, 1000)}

# Cluster names end up in the payload bucket's name prefix (S3: lowercase, at most 37
# characters with our `gpu-cluster-` and `-`), in logical names (IAM role and instance
# profile names are derived from them, 64 characters), in Slurm's ClusterName
# (lowercase only) and in paths on /fsx.
_CLUSTER_NAME = re.compile(r"^[a-z][a-z0-9-]{0,22}[a-z0-9]$")
# Slurm partition and block names become Slurm identifiers and node features.
_SLURM_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,31}$")
_AZ = re.compile(r"^[a-z]{2}(-[a-z]+)+-\d[a-z]$")
MAX_VPC_PREFIX = 24


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, str_strip_whitespace=True)


def _aws_id(prefix: str, value: str, what: str, hint: str) -> str:
    """`value` if it is an EC2 resource id `<prefix>-<8 to 17 hex digits>`, else the error with the fix."""
    if not re.match(rf"^{prefix}-[0-9a-f]{{8,17}}$", value):
        raise ValueError(f"'{value}' is not {what}; {hint}")
    return value


class NetworkConfig(Strict):
    availability_zone: str = Field(description="AZ of the cluster subnet; EFA peers must share it.")
    subnet_id: str | None = Field(None, description="Existing private subnet; omit to create a VPC.")
    vpc_cidr: str = Field("10.0.0.0/16", description="CIDR of the created VPC (only without subnet_id).")

    @field_validator("availability_zone")
    @classmethod
    def _az(cls, v: str) -> str:
        if not _AZ.match(v):
            raise ValueError(f"'{v}' is not an availability zone name; use e.g. 'us-east-2b'")
        return v

    @field_validator("subnet_id")
    @classmethod
    def _subnet(cls, v: str | None) -> str | None:
        return (
            v
            if v is None
            else _aws_id(
                "subnet",
                v,
                "a subnet id",
                "use the 'subnet-0123abcd...' id of an existing subnet, or omit it to create a VPC",
            )
        )

    @field_validator("vpc_cidr")
    @classmethod
    def _cidr(cls, v: str) -> str:
        # The program cuts the block into quarters (infra/network.py); a /24 gives /26
        # subnets of 59 usable addresses, enough for a node each plus FSx.
        problem = aws_rules.cidr_problem(v, max_prefix=MAX_VPC_PREFIX)
        if problem:
            raise ValueError(problem)
        return v


def iso_utc(value: datetime) -> str:
    """The one spelling of a time in tags, schedules and messages: 2026-12-08T11:30:00Z."""
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class CapacityBlock(Strict):
    name: str = Field(description="Short block name: node feature `block-<name>` and node group name.")
    reservation_id: str = Field(description="Capacity Block reservation id (cr-...).")
    instance_count: int = Field(gt=0, description="Instances the block holds.")
    availability_zone: str = Field(description="AZ of the block (must equal network.availability_zone).")
    start: datetime | None = Field(
        None, description="Block start, ISO-8601 with zone (e.g. 2026-12-01T11:30:00Z); required to deploy."
    )
    end: datetime | None = Field(
        None, description="Block end, ISO-8601 with zone (blocks end at 11:30 UTC); required to deploy."
    )

    @field_validator("start", "end", mode="before")
    @classmethod
    def _not_a_number(cls, v: Any) -> Any:
        # Pydantic reads a number as seconds since 1970: `end: 0` would become a
        # 1970 date and a message about a date nobody wrote.
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            raise ValueError(
                f"{_got(v)} is a number, not a time; write it as ISO-8601 with a zone in quotes, e.g. '2026-12-08T11:30:00Z'"
            )
        return v

    @field_validator("availability_zone")
    @classmethod
    def _az(cls, v: str) -> str:
        if not _AZ.match(v):
            raise ValueError(
                f"'{v}' is not an availability zone name; copy the block's zone from EC2, e.g. 'us-east-2b'"
            )
        return v

    @field_validator("start", "end")
    @classmethod
    def _utc(cls, v: datetime | None) -> datetime | None:
        # A time without a zone would be read in the local zone of whoever runs
        # `pulumi up`: the schedule would move with the operator's laptop.
        if v is not None and (v.tzinfo is None or v.utcoffset() is None):
            raise ValueError(
                f"'{v.isoformat()}' has no time zone; write it in UTC with a Z, e.g. '2026-12-08T11:30:00Z'"
            )
        return v.astimezone(UTC) if v is not None else v

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not _SLURM_NAME.match(v):
            raise ValueError(
                f"'{v}' is not a valid block name; use letters, digits, '-' or '_', starting with a letter, at most 32 characters"
            )
        return v

    @field_validator("reservation_id")
    @classmethod
    def _cr(cls, v: str) -> str:
        return _aws_id("cr", v, "a capacity reservation id", "copy the 'cr-...' id of the purchased Capacity Block")

    @field_validator("instance_count")
    @classmethod
    def _count(cls, v: int) -> int:
        if v > MAX_INSTANCES_PER_BLOCK:
            raise ValueError(
                f"a Capacity Block holds at most {MAX_INSTANCES_PER_BLOCK} instances; split it into several blocks"
            )
        return v


class CapacityConfig(Strict):
    nodes: int = Field(ge=2, le=4096, description="GPU nodes in the cluster (one of them is the controller).")
    capacity_blocks: tuple[CapacityBlock, ...] = Field(
        (), description="Capacity Blocks to place nodes in; empty for on-demand."
    )
    placement_group: bool | None = Field(
        None, description="Cluster placement group; on-demand only (default true there)."
    )
    block_end_margin_minutes: int = Field(
        DEFAULT_BLOCK_END_MARGIN_MINUTES,
        description="Minutes before a block's end at which its group scales to zero and Slurm stops starting jobs there (at least 30).",
    )

    @field_validator("block_end_margin_minutes")
    @classmethod
    def _margin(cls, v: int) -> int:
        if v < EC2_BLOCK_END_LEAD_MINUTES:
            raise ValueError(
                f"{v} minutes is less than the {EC2_BLOCK_END_LEAD_MINUTES} minutes before a block's end at which EC2 terminates its instances; use at least {EC2_BLOCK_END_LEAD_MINUTES} (default {DEFAULT_BLOCK_END_MARGIN_MINUTES})"
            )
        if v > 24 * 60:
            raise ValueError(
                f"{v} minutes is more than a day; use {DEFAULT_BLOCK_END_MARGIN_MINUTES} unless jobs need a longer stop"
            )
        return v


FsxDeployment = Literal["SCRATCH_1", "SCRATCH_2", "PERSISTENT_1", "PERSISTENT_2"]


class DataRepository(Strict):
    s3_uri: str = Field(description="s3://bucket[/prefix] linked to the file system.")
    file_system_path: str = Field("/data", description="Path inside /fsx the bucket appears at.")

    @field_validator("s3_uri")
    @classmethod
    def _s3(cls, v: str) -> str:
        m = re.match(r"^s3://([^/\s]*)(/\S*)?$", v)
        if not m:
            raise ValueError(f"'{v}' is not an S3 URI; use 's3://bucket-name/prefix'")
        problem = aws_rules.s3_bucket_problem(m.group(1))
        if problem:
            raise ValueError(
                f"{problem}, so FSx cannot link '{v}'; use the name of an existing bucket: 's3://bucket-name/prefix'"
            )
        return v

    @field_validator("file_system_path")
    @classmethod
    def _path(cls, v: str) -> str:
        if not re.match(r"^/[A-Za-z0-9._/-]+$", v) or v == "/" or v.startswith("/.gpu-cluster"):
            raise ValueError(
                f"'{v}' is not a usable path; use an absolute path such as '/data' (not '/' or '/.gpu-cluster')"
            )
        return v


class FsxIdentity(Strict):
    """What the file system was created with: every value whose change replaces it.

    The program exports the current values as the `fsx_identity` stack output; pinning
    them here (`fsx.pinned`) after the first `pulumi up` makes a later edit of any of
    them fail before anything is touched (model/fsx_identity.py).
    """

    cluster_name: str = Field(
        description="Cluster name (in the logical names of the file system and its security group)."
    )
    deployment_type: FsxDeployment = Field(description="FSx deployment type.")
    storage_type: str = Field(description="FSx storage type.")
    file_system_type_version: str = Field(description="Lustre version.")
    subnet: str = Field(description="Subnet id, or 'created:<az>:<vpc_cidr>' for the subnet the stack creates.")
    storage_capacity_gib: int = Field(description="Storage capacity, GiB (may grow, never shrink).")
    copy_tags_to_backups: bool = Field(description="Set only at creation.")
    s3_import_path: str | None = Field(None, description="Import/export path (S3 link of PERSISTENT_1, SCRATCH_2).")


class FsxConfig(Strict):
    deployment_type: FsxDeployment = Field("PERSISTENT_2", description="FSx for Lustre deployment type.")
    storage_capacity_gib: int = Field(1200, description="Storage capacity, GiB (1200, 2400, then type's increment).")
    per_unit_storage_throughput: int | None = Field(250, description="MB/s/TiB; PERSISTENT types only.")
    data_repository: DataRepository | None = Field(
        None,
        description="Optional S3 data repository; FSx then takes no backups (needs backup_retention_days: 0, allow_no_backups: true).",
    )
    protect: bool | None = Field(
        None,
        description="Pulumi `protect`: a preview that would delete or replace the file system fails (default: true for PERSISTENT types).",
    )
    backup_retention_days: int = Field(
        7,
        ge=0,
        le=MAX_BACKUP_RETENTION_DAYS,
        description="Automatic daily backups kept, days (PERSISTENT types not linked to S3; 0 needs allow_no_backups).",
    )
    allow_no_backups: bool = Field(
        False,
        description="Opt-out that lets backup_retention_days be 0 (required with data_repository: FSx backs up no file system linked to S3).",
    )
    allow_replace: bool = Field(
        False, description="Let an edit of a pinned value replace the file system (its data is lost)."
    )
    pinned: FsxIdentity | None = Field(
        None, description="Values the file system was created with (copy of the `fsx_identity` stack output)."
    )

    @property
    def persistent(self) -> bool:
        return self.deployment_type.startswith("PERSISTENT")

    @property
    def protected(self) -> bool:
        return self.persistent if self.protect is None else self.protect

    @property
    def backed_up(self) -> bool:
        """FSx backs up only persistent file systems that are not linked to S3
        [FSX-SCRATCH] [FSX-CREATEBACKUP]; a linked one relies on its bucket."""
        return self.persistent and self.data_repository is None


class ImageConfig(Strict):
    ami_id: str | None = Field(
        None, description="Pinned AMI id every node boots (required to deploy unless allow_unpinned)."
    )
    ssm_parameter: str = Field(DLAMI_SSM_PARAMETER, description="Public SSM parameter the pinned AMI id was read from.")
    allow_unpinned: bool = Field(
        False, description="Boot whatever AMI ssm_parameter names at each launch (replacements may get another kernel)."
    )

    @field_validator("ami_id")
    @classmethod
    def _ami(cls, v: str | None) -> str | None:
        return (
            v
            if v is None
            else _aws_id("ami", v, "an AMI id", "use 'ami-0123...' or omit it to use the DLAMI SSM parameter")
        )

    @field_validator("ssm_parameter")
    @classmethod
    def _ssm(cls, v: str) -> str:
        if not v.startswith("/"):
            raise ValueError(f"'{v}' is not an SSM parameter path; it must start with '/'")
        if UNSUPPORTED_UBUNTU.search(v):
            raise ValueError(
                f"'{v}' is an Ubuntu 22.04 image: its Slurm 21.08 has no dynamic nodes (slurmd -Z came in 22.05) and its AppArmor cannot load Enroot's profile; use the Ubuntu 24.04 DLAMI parameter '{DLAMI_SSM_PARAMETER}'"
            )
        return v


class RootVolumeConfig(Strict):
    size_gib: int = Field(512, ge=100, le=16384, description="gp3 root volume size, GiB (DLAMI needs >= 100).")
    iops: int = Field(3000, ge=3000, le=16000, description="gp3 IOPS.")
    throughput_mibps: int = Field(250, ge=125, le=1000, description="gp3 throughput, MiB/s.")


class SlurmConfig(Strict):
    partition: str = Field("train", description="Default Slurm partition name.")
    default_time_minutes: int = Field(
        60, ge=1, le=43200, description="Time limit of a job submitted without --time (partition DefaultTime)."
    )

    @field_validator("partition")
    @classmethod
    def _partition(cls, v: str) -> str:
        if not _SLURM_NAME.match(v) or v.upper() == "DEFAULT":
            raise ValueError(
                f"'{v}' is not a valid Slurm partition name; use letters, digits, '-' or '_' (not 'DEFAULT')"
            )
        return v


class ValidationConfig(Strict):
    enabled: bool = Field(True, description="Submit the first-boot validation job on the controller.")
    container_image: str = Field(
        "nvcr.io#nvidia/pytorch:26.08-py3",
        description="Training image for the in-container check: Enroot form `[USER@][REGISTRY#]IMAGE[:TAG]` (or `@DIGEST`), or an absolute .sqsh path ('' skips it).",
    )
    time_limit_minutes: int = Field(60, ge=5, le=720, description="Slurm time limit of the validation job.")
    baseline_margin: float = Field(
        0.10, gt=0, lt=1, allow_inf_nan=False, description="Drop vs baseline that turns a run NO-GO."
    )
    wait_for_nodes_minutes: int = Field(
        30, ge=1, le=240, description="How long the controller waits for nodes to be idle."
    )

    @field_validator("container_image")
    @classmethod
    def _image(cls, v: str) -> str:
        problem = aws_rules.container_image_problem(v)
        if problem:
            raise ValueError(problem)
        return v


# Tag keys the program sets itself: the most any one resource carries (an instance:
# Name and the node identity tags, model/tags.py, infra/nodes.py).
PROGRAM_TAG_KEYS = ("Name", *node_tags.NODE_IDENTITY, node_tags.BLOCK_END)


# --- node extension points: node_iam and hooks ---------------------------------------
# The node role's own managed policy (infra/iam.py attaches it); extra ARNs count
# against the same per-role quota.
SSM_CORE_POLICY_ARN = "arn:aws:iam::aws:policy/AmazonSSMManagedInstanceCore"
# Managed policies attached to one IAM role: 10 by default (adjustable through Service
# Quotas) [IAM-QUOTAS]. We stay within the default so a stack never depends on a raised
# quota nobody remembers asking for.
IAM_MANAGED_POLICIES_PER_ROLE = 10
# All inline policies of one role together: at most 10,240 characters, white space not
# counted [IAM-QUOTAS]. The program's own inline policies (the payload read: about 200
# characters with the longest bucket name) keep a reserve; node_iam.statements get the rest.
IAM_ROLE_INLINE_POLICY_CHARS = 10240
PROGRAM_INLINE_POLICY_RESERVE = 2048
MAX_NODE_IAM_STATEMENT_CHARS = IAM_ROLE_INLINE_POLICY_CHARS - PROGRAM_INLINE_POLICY_RESERVE
# arn:PARTITION:iam::(aws|ACCOUNT):policy/[PATH/]NAME; names and paths use letters,
# digits and +=,.@_- [IAM-QUOTAS]. The partitions IAM exists in: aws, aws-cn, aws-us-gov.
_POLICY_ARN = re.compile(r"^arn:(aws|aws-cn|aws-us-gov):iam::(aws|\d{12}):policy/(?:[\w+=,.@-]+/)*[\w+=,.@-]{1,128}$")
# service:Action, with * and ? wildcards in the action part [IAM-JSON].
_IAM_ACTION = re.compile(r"^[a-z0-9][a-z0-9-]*:[A-Za-z0-9*?]+$")
_IAM_SID = re.compile(r"^[A-Za-z0-9]*$")  # IAM policies: ASCII letters and digits only [IAM-JSON]
# What a hook may be: a script, not a payload (large files belong on S3 or /fsx).
MAX_HOOK_BYTES = 64 * 1024
DEFAULT_HOOK_TIMEOUT_MINUTES = 10
MAX_HOOK_TIMEOUT_MINUTES = 120


def _policy_arn(v: str) -> str:
    if not _POLICY_ARN.match(v):
        raise ValueError(
            f"'{v}' is not an IAM managed policy ARN; use 'arn:aws:iam::aws:policy/NAME' (AWS managed) or "
            "'arn:aws:iam::123456789012:policy/NAME' (customer managed; partition aws, aws-cn or aws-us-gov)"
        )
    return v


def _one_or_many(v: Any) -> Any:
    """IAM takes one string or a list of them for Action and Resource; keep a list."""
    return (v,) if isinstance(v, str) else v


ConditionValue = str | bool | int | float | tuple[str | bool | int | float, ...]


class PolicyStatement(Strict):
    """One IAM policy statement, as in a policy document [IAM-JSON]. Principal, NotAction
    and NotResource are refused: an identity policy has no principal, and the negated
    forms grant everything not listed."""

    Sid: str | None = Field(None, description="Statement id: letters and digits, unique in node_iam.statements.")
    Effect: Literal["Allow", "Deny"] = Field(description="Allow or Deny.")
    Action: Annotated[tuple[str, ...], BeforeValidator(_one_or_many)] = Field(
        description="One action or a list ('service:Action', wildcards * and ? allowed; '*' alone is refused)."
    )
    Resource: Annotated[tuple[str, ...], BeforeValidator(_one_or_many)] = Field(
        description="One resource ARN or a list ('*' for all)."
    )
    Condition: dict[str, dict[str, ConditionValue]] | None = Field(
        None, description="IAM condition block: operator -> condition key -> value(s)."
    )

    @field_validator("Sid")
    @classmethod
    def _sid(cls, v: str | None) -> str | None:
        if v is not None and not _IAM_SID.match(v):
            raise ValueError(f"'{v}' is not a valid Sid; IAM takes letters and digits only (e.g. 'ReadTrainingData')")
        return v

    @field_validator("Action")
    @classmethod
    def _action(cls, v: tuple[str, ...], info: ValidationInfo) -> tuple[str, ...]:
        if not v:
            raise ValueError("empty; list at least one action such as 's3:GetObject'")
        for a in v:
            if a in ("*", "*:*") and info.data.get("Effect") == "Deny":
                raise ValueError(
                    f"'{a}' denies every action, the node's own SSM access and payload read included: no node "
                    "could boot; list the actions to deny"
                )
            if a in ("*", "*:*"):
                raise ValueError(
                    f"'{a}' is every action of every service: every job on the nodes would be an administrator; "
                    "list the actions the nodes need (e.g. 's3:GetObject'), or attach a managed policy that grants them"
                )
            if not _IAM_ACTION.match(a):
                raise ValueError(
                    f"'{a}' is not an IAM action; write 'service:Action', e.g. 's3:GetObject' or 'ecr:Get*'"
                )
        return v

    @field_validator("Resource")
    @classmethod
    def _resource(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        if not v:
            raise ValueError("empty; list at least one resource ARN, or '*'")
        for r in v:
            if r != "*" and not r.startswith("arn:"):
                raise ValueError(f"'{r}' is not a resource ARN; write 'arn:aws:SERVICE:REGION:ACCOUNT:...' or '*'")
        return v

    def document(self) -> dict[str, Any]:
        """The statement as IAM JSON (one value stays a string, as it was written)."""
        out: dict[str, Any] = {}
        if self.Sid:
            out["Sid"] = self.Sid
        out["Effect"] = self.Effect
        out["Action"] = self.Action[0] if len(self.Action) == 1 else list(self.Action)
        out["Resource"] = self.Resource[0] if len(self.Resource) == 1 else list(self.Resource)
        if self.Condition:
            out["Condition"] = {
                op: {k: list(x) if isinstance(x, tuple) else x for k, x in keys.items()}
                for op, keys in self.Condition.items()
            }
        return out


def iam_policy_chars(document: dict[str, Any]) -> int:
    """Characters IAM counts for a policy document: everything but white space [IAM-QUOTAS]."""
    return len(re.sub(r"\s", "", json.dumps(document, sort_keys=True)))


class NodeIamConfig(Strict):
    managed_policy_arns: tuple[Annotated[str, AfterValidator(_policy_arn)], ...] = Field(
        (),
        description=f"Extra managed policies for the node role (IAM's {IAM_MANAGED_POLICIES_PER_ROLE} per role, less the program's own).",
    )
    statements: tuple[PolicyStatement, ...] = Field(
        (), description="Extra IAM statements for the node role, as one inline policy."
    )

    @field_validator("managed_policy_arns")
    @classmethod
    def _arns(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        for i, arn in enumerate(v):
            if v.index(arn) != i:
                raise ValueError(f"{arn} is listed twice (items {v.index(arn)} and {i}); list each policy once")
        partitions = sorted({arn.split(":")[1] for arn in v})
        if len(partitions) > 1:
            raise ValueError(
                f"the ARNs name partitions {', '.join(partitions)}; a role lives in one partition, "
                "so use the partition of the stack's region for all of them"
            )
        return v

    @field_validator("statements")
    @classmethod
    def _statements(cls, v: tuple[PolicyStatement, ...]) -> tuple[PolicyStatement, ...]:
        sids = [s.Sid for s in v if s.Sid]
        dup = sorted({s for s in sids if sids.count(s) > 1})
        if dup:
            raise ValueError(f"Sid {', '.join(dup)} is used more than once; IAM needs each Sid unique in a policy")
        if v:
            size = iam_policy_chars(node_iam_policy(v))
            if size > MAX_NODE_IAM_STATEMENT_CHARS:
                raise ValueError(
                    f"the statements come to {size} characters (white space not counted); IAM takes at most "
                    f"{IAM_ROLE_INLINE_POLICY_CHARS} for all inline policies of a role and the program keeps "
                    f"{PROGRAM_INLINE_POLICY_RESERVE} for its own, so stay within {MAX_NODE_IAM_STATEMENT_CHARS}: "
                    "merge statements or move them into a customer managed policy (node_iam.managed_policy_arns)"
                )
        return v


def program_managed_policy_arns(cfg: ClusterConfig) -> tuple[str, ...]:
    """Managed policies the program itself attaches to the node role (infra/iam.py)."""
    return (SSM_CORE_POLICY_ARN,)


def _node_iam_problems(cfg: ClusterConfig) -> list[tuple[str, str]]:
    """What node_iam cannot hold beside what the program attaches itself."""
    arns, own = cfg.node_iam.managed_policy_arns, program_managed_policy_arns(cfg)
    path = _loc_to_path(("node_iam", "managed_policy_arns"))
    problems = [
        (path, f"{arn} (item {i}) is attached to the node role already; remove it")
        for i, arn in enumerate(arns)
        if arn in own
    ]
    room = IAM_MANAGED_POLICIES_PER_ROLE - len(own)
    if len(arns) > room:
        problems.append(
            (
                path,
                f"{len(arns)} policies, but IAM attaches at most {IAM_MANAGED_POLICIES_PER_ROLE} managed policies to a "
                f"role by default and the program attaches {len(own)}; use at most {room}, or move permissions "
                "into node_iam.statements or one customer managed policy",
            )
        )
    return problems


def _inline_policy_problems(cfg: ClusterConfig, found: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """All inline policies of the node role share IAM's 10,240 characters [IAM-QUOTAS]:
    the program's own (payload read, within PROGRAM_INLINE_POLICY_RESERVE), the
    `containers` policy (model/registries.py) and node_iam.statements. Checked here, not
    when IAM refuses the role policy after the network and FSx exist."""
    if not cfg.containers.enabled or any(path.startswith(_loc_to_path(("containers",))) for path, _ in found):
        return []
    from model.registries import registry_access, registry_policy_document

    region = aws_rules.az_region(cfg.network.availability_zone)
    if region is None:
        return []  # reported as an AZ problem
    # Any 12-digit account gives the same length as the stack's own.
    access = registry_access(cfg.containers, region, "123456789012", cfg.name)
    assert access is not None  # containers.enabled
    registries = iam_policy_chars(registry_policy_document(access))
    statements = iam_policy_chars(node_iam_policy(cfg.node_iam.statements)) if cfg.node_iam.statements else 0
    total = PROGRAM_INLINE_POLICY_RESERVE + registries + statements
    if total <= IAM_ROLE_INLINE_POLICY_CHARS:
        return []
    return [
        (
            _loc_to_path(("containers",)),
            f"the node role's inline policies come to about {total} characters (the registries' policy "
            f"{registries}, node_iam.statements {statements}, the program's own up to "
            f"{PROGRAM_INLINE_POLICY_RESERVE}); IAM takes {IAM_ROLE_INLINE_POLICY_CHARS} for all inline policies "
            "of a role: list fewer registries or secrets (one Secrets Manager secret can hold a login), or move "
            "node_iam.statements into a customer managed policy (node_iam.managed_policy_arns)",
        )
    ]


def node_iam_policy(statements: tuple[PolicyStatement, ...]) -> dict[str, Any]:
    """The inline policy document made of node_iam.statements."""
    return {"Version": "2012-10-17", "Statement": [s.document() for s in statements]}


def node_iam_warnings(cfg: ClusterConfig) -> list[tuple[str, str]]:
    """Allowed, but worth a second look in review: broad grants to every node.

    Every process on a node (every job of every user) can use the instance role, so a
    wildcard grant is a grant to whoever can submit a job."""
    out = []
    for i, s in enumerate(cfg.node_iam.statements):
        if s.Effect != "Allow":
            continue
        path = _loc_to_path(("node_iam", "statements", i, "Action"))
        wide = [a for a in s.Action if a.split(":", 1)[1] == "*"]
        if wide:
            out.append((path, f"{', '.join(wide)} allows every action of the service to every job on the nodes"))
        iam = [a for a in s.Action if a.split(":", 1)[0] in ("iam", "sts") and a not in wide]
        if iam and "*" in s.Resource:
            out.append(
                (path, f"{', '.join(iam)} on Resource '*': IAM and STS rights on every role can escalate to admin")
            )
    return out


def _hook_path_shape(v: str) -> str:
    p = PurePosixPath(v)
    if p.is_absolute() or ".." in p.parts or not v or "\\" in v:
        raise ValueError(
            f"'{v}' must be a relative path inside the project (next to Pulumi.yaml), without '..', e.g. 'hooks/on-node-ready.sh'"
        )
    return v


def check_hook_text(data: bytes, what: str) -> str:
    """The hook's text, or ValueError naming what is wrong and the fix."""
    if len(data) > MAX_HOOK_BYTES:
        raise ValueError(
            f"{what} is {len(data)} bytes, over the {MAX_HOOK_BYTES} a hook may have; a hook is a setup "
            "script: put large files on S3 or /fsx and fetch them from the hook"
        )
    if not data.startswith(b"#!"):
        raise ValueError(f"{what} does not start with '#!' (e.g. '#!/bin/bash'); the node runs it as a program")
    if b"\0" in data:
        raise ValueError(f"{what} contains NUL bytes; a hook is a text script")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"{what} is not UTF-8 text; save it as UTF-8") from None


def read_hook_file(base_dir: Path, rel: str) -> str:
    path = base_dir / rel
    if not path.is_file():
        raise ValueError(f"{path} does not exist or is not a file; the path is relative to {base_dir}")
    try:
        data = path.read_bytes()
    except OSError as err:
        raise ValueError(f"cannot read {path}: {err.strerror}") from None
    return check_hook_text(data, str(path))


def _base_dir(info: ValidationInfo) -> Path:
    context = info.context or {}
    return Path(context.get("base_dir") or Path.cwd())


class NodeReadyHook(Strict):
    path: Annotated[str, AfterValidator(_hook_path_shape)] | None = Field(
        None, description="Script file, relative to the project directory (where Pulumi.yaml is)."
    )
    script: str | None = Field(None, description="The script itself, inline (instead of path); starts with '#!'.")
    timeout_minutes: int = Field(
        DEFAULT_HOOK_TIMEOUT_MINUTES,
        ge=1,
        le=MAX_HOOK_TIMEOUT_MINUTES,
        description="The hook is killed after this long and the boot fails at the hook step.",
    )
    run_on: Literal["all", "controller", "workers"] = Field("all", description="Which nodes run it.")
    _text: str = PrivateAttr("")

    @field_validator("path")
    @classmethod
    def _readable(cls, v: str | None, info: ValidationInfo) -> str | None:
        if v is not None:
            read_hook_file(_base_dir(info), v)
        return v

    @field_validator("script")
    @classmethod
    def _inline(cls, v: str | None) -> str | None:
        if v is not None:
            check_hook_text(v.encode("utf-8"), "the inline script")
        return v

    @model_validator(mode="after")
    def _one_source(self, info: ValidationInfo) -> NodeReadyHook:
        if (self.path is None) == (self.script is None):
            raise ValueError("set exactly one of path (a script file in the project) or script (the text inline)")
        self._text = self.script if self.script is not None else read_hook_file(_base_dir(info), self.path or "")
        return self

    @property
    def text(self) -> str:
        """The script the nodes run, ending in one newline."""
        return self._text.rstrip("\n") + "\n"


class HooksConfig(Strict):
    on_node_ready: NodeReadyHook | None = Field(
        None, description="Script every node (or run_on's nodes) runs as the last boot step."
    )


# --- containers: private registries (docs/images.md "Private images") -----------------
# An ECR private registry host: <account>.dkr.ecr.<region>.amazonaws.com[.cn] [ECR-AUTH].
ECR_HOST = re.compile(r"^(\d{12})\.dkr\.ecr\.([a-z0-9-]+)\.amazonaws\.com(\.cn)?$")
_ACCOUNT_ID = re.compile(r"^\d{12}$")
# A registry host as Enroot matches it in its credentials file (`machine <host>`), with
# an optional port; lowercase, because registry hosts are DNS names.
_REGISTRY_HOST = re.compile(r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*(:\d{1,5})?$")
# SSM parameter names: letters, digits and . - _ with / for hierarchies of at most 15
# levels, no 'aws' or 'ssm' prefix [SSM-NAMES].
_SSM_NAME = re.compile(r"^/?[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)*$")
# Secrets Manager: a name (letters, digits and /_+=.@-) or the secret's full ARN [SM-ARN].
_SM_NAME = re.compile(r"^[A-Za-z0-9/_+=.@-]{1,512}$")
_SM_ARN = re.compile(r"^arn:aws(-cn|-us-gov)?:secretsmanager:[a-z0-9-]+:\d{12}:secret:[A-Za-z0-9/_+=.@-]+$")


# A stack secret's short name: the config key `gpu-cluster:registry_password_<name>` and
# the last component of the SSM parameter the program creates from it.
_STACK_SECRET = re.compile(r"^[a-z][a-z0-9_]{0,39}$")
STACK_SECRET_PREFIX = "registry_password_"


class RegistryCredential(Strict):
    registry: str = Field(description="Registry host the login is for, as in the image name (e.g. nvcr.io).")
    kind: Literal["ssm", "secretsmanager", "stack"] = Field(
        description="Where the secret lives: an SSM SecureString parameter, a Secrets Manager secret, or a stack secret the program stores in SSM."
    )
    secret: str = Field(
        description='ssm: parameter name; secretsmanager: secret name or ARN (value: JSON {"login": ..., "password": ...}); stack: short name of the stack secret gpu-cluster:registry_password_<secret>.'
    )
    login: str | None = Field(
        None, description="kind stack only: the login that goes with the stack secret (e.g. $oauthtoken for NGC)."
    )


class ContainersConfig(Strict):
    ecr: bool | tuple[str, ...] = Field(
        False,
        description="ECR registries nodes may pull from: true for this account's registry in the stack's region, or a list of account ids / registry hosts.",
    )
    registry_credentials: tuple[RegistryCredential, ...] = Field(
        (), description="Logins for other registries (NGC, a private registry), read by the nodes at boot."
    )

    @field_validator("ecr", mode="before")
    @classmethod
    def _ecr_shape(cls, v: Any) -> Any:
        if isinstance(v, bool):
            return v
        if not isinstance(v, (list, tuple)):
            raise ValueError(f"{v!r} is not true/false or a list; use true, or a list of account ids or ECR hosts")
        for item in v:
            if not isinstance(item, str):
                raise ValueError(
                    f"{item!r} is not a string; quote account ids in YAML ('123456789012': a number loses leading zeros)"
                )
        return v

    @property
    def enabled(self) -> bool:
        return bool(self.ecr) or bool(self.registry_credentials)


class ClusterConfig(Strict):
    name: str = Field(
        description="Cluster name: Slurm ClusterName, /fsx paths, the GpuClusterName tag; defaults to the stack name.",
        json_schema_extra={"doc_default": "the stack name"},
    )
    instance_type: str = Field(description="GPU instance type from the catalog.")
    network: NetworkConfig = Field(description="Where the nodes live: one subnet in one AZ.")
    capacity: CapacityConfig = Field(description="How many nodes, and which Capacity Blocks hold them.")
    fsx: FsxConfig = Field(FsxConfig(), description="FSx for Lustre mounted at /fsx on every node.")
    image: ImageConfig = Field(ImageConfig(), description="Node image (one image for every node).")
    root_volume: RootVolumeConfig = Field(RootVolumeConfig(), description="Encrypted gp3 root volume.")
    slurm: SlurmConfig = Field(SlurmConfig(), description="Slurm settings.")
    validation: ValidationConfig = Field(ValidationConfig(), description="First-boot validation gate.")
    node_iam: NodeIamConfig = Field(NodeIamConfig(), description="Extra permissions for the node role.")
    hooks: HooksConfig = Field(HooksConfig(), description="Site-specific scripts the nodes run at boot.")
    containers: ContainersConfig = Field(
        ContainersConfig(), description="Private container registries: ECR access and registry logins."
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
    def spec(self):
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

    def node_groups(self) -> list[NodeGroup]:
        """Nodes per group: the controller group (1 node) first, then workers per block.

        Blocks fill in the order given; the controller takes its node from the first
        block so every node shares one template and one image (one GPU node doubles
        as the controller).
        """
        groups: list[NodeGroup] = []
        if not self.uses_capacity_blocks:
            groups.append(NodeGroup("controller", "controller", 1, None))
            groups.append(NodeGroup("workers", "worker", self.capacity.nodes - 1, None))
            return groups
        remaining = self.capacity.nodes
        for i, block in enumerate(self.capacity.capacity_blocks):
            take = min(remaining, block.instance_count)
            remaining -= take
            if i == 0:
                groups.append(NodeGroup("controller", "controller", 1, block))
                take -= 1
            groups.append(NodeGroup(f"block-{block.name}", "worker", take, block))
        return groups


class NodeGroup:
    """One Auto Scaling group: a role, a size and (optionally) its Capacity Block."""

    def __init__(self, name: str, role: str, size: int, block: CapacityBlock | None):
        self.name, self.role, self.size, self.block = name, role, size, block

    def __repr__(self) -> str:
        return f"NodeGroup({self.name!r}, {self.role!r}, {self.size}, {self.block and self.block.name!r})"


class ConfigError(Exception):
    """All problems found in the stack config, one `path: message` per line."""

    def __init__(self, problems: list[tuple[str, str]]):
        self.problems = problems
        super().__init__("\n".join(f"{p}: {m}" for p, m in problems))


def _loc_to_path(loc: tuple[Any, ...]) -> str:
    path = ROOT
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else f".{part}"
    return path


def _got(value: Any) -> str:
    """The offending value as the stack file spells it (null, true, NaN), shortened."""
    try:
        text = json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


# Pydantic messages that name Python classes or say nothing about the value given.
_SHAPE_MESSAGES = {
    "model_type": "must be an object (a mapping of keys, see the config reference in README.md)",
    "model_attributes_type": "must be an object (a mapping of keys, see the config reference in README.md)",
    "dict_type": "must be a mapping of keys to values",
    "tuple_type": "must be a list",
    "list_type": "must be a list",
    "bool_type": "must be true or false",
    "bool_parsing": "must be true or false",
    "string_type": "must be a string (quote it)",
    "int_type": "must be a whole number",
    "int_parsing": "must be a whole number",
    "int_from_float": "must be a whole number",
    "float_type": "must be a number",
    "float_parsing": "must be a number",
    "finite_number": "must be a finite number",
}


def _pydantic_problems(err: ValidationError) -> list[tuple[str, str]]:
    problems = []
    for e in err.errors():
        msg = e["msg"].removeprefix("Value error, ")
        if e["type"] == "extra_forbidden":
            msg = "unknown key; remove it or check its spelling against the config reference in README.md"
        elif e["type"] == "missing":
            msg = "required; add it to the stack file"
        elif e["type"] in _SHAPE_MESSAGES:
            msg = f"{_SHAPE_MESSAGES[e['type']]} (got {_got(e['input'])})"
        elif e["type"] == "literal_error" or e["type"].startswith(("greater_than", "less_than", "datetime")):
            msg = f"{msg} (got {_got(e['input'])})"
        problems.append((_loc_to_path(e["loc"]), msg))
    return problems


def _semantic_errors(cfg: ClusterConfig) -> list[tuple[str, str]]:
    problems: list[tuple[str, str]] = []
    cap, net, fsx = cfg.capacity, cfg.network, cfg.fsx
    p = lambda *parts: _loc_to_path(parts)  # noqa: E731

    if cfg.network.subnet_id and "vpc_cidr" in cfg.network.model_fields_set:
        problems.append(
            (p("network", "vpc_cidr"), "only used when a VPC is created; remove it or remove network.subnet_id")
        )

    blocks = cap.capacity_blocks
    names = [b.name for b in blocks]
    for i, b in enumerate(blocks):
        if names.index(b.name) != i:
            problems.append(
                (
                    p("capacity", "capacity_blocks", i, "name"),
                    f"duplicate block name '{b.name}'; give each block its own name",
                )
            )
        if [x.reservation_id for x in blocks].index(b.reservation_id) != i:
            problems.append(
                (
                    p("capacity", "capacity_blocks", i, "reservation_id"),
                    f"reservation {b.reservation_id} is listed twice; list each block once",
                )
            )
        if b.availability_zone != net.availability_zone:
            problems.append(
                (
                    p("capacity", "capacity_blocks", i, "availability_zone"),
                    f"block is in {b.availability_zone} but the cluster subnet is in {net.availability_zone}; EFA peers must share one subnet and AZ, so use blocks from one AZ and set network.availability_zone to it",
                )
            )
    if blocks:
        held = sum(b.instance_count for b in blocks)
        if cap.nodes > held:
            problems.append(
                (
                    p("capacity", "nodes"),
                    f"{cap.nodes} nodes requested but the capacity blocks hold {held}; lower capacity.nodes or add a block",
                )
            )
        if cap.placement_group:
            problems.append(
                (
                    p("capacity", "placement_group"),
                    "Capacity Blocks are already co-located and do not take a placement group; remove it",
                )
            )
        # Filling blocks in order must leave no block empty: an empty ASG in a
        # paid block is almost always a mistake in the stack file.
        # The first block also holds the controller, so a first block of one instance
        # with no worker left is fully used.
        for g in cfg.node_groups():
            if (
                g.role == "worker"
                and g.size == 0
                and g.block is not None
                and len(blocks) > 1
                and g.block.name != blocks[0].name
            ):
                idx = names.index(g.block.name)
                problems.append(
                    (
                        p("capacity", "capacity_blocks", idx),
                        f"block '{g.block.name}' gets no nodes; remove it or raise capacity.nodes",
                    )
                )

    dt = fsx.deployment_type
    cap_gib = fsx.storage_capacity_gib
    inc = _FSX_INCREMENT[dt]
    if cap_gib < 1200 or (cap_gib not in (1200, 2400) and cap_gib % inc != 0):
        problems.append(
            (
                p("fsx", "storage_capacity_gib"),
                f"{cap_gib} GiB is not allowed for {dt}; use 1200, 2400 or a multiple of {inc}",
            )
        )
    allowed = _FSX_THROUGHPUT.get(dt)
    tput = fsx.per_unit_storage_throughput
    tput_set = "per_unit_storage_throughput" in fsx.model_fields_set
    if allowed is None and tput is not None and tput_set:
        problems.append(
            (
                p("fsx", "per_unit_storage_throughput"),
                f"{dt} has no per-unit throughput (only PERSISTENT types take one); remove it",
            )
        )
    elif allowed is not None and tput is None:
        problems.append(
            (
                p("fsx", "per_unit_storage_throughput"),
                f"required for {dt} (null given); use one of {', '.join(map(str, allowed))} MB/s/TiB",
            )
        )
    elif allowed is not None and tput not in allowed:
        if tput_set:
            problems.append(
                (
                    p("fsx", "per_unit_storage_throughput"),
                    f"{tput} MB/s/TiB is not allowed for {dt}; use one of {', '.join(map(str, allowed))}",
                )
            )
        else:
            # The default only fails because of the deployment type the user chose.
            problems.append(
                (
                    p("fsx", "deployment_type"),
                    f"{dt} does not take the default per_unit_storage_throughput of {tput} MB/s/TiB; "
                    f"add fsx.per_unit_storage_throughput: one of {', '.join(map(str, allowed))}",
                )
            )
    if fsx.data_repository is not None and dt.startswith("SCRATCH_1"):
        problems.append(
            (
                p("fsx", "data_repository"),
                "SCRATCH_1 data repositories use import paths we do not manage; use PERSISTENT_2 or SCRATCH_2",
            )
        )

    for i, b in enumerate(blocks):
        if b.end is not None and (b.end.hour, b.end.minute, b.end.second) != (*BLOCK_END_UTC, 0):
            problems.append(
                (
                    p("capacity", "capacity_blocks", i, "end"),
                    f"{iso_utc(b.end)} is not a Capacity Block end; blocks end at 11:30 UTC: copy the end date EC2 shows for {b.reservation_id}",
                )
            )
        if b.start is not None and b.end is not None:
            if b.end <= b.start:
                problems.append(
                    (
                        p("capacity", "capacity_blocks", i, "end"),
                        f"{iso_utc(b.end)} is not after start {iso_utc(b.start)}; copy both dates EC2 shows for {b.reservation_id}",
                    )
                )
            elif (b.end - b.start).total_seconds() <= cap.block_end_margin_minutes * 60:
                problems.append(
                    (
                        p("capacity", "capacity_blocks", i, "end"),
                        f"the block is not longer than capacity.block_end_margin_minutes ({cap.block_end_margin_minutes}): its nodes would be stopped before they start",
                    )
                )
        elif (b.start is None) != (b.end is None):
            missing, given = ("start", "end") if b.start is None else ("end", "start")
            problems.append(
                (
                    p("capacity", "capacity_blocks", i, missing),
                    f"required with {given}; copy both dates EC2 shows for {b.reservation_id}",
                )
            )
    if not blocks and "block_end_margin_minutes" in cap.model_fields_set:
        problems.append((p("capacity", "block_end_margin_minutes"), "only used with Capacity Blocks; remove it"))

    if fsx.persistent:
        linked = fsx.data_repository is not None
        if linked and fsx.backup_retention_days > 0:
            # AWS takes no automatic, user or final backup of a linked file system
            # [FSX-CREATEBACKUP]: asking for them fails at AWS after FSx exists.
            default = "" if "backup_retention_days" in fsx.model_fields_set else " (the default)"
            problems.append(
                (
                    p("fsx", "backup_retention_days"),
                    f"{fsx.backup_retention_days} days{default} asks for backups, but FSx backs up no file system "
                    "linked to S3 (fsx.data_repository is set), so AWS would fail its backups, or the create or "
                    "delete that asks for them; the bucket is the durable copy: set backup_retention_days: 0 and allow_no_backups: true, "
                    "or remove data_repository to keep FSx backups",
                )
            )
        elif fsx.backup_retention_days == 0 and not fsx.allow_no_backups:
            problems.append(
                (
                    p("fsx", "backup_retention_days"),
                    "0 is right for a file system linked to S3 (FSx backs those up not at all; the bucket is the "
                    "durable copy): add fsx.allow_no_backups: true to accept that"
                    if linked
                    else "0 turns automatic backups off: a deleted or replaced file system cannot be restored; use 1-90, or add fsx.allow_no_backups: true to accept that",
                )
            )
        elif fsx.allow_no_backups and fsx.backup_retention_days > 0:
            problems.append(
                (
                    p("fsx", "allow_no_backups"),
                    f"backups are on ({fsx.backup_retention_days} days); remove allow_no_backups",
                )
            )
    else:
        for key in ("backup_retention_days", "allow_no_backups"):
            if key in fsx.model_fields_set:
                problems.append(
                    (
                        p("fsx", key),
                        f"{dt} file systems have no backups (FSx backs up PERSISTENT types only); remove it, or use PERSISTENT_2",
                    )
                )

    problems += _containers_errors(cfg.containers)

    if cfg.image.ami_id and cfg.image.allow_unpinned:
        problems.append(
            (p("image", "allow_unpinned"), "image.ami_id pins the image already; remove allow_unpinned or ami_id")
        )

    problems += _az_problems(cfg)
    problems += _gp3_problems(cfg)
    problems += _tag_problems(cfg)
    problems += _node_iam_problems(cfg)
    problems += _inline_policy_problems(cfg, problems)
    return problems


def _az_problems(cfg: ClusterConfig) -> list[tuple[str, str]]:
    """AZ names must name a zone of a region AWS has (whatever aws:region is)."""
    out = []
    azs: list[tuple[tuple[str | int, ...], str]] = [(("network", "availability_zone"), cfg.network.availability_zone)]
    azs += [
        (("capacity", "capacity_blocks", i, "availability_zone"), b.availability_zone)
        for i, b in enumerate(cfg.capacity.capacity_blocks)
        if b.availability_zone != cfg.network.availability_zone
    ]
    for parts, az in azs:
        region = aws_rules.az_region(az)
        if region is not None and region not in aws_rules.REGIONS:
            out.append(
                (
                    _loc_to_path(parts),
                    f"'{az}' is not a zone of any AWS region ('{region}' is not a region code); "
                    "use a zone of aws:region, e.g. 'us-east-2b'",
                )
            )
    return out


def _gp3_problems(cfg: ClusterConfig) -> list[tuple[str, str]]:
    rv = cfg.root_volume
    need = aws_rules.gp3_min_iops(rv.throughput_mibps)
    if rv.iops >= need:
        return []
    most = int(rv.iops * aws_rules.GP3_MIBPS_PER_IOPS)
    iops_note = "" if "iops" in rv.model_fields_set else " (the default)"
    # Name the key the user wrote: throughput unless only iops was set.
    key = "iops" if "throughput_mibps" not in rv.model_fields_set else "throughput_mibps"
    return [
        (
            _loc_to_path(("root_volume", key)),
            f"{rv.throughput_mibps} MiB/s of gp3 throughput needs at least {need} IOPS (gp3 allows "
            f"{aws_rules.GP3_MIBPS_PER_IOPS} MiB/s per provisioned IOPS) but root_volume.iops is "
            f"{rv.iops}{iops_note}; raise root_volume.iops to {need} or lower root_volume.throughput_mibps to {most}",
        )
    ]


def _tag_problems(cfg: ClusterConfig) -> list[tuple[str, str]]:
    out = []
    path = _loc_to_path(("tags",))
    for key, value in cfg.tags.items():
        problem = aws_rules.tag_key_problem(key)
        if problem is None and key in node_tags.NODE_IDENTITY + (node_tags.BLOCK_END,):
            problem = (
                f"tag key '{key}' is one the program sets on every node (the node reads it at boot, "
                "docs/node-contract.md); rename yours"
            )
        if problem is None and key == node_tags.DATA_REPOSITORY:
            problem = (
                f"tag key '{key}' is one the program sets on a file system linked to S3 (the policy pack "
                "exempts that file system from the final-backup check by it); rename yours"
            )
        if problem is None:
            problem = aws_rules.tag_value_problem(key, value)
        if problem:
            out.append((path, problem))
    counted = {k for k in cfg.tags if not k.lower().startswith("aws:")} | set(PROGRAM_TAG_KEYS)
    if len(counted) > aws_rules.MAX_TAGS_PER_RESOURCE:
        room = aws_rules.MAX_TAGS_PER_RESOURCE - len(PROGRAM_TAG_KEYS)
        out.append(
            (
                path,
                f"{len(cfg.tags)} tags plus the {len(PROGRAM_TAG_KEYS)} the program puts on every instance "
                f"({', '.join(PROGRAM_TAG_KEYS)}) make {len(counted)}; AWS allows "
                f"{aws_rules.MAX_TAGS_PER_RESOURCE} per resource [AWS-TAGS]: keep at most {room} tags here",
            )
        )
    return out


def _containers_errors(c: ContainersConfig) -> list[tuple[str, str]]:
    """Registry hosts and secret ids: shapes AWS and Enroot accept, nothing listed twice."""
    problems: list[tuple[str, str]] = []
    p = lambda *parts: _loc_to_path(("containers", *parts))  # noqa: E731
    if c.ecr is not True and c.ecr is not False:
        if not c.ecr:
            problems.append(
                (p("ecr"), "an empty list grants nothing; use true, a list of account ids or hosts, or remove it")
            )
        for i, entry in enumerate(c.ecr):
            if not (_ACCOUNT_ID.match(entry) or ECR_HOST.match(entry)):
                problems.append(
                    (
                        p("ecr", i),
                        f"'{entry}' is neither a 12-digit account id nor an ECR registry host; use e.g. '123456789012' or '123456789012.dkr.ecr.us-east-2.amazonaws.com' (quote account ids in YAML)",
                    )
                )
            elif list(c.ecr).index(entry) != i:
                problems.append((p("ecr", i), f"'{entry}' is listed twice; list each registry once"))
    # Enroot matches a login by host name, without the port [ENROOT-IMPORT].
    hosts = [r.registry.split(":")[0] for r in c.registry_credentials]
    for i, r in enumerate(c.registry_credentials):
        if ECR_HOST.match(r.registry) or ".dkr.ecr." in r.registry:
            problems.append(
                (
                    p("registry_credentials", i, "registry"),
                    f"'{r.registry}' is an ECR registry: nodes log in to it with ECR tokens; list it (or its account id) under containers.ecr instead",
                )
            )
        elif not _REGISTRY_HOST.match(r.registry):
            problems.append(
                (
                    p("registry_credentials", i, "registry"),
                    f"'{r.registry}' is not a registry host; use the host part of the image name in lowercase, e.g. 'nvcr.io' or 'registry.example.com:5000' (no scheme, no path)",
                )
            )
        elif hosts.index(hosts[i]) != i:
            problems.append(
                (
                    p("registry_credentials", i, "registry"),
                    f"'{hosts[i]}' has a login already; Enroot uses one login per host name (ports aside), so list each registry once",
                )
            )
        if r.kind == "ssm" and re.match(r"^/?(aws|ssm)", r.secret, re.IGNORECASE):
            problems.append(
                (
                    p("registry_credentials", i, "secret"),
                    f"'{r.secret}' starts with 'aws' or 'ssm', which SSM reserves; use your own path, e.g. '/gpu-cluster/ngc'",
                )
            )
        elif r.kind == "ssm" and (not _SSM_NAME.match(r.secret) or len(r.secret) > 1011 or r.secret.count("/") > 15):
            problems.append(
                (
                    p("registry_credentials", i, "secret"),
                    f"'{r.secret}' is not an SSM parameter name; use letters, digits, '.', '-', '_' and '/' for the path, e.g. '/gpu-cluster/ngc' (the name, not its ARN)",
                )
            )
        if r.kind == "stack":
            if not _STACK_SECRET.match(r.secret):
                problems.append(
                    (
                        p("registry_credentials", i, "secret"),
                        f"'{r.secret}' is not a stack secret name; use 1-40 lowercase letters, digits or '_', starting with a letter (the config key is gpu-cluster:{STACK_SECRET_PREFIX}<secret>)",
                    )
                )
            if r.login is None:
                problems.append(
                    (
                        p("registry_credentials", i, "login"),
                        "required with kind stack (the stack secret holds only the password); e.g. '$oauthtoken' for NGC",
                    )
                )
            elif not r.login or any(ch.isspace() for ch in r.login):
                problems.append(
                    (
                        p("registry_credentials", i, "login"),
                        f"{r.login!r} is empty or has a blank; Enroot's credentials file splits on blanks",
                    )
                )
            first = next(x for x in c.registry_credentials if x.kind == "stack" and x.secret == r.secret)
            if first.login != r.login and r.login is not None:
                problems.append(
                    (
                        p("registry_credentials", i, "login"),
                        f"stack secret '{r.secret}' is used with login {first.login!r} already; one stack secret stores one login (use another secret name)",
                    )
                )
        elif r.login is not None:
            problems.append(
                (
                    p("registry_credentials", i, "login"),
                    f'only used with kind stack; for kind {r.kind} the login is inside the secret (JSON {{"login": ..., "password": ...}}); remove it',
                )
            )
        if r.kind == "secretsmanager" and not (_SM_NAME.match(r.secret) or _SM_ARN.match(r.secret)):
            problems.append(
                (
                    p("registry_credentials", i, "secret"),
                    f"'{r.secret}' is neither a Secrets Manager secret name (letters, digits and /_+=.@-) nor a secret ARN (arn:aws:secretsmanager:<region>:<account>:secret:<name>-<6 characters>)",
                )
            )
    return problems


def _section(path: str) -> str:
    """Top-level key a problem path belongs to ('' for the root itself)."""
    return path.removeprefix(ROOT).lstrip(".").split(".")[0].split("[")[0]


# Valid stand-ins for sections that failed shape validation (or are missing).
_STAND_INS = {
    "name": "stand-in",
    "instance_type": SUPPORTED_INSTANCE_TYPES[0],
    "network": {"availability_zone": "us-east-1a"},
    "capacity": {"nodes": 2},
}


def _semantic_errors_beside(
    raw: dict, shape: list[tuple[str, str]], context: dict[str, Any] | None = None
) -> list[tuple[str, str]]:
    """Meaning errors of the sections that passed shape validation, so a typo in one
    section does not hide a wrong node count in another: every problem at once.

    Sections with shape errors are replaced by valid stand-ins, and only problems that
    depend on well-formed sections are kept (block AZs need a well-formed network).
    """
    bad = {_section(path) for path, _ in shape}
    stand_in = {}
    for key in ClusterConfig.model_fields:
        if key in raw and key not in bad:
            stand_in[key] = raw[key]
        elif key in _STAND_INS:
            stand_in[key] = _STAND_INS[key]
    try:
        cfg = ClusterConfig.model_validate(stand_in, context=context)
    except ValidationError:
        return []
    reported = {path for path, _ in shape}
    kept = []
    for path, message in _semantic_errors(cfg):
        section = _section(path)
        if section in bad or section not in raw or path in reported:
            continue
        if "network" in bad and path.endswith(".availability_zone"):
            continue
        kept.append((path, message))
    return kept


def _name_from_stack(problems: list[tuple[str, str]], stack: str) -> list[tuple[str, str]]:
    """A refused default name says where it came from: the user never wrote it."""
    name_path = _loc_to_path(("name",))
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
    out = []
    net_az = cfg.network.availability_zone
    azs: list[tuple[tuple[str | int, ...], str]] = [(("network", "availability_zone"), net_az)]
    azs += [
        (("capacity", "capacity_blocks", i, "availability_zone"), b.availability_zone)
        for i, b in enumerate(cfg.capacity.capacity_blocks)
        if b.availability_zone != net_az
    ]
    for parts, az in azs:
        az_region = aws_rules.az_region(az)
        if az_region is None or az_region == region or az_region not in aws_rules.REGIONS:
            continue  # malformed or unknown: reported by parse_config already
        out.append(
            (
                _loc_to_path(parts),
                f"{az} is a zone of {az_region}, but aws:region is {region}; use a zone of {region} "
                f"(e.g. {region}a) or set aws:region to {az_region}",
            )
        )
    return out


REGION_PATH = "aws:region"


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
        raise ConfigError([(ROOT, "missing or not an object; set it in Pulumi.<stack>.yaml (see README.md)")])
    from_stack = stack is not None and raw.get("name") is None
    if from_stack:
        raw = {**raw, "name": stack}
    region_only = [(REGION_PATH, m) for m in [aws_rules.region_problem(region)] if m] if region is not None else []
    context = {"base_dir": base_dir}
    try:
        cfg = ClusterConfig.model_validate(raw, context=context)
    except ValidationError as err:
        shape = _pydantic_problems(err)
        problems = shape + _semantic_errors_beside(raw, shape, context) + region_only
        if from_stack:
            problems = _name_from_stack(problems, str(stack))
        raise ConfigError(problems) from None
    problems = _semantic_errors(cfg)
    if region is not None:
        problems += region_problems(cfg, region)
    if problems:
        raise ConfigError(_name_from_stack(problems, str(stack)) if from_stack else problems)
    cfg._stack = stack
    return cfg


def config_warnings(cfg: ClusterConfig) -> list[tuple[str, str]]:
    """Settings AWS and the program accept but that are probably not what was meant.

    Printed (never fatal) wherever the config is loaded: `pulumi preview`/`up`
    (infra/stack.py, as Pulumi warnings) and the plan CLI.
    """
    out: list[tuple[str, str]] = []
    p = lambda *parts: _loc_to_path(parts)  # noqa: E731
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
    if cfg.fsx.persistent and cfg.fsx.protect is False:
        out.append(
            (
                p("fsx", "protect"),
                "false: a preview that deletes or replaces the file system no longer fails, and "
                "/fsx (Slurm state, checkpoints) would be lost with it",
            )
        )
    if cfg.image.allow_unpinned:
        out.append(
            (
                p("image", "allow_unpinned"),
                "nodes boot whatever AMI the SSM parameter names at each launch: a replaced node "
                "may get another kernel than its peers; pin image.ami_id (`python3 -m ops pin --image`)",
            )
        )
    out += node_iam_warnings(cfg)
    return out
