"""Stack configuration: one object under `gpu-cluster:cluster`, validated once, early.

Shape errors come from pydantic (frozen models, `extra="forbid"`); meaning errors
(cross-field rules: AZs, block sizes, FSx increments) come from `_semantic_errors`.
Every problem is reported at once as `path: message`, with the fix, before any
resource is declared. No pulumi import here: the renderer and the tests use it too.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from model.catalog import CATALOG, SUPPORTED_INSTANCE_TYPES

CONFIG_NAMESPACE = "gpu-cluster"
CONFIG_KEY = "cluster"
ROOT = f"{CONFIG_NAMESPACE}:{CONFIG_KEY}"

DLAMI_SSM_PARAMETER = (
    "/aws/service/deeplearning/ami/x86_64/"
    "base-oss-nvidia-driver-gpu-ubuntu-24.04/latest/ami-id"
)

# Capacity Blocks hold at most 64 instances each (FACTS 3.2, [CB-USE]).
MAX_INSTANCES_PER_BLOCK = 64

# FSx for Lustre storage increments, GiB (FACTS 4.1, [BOTO-FSX]).
_FSX_INCREMENT = {"SCRATCH_1": 3600, "SCRATCH_2": 2400, "PERSISTENT_1": 2400, "PERSISTENT_2": 2400}
# Per-unit storage throughput, MB/s/TiB, SSD storage (FACTS 4.1).
_FSX_THROUGHPUT = {"PERSISTENT_1": (50, 100, 200), "PERSISTENT_2": (125, 250, 500, 1000)}

# Cluster names end up in AWS names (ASG, launch template, IAM role: 64 chars with our
# suffixes), in Slurm's ClusterName (lowercase only) and in paths on /fsx.
_CLUSTER_NAME = re.compile(r"^[a-z][a-z0-9-]{0,22}[a-z0-9]$")
# Slurm partition and block names become Slurm identifiers and node features.
_SLURM_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,31}$")
_AZ = re.compile(r"^[a-z]{2}(-[a-z]+)+-\d[a-z]$")


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, str_strip_whitespace=True)


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
        if v is not None and not re.match(r"^subnet-[0-9a-f]{8,17}$", v):
            raise ValueError(f"'{v}' is not a subnet id; use the 'subnet-0123abcd...' id of an existing subnet, or omit it to create a VPC")
        return v

    @field_validator("vpc_cidr")
    @classmethod
    def _cidr(cls, v: str) -> str:
        m = re.match(r"^(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})/(\d{1,2})$", v)
        if not m or any(int(o) > 255 for o in m.groups()[:4]) or not 16 <= int(m.group(5)) <= 24:
            raise ValueError(f"'{v}' is not an IPv4 CIDR between /16 and /24; use e.g. '10.0.0.0/16'")
        return v


class CapacityBlock(Strict):
    name: str = Field(description="Short block name: node feature `block-<name>` and node group name.")
    reservation_id: str = Field(description="Capacity Block reservation id (cr-...).")
    instance_count: int = Field(gt=0, description="Instances the block holds.")
    availability_zone: str = Field(description="AZ of the block (must equal network.availability_zone).")

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not _SLURM_NAME.match(v):
            raise ValueError(f"'{v}' is not a valid block name; use letters, digits, '-' or '_', starting with a letter, at most 32 characters")
        return v

    @field_validator("reservation_id")
    @classmethod
    def _cr(cls, v: str) -> str:
        if not re.match(r"^cr-[0-9a-f]{8,17}$", v):
            raise ValueError(f"'{v}' is not a capacity reservation id; copy the 'cr-...' id of the purchased Capacity Block")
        return v

    @field_validator("instance_count")
    @classmethod
    def _count(cls, v: int) -> int:
        if v > MAX_INSTANCES_PER_BLOCK:
            raise ValueError(f"a Capacity Block holds at most {MAX_INSTANCES_PER_BLOCK} instances; split it into several blocks")
        return v


class CapacityConfig(Strict):
    nodes: int = Field(ge=2, le=4096, description="GPU nodes in the cluster (one of them is the controller).")
    capacity_blocks: tuple[CapacityBlock, ...] = Field((), description="Capacity Blocks to place nodes in; empty for on-demand.")
    placement_group: bool | None = Field(None, description="Cluster placement group; on-demand only (default true there).")


FsxDeployment = Literal["SCRATCH_1", "SCRATCH_2", "PERSISTENT_1", "PERSISTENT_2"]


class DataRepository(Strict):
    s3_uri: str = Field(description="s3://bucket[/prefix] linked to the file system.")
    file_system_path: str = Field("/data", description="Path inside /fsx the bucket appears at.")

    @field_validator("s3_uri")
    @classmethod
    def _s3(cls, v: str) -> str:
        if not re.match(r"^s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/[^\s]*)?$", v):
            raise ValueError(f"'{v}' is not an S3 URI; use 's3://bucket-name/prefix'")
        return v

    @field_validator("file_system_path")
    @classmethod
    def _path(cls, v: str) -> str:
        if not re.match(r"^/[A-Za-z0-9._/-]+$", v) or v == "/" or v.startswith("/.gpu-cluster"):
            raise ValueError(f"'{v}' is not a usable path; use an absolute path such as '/data' (not '/' or '/.gpu-cluster')")
        return v


class FsxConfig(Strict):
    deployment_type: FsxDeployment = Field("PERSISTENT_2", description="FSx for Lustre deployment type.")
    storage_capacity_gib: int = Field(1200, description="Storage capacity, GiB (1200, 2400, then type's increment).")
    per_unit_storage_throughput: int | None = Field(250, description="MB/s/TiB; PERSISTENT types only.")
    data_repository: DataRepository | None = Field(None, description="Optional S3 data repository.")


class ImageConfig(Strict):
    ami_id: str | None = Field(None, description="Explicit AMI id; overrides the SSM parameter.")
    ssm_parameter: str = Field(DLAMI_SSM_PARAMETER, description="Public SSM parameter holding the AMI id.")

    @field_validator("ami_id")
    @classmethod
    def _ami(cls, v: str | None) -> str | None:
        if v is not None and not re.match(r"^ami-[0-9a-f]{8,17}$", v):
            raise ValueError(f"'{v}' is not an AMI id; use 'ami-0123...' or omit it to use the DLAMI SSM parameter")
        return v

    @field_validator("ssm_parameter")
    @classmethod
    def _ssm(cls, v: str) -> str:
        if not v.startswith("/"):
            raise ValueError(f"'{v}' is not an SSM parameter path; it must start with '/'")
        return v


class RootVolumeConfig(Strict):
    size_gib: int = Field(512, ge=100, le=16384, description="gp3 root volume size, GiB (DLAMI needs >= 100).")
    iops: int = Field(3000, ge=3000, le=16000, description="gp3 IOPS.")
    throughput_mibps: int = Field(250, ge=125, le=1000, description="gp3 throughput, MiB/s.")


class SlurmConfig(Strict):
    partition: str = Field("train", description="Default Slurm partition name.")

    @field_validator("partition")
    @classmethod
    def _partition(cls, v: str) -> str:
        if not _SLURM_NAME.match(v) or v.upper() == "DEFAULT":
            raise ValueError(f"'{v}' is not a valid Slurm partition name; use letters, digits, '-' or '_' (not 'DEFAULT')")
        return v


class ValidationConfig(Strict):
    enabled: bool = Field(True, description="Submit the first-boot validation job on the controller.")
    container_image: str = Field("nvcr.io#nvidia/pytorch:26.08-py3", description="Training image for the in-container check ('' skips it).")
    time_limit_minutes: int = Field(60, ge=5, le=720, description="Slurm time limit of the validation job.")
    baseline_margin: float = Field(0.10, gt=0, lt=1, description="Drop vs baseline that turns a run NO-GO.")
    wait_for_nodes_minutes: int = Field(30, ge=1, le=240, description="How long the controller waits for nodes to be idle.")


_TAG_KEY = re.compile(r"^[\w .:/=+\-@]{1,128}$")


class ClusterConfig(Strict):
    name: str = Field(description="Cluster name: AWS resource names, Slurm ClusterName, /fsx paths.")
    instance_type: str = Field(description="GPU instance type from the catalog.")
    network: NetworkConfig = Field(description="Where the nodes live: one subnet in one AZ.")
    capacity: CapacityConfig = Field(description="How many nodes, and which Capacity Blocks hold them.")
    fsx: FsxConfig = Field(FsxConfig(), description="FSx for Lustre mounted at /fsx on every node.")
    image: ImageConfig = Field(ImageConfig(), description="Node image (one image for every node).")
    root_volume: RootVolumeConfig = Field(RootVolumeConfig(), description="Encrypted gp3 root volume.")
    slurm: SlurmConfig = Field(SlurmConfig(), description="Slurm settings.")
    validation: ValidationConfig = Field(ValidationConfig(), description="First-boot validation gate.")
    tags: dict[Annotated[str, Field(min_length=1)], str] = Field(default_factory=dict, description="Tags on every resource.")

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not _CLUSTER_NAME.match(v):
            raise ValueError(f"'{v}' is not a valid cluster name; use 2-24 lowercase letters, digits or '-', starting with a letter (AWS names and Slurm ClusterName)")
        return v

    @field_validator("instance_type")
    @classmethod
    def _type(cls, v: str) -> str:
        if v not in CATALOG:
            raise ValueError(f"'{v}' is not supported; use one of {', '.join(SUPPORTED_INSTANCE_TYPES)}")
        return v

    @field_validator("tags")
    @classmethod
    def _tags(cls, v: dict[str, str]) -> dict[str, str]:
        for key, value in v.items():
            if key.lower().startswith("aws:"):
                raise ValueError(f"tag key '{key}' uses the reserved 'aws:' prefix; rename it")
            if not _TAG_KEY.match(key):
                raise ValueError(f"tag key '{key}' has characters AWS rejects or is longer than 128; use letters, digits, spaces and _.:/=+-@")
            if len(value) > 256:
                raise ValueError(f"tag '{key}' value is longer than 256 characters; shorten it")
        return v

    # Derived values, computed once so components and renderers agree.
    @property
    def spec(self):
        return CATALOG[self.instance_type]

    @property
    def uses_capacity_blocks(self) -> bool:
        return bool(self.capacity.capacity_blocks)

    @property
    def uses_placement_group(self) -> bool:
        if self.uses_capacity_blocks:
            return False
        return self.capacity.placement_group is not False

    def node_groups(self) -> list["NodeGroup"]:
        """Nodes per group: the controller group (1 node) first, then workers per block.

        Blocks fill in the order given; the controller takes its node from the first
        block so every node shares one template and one image (seed 000 topology).
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


def _pydantic_problems(err: ValidationError) -> list[tuple[str, str]]:
    problems = []
    for e in err.errors():
        msg = e["msg"].removeprefix("Value error, ")
        if e["type"] == "extra_forbidden":
            msg = "unknown key; remove it or check its spelling against the config reference in README.md"
        elif e["type"] == "missing":
            msg = "required; add it to the stack file"
        elif e["type"] == "literal_error":
            msg = f"{msg} (got {e['input']!r})"
        problems.append((_loc_to_path(e["loc"]), msg))
    return problems


def _semantic_errors(cfg: ClusterConfig) -> list[tuple[str, str]]:
    problems: list[tuple[str, str]] = []
    cap, net, fsx = cfg.capacity, cfg.network, cfg.fsx
    p = lambda *parts: _loc_to_path(parts)  # noqa: E731

    if cfg.network.subnet_id and "vpc_cidr" in cfg.network.model_fields_set:
        problems.append((p("network", "vpc_cidr"), "only used when a VPC is created; remove it or remove network.subnet_id"))

    blocks = cap.capacity_blocks
    names = [b.name for b in blocks]
    for i, b in enumerate(blocks):
        if names.index(b.name) != i:
            problems.append((p("capacity", "capacity_blocks", i, "name"), f"duplicate block name '{b.name}'; give each block its own name"))
        if [x.reservation_id for x in blocks].index(b.reservation_id) != i:
            problems.append((p("capacity", "capacity_blocks", i, "reservation_id"), f"reservation {b.reservation_id} is listed twice; list each block once"))
        if b.availability_zone != net.availability_zone:
            problems.append((
                p("capacity", "capacity_blocks", i, "availability_zone"),
                f"block is in {b.availability_zone} but the cluster subnet is in {net.availability_zone}; EFA peers must share one subnet and AZ, so use blocks from one AZ and set network.availability_zone to it",
            ))
    if blocks:
        held = sum(b.instance_count for b in blocks)
        if cap.nodes > held:
            problems.append((p("capacity", "nodes"), f"{cap.nodes} nodes requested but the capacity blocks hold {held}; lower capacity.nodes or add a block"))
        if cap.placement_group:
            problems.append((p("capacity", "placement_group"), "Capacity Blocks are already co-located and do not take a placement group; remove it"))
        # Filling blocks in order must leave no block empty: an empty ASG in a
        # paid block is almost always a mistake in the stack file.
        # The first block also holds the controller, so a first block of one instance
        # with no worker left is fully used.
        for g in cfg.node_groups():
            if (g.role == "worker" and g.size == 0 and g.block is not None and len(blocks) > 1
                    and g.block.name != blocks[0].name):
                idx = names.index(g.block.name)
                problems.append((p("capacity", "capacity_blocks", idx), f"block '{g.block.name}' gets no nodes; remove it or raise capacity.nodes"))

    dt = fsx.deployment_type
    cap_gib = fsx.storage_capacity_gib
    inc = _FSX_INCREMENT[dt]
    if cap_gib < 1200 or (cap_gib not in (1200, 2400) and cap_gib % inc != 0):
        problems.append((p("fsx", "storage_capacity_gib"), f"{cap_gib} GiB is not allowed for {dt}; use 1200, 2400 or a multiple of {inc}"))
    allowed = _FSX_THROUGHPUT.get(dt)
    tput = fsx.per_unit_storage_throughput
    if allowed is None and tput is not None and "per_unit_storage_throughput" in fsx.model_fields_set:
        problems.append((p("fsx", "per_unit_storage_throughput"), f"{dt} has no per-unit throughput; remove it"))
    elif allowed is not None and tput not in allowed:
        problems.append((p("fsx", "per_unit_storage_throughput"), f"{tput} MB/s/TiB is not allowed for {dt}; use one of {', '.join(map(str, allowed))}"))
    if fsx.data_repository is not None and dt.startswith("SCRATCH_1"):
        problems.append((p("fsx", "data_repository"), "SCRATCH_1 data repositories use import paths we do not manage; use PERSISTENT_2 or SCRATCH_2"))

    if cfg.image.ami_id and "ssm_parameter" in cfg.image.model_fields_set:
        problems.append((p("image", "ssm_parameter"), "give either image.ami_id or image.ssm_parameter, not both"))
    return problems


def _section(path: str) -> str:
    """Top-level key a problem path belongs to ('' for the root itself)."""
    return path.removeprefix(ROOT).lstrip(".").split(".")[0].split("[")[0]


# Valid stand-ins for sections that failed shape validation (or are missing).
_STAND_INS = {"name": "stand-in", "instance_type": SUPPORTED_INSTANCE_TYPES[0],
              "network": {"availability_zone": "us-east-1a"}, "capacity": {"nodes": 2}}


def _semantic_errors_beside(raw: dict, shape: list[tuple[str, str]]) -> list[tuple[str, str]]:
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
        cfg = ClusterConfig.model_validate(stand_in)
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


def parse_config(raw: Any) -> ClusterConfig:
    """Validate the raw `gpu-cluster:cluster` object; raise ConfigError with every problem."""
    if not isinstance(raw, dict):
        raise ConfigError([(ROOT, "missing or not an object; set it in Pulumi.<stack>.yaml (see README.md)")])
    try:
        cfg = ClusterConfig.model_validate(raw)
    except ValidationError as err:
        shape = _pydantic_problems(err)
        raise ConfigError(shape + _semantic_errors_beside(raw, shape)) from None
    problems = _semantic_errors(cfg)
    if problems:
        raise ConfigError(problems)
    return cfg
