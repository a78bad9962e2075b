"""Node user data: the one renderer from stack config + instance spec to EC2 user data.

    render_userdata(cfg, spec, fsx) -> NodeFiles(user_data, files, s3_payload)

Pure (no pulumi import, no I/O beyond reading templates and nodeside/). The user data is the gzip
(mtime 0) of a MIME multipart with a fixed boundary:
  1. `text/cloud-config`: `write_files` for cluster.env and the fetcher (gz+b64, owner, mode);
  2. `text/x-shellscript`: fetches and checks the payload, then runs
     /opt/gpu-cluster/bin/gpu-cluster-boot, which runs the ordered steps
     (docs/node-contract.md).
Per-node identity (instance id, IPv4, role, node count) comes from instance metadata
at boot, so every node of a template gets the same bytes, whatever the node count.

EC2 takes at most 16384 bytes of user data before base64 [EC2-UD]. The node files
(boot scripts, Slurm files, the validation gate's stdlib Python) compress to about
52 KB, over three times that limit, so they always travel as `s3_payload` (sha256, deterministic
tar.gz): the program uploads it to `payload_uri`, and the user data, which carries only
cluster.env and the fetcher (about 3.3 KB), fetches it with the instance role, checks
the sha256 and unpacks it before booting.
"""

from __future__ import annotations

import base64
import functools
import gzip
import hashlib
import io
import shlex
import tarfile
from dataclasses import dataclass, field

import yaml

from model import pins
from model.catalog import InstanceSpec
from model.registries import RegistryAccess
from model.slurm import partition_lines
from userdata import layout, slurm_conf, templating
from userdata.accounting_files import AccountingEndpoint, accounting_env, accounting_files, accounting_settings
from userdata.cloudwatch_agent import agent_env, cloudwatch_files, logs_env
from userdata.registries import registry_env, registry_files
from userdata.validation_files import validation_files

# The boot tree (entry point, steps, helpers, units, static configs), shipped verbatim.
BOOT_DIRS = ("bin", "steps", "lib", "system", "conf")
EC2_USER_DATA_LIMIT = 16384  # bytes before base64 [EC2-UD]
BOUNDARY = "==gpu-cluster-7d1c0f5e=="  # fixed: byte-stable output
# What the user data itself carries; everything else travels in the S3 payload.
INLINE_FILES = (layout.CLUSTER_ENV, layout.FETCH)

# Pinned versions and download digests: the combination validated together on the DLAMI
# (2026-10), kept with their sources in model/pins.py.
SLURM_SERIES = pins.SLURM_SERIES
ENROOT_VERSION = pins.PRODUCT.enroot_version
PYXIS_VERSION = pins.PRODUCT.pyxis_version
ENROOT_URL = pins.ENROOT_URL
PYXIS_URL = pins.PYXIS_URL
# FSx for Lustre client repository for Ubuntu [FSX-CLIENT].
FSX_CLIENT_KEY_URL = "https://fsx-lustre-client-repo-public-keys.s3.amazonaws.com/fsx-ubuntu-public-key.asc"
FSX_CLIENT_REPO = "https://fsx-lustre-client-repo.s3.amazonaws.com/ubuntu"

# Bounded waits, seconds. Nodes of one cluster boot within minutes of each other, but
# a controller that lands late in a Capacity Block start can trail workers by more.
CONTROLLER_WAIT = 1800
MUNGE_JOIN_TIMEOUT = 1800
NVME_WAIT = 300
FSX_MOUNT_TRIES = 20
# The controller answers munge join requests within seconds; workers only step in for
# requests older than 90 s (the controller is gone), polling /fsx every 30 s.
MUNGE_CONTROLLER_INTERVAL = 2
MUNGE_WORKER_INTERVAL = 30
MUNGE_WORKER_MIN_AGE = 90
# The controller deletes dynamic nodes down and not responding for this long (a replaced
# node's old entry); a reboot takes far less.
NODE_REAP_GRACE = 1800

# nodeside/ file -> node path, for files outside the bin/, steps/, lib/ directories,
# which map one to one under /opt/gpu-cluster.
_PLACED = {
    "conf/enroot.conf": f"{layout.TEMPLATES}/enroot.conf",
    "conf/enroot-tmpfiles.conf": f"{layout.TEMPLATES}/enroot-tmpfiles.conf",
    "conf/needrestart.conf": f"{layout.TEMPLATES}/needrestart.conf",
    "conf/unattended-upgrades.conf": f"{layout.TEMPLATES}/unattended-upgrades.conf",
    "conf/aws-requirements.txt": layout.AWS_REQUIREMENTS,
    "system/limits-memlock.conf": layout.LIMITS_FILE,
    "system/gpu-cluster-munge-responder.service": f"{layout.SYSTEMD_DIR}/gpu-cluster-munge-responder.service",
    "system/per-boot.sh": layout.PER_BOOT_SCRIPT,
}


@dataclass(frozen=True)
class FsxEndpoint:
    dns_name: str
    mount_name: str


@dataclass(frozen=True)
class NodeFiles:
    user_data: bytes  # handed to EC2 before base64 (gzip of a MIME multipart)
    files: dict[str, bytes] = field(default_factory=dict)  # node path -> content
    s3_payload: tuple[str, bytes] = ("", b"")  # (sha256 hex, tar.gz) of every file not in INLINE_FILES


class UserDataTooLarge(ValueError):
    pass


def file_mode(path: str, content: bytes) -> int:
    """0755 for programs (entry point, steps, anything starting with #!), else 0644."""
    if path.startswith(layout.EXECUTABLE_DIRS) or content.startswith(b"#!"):
        return 0o755
    return 0o644


def cluster_env(
    cfg,
    spec: InstanceSpec,
    fsx: FsxEndpoint,
    registries: RegistryAccess | None = None,
    block_ends_uri: str = "",
    region: str = "",
    accounting: AccountingEndpoint | None = None,
) -> str:
    """/etc/gpu-cluster/cluster.env: every setting the steps read, shell-quoted.

    Nothing per node and nothing depending on the node count (that comes from the
    GpuClusterNodes tag at boot)."""
    values = (
        _base_env(cfg, spec, fsx) + _install_env(cfg, spec) + health_env(cfg, spec) + repair_env(cfg) + dcgm_env(cfg)
    )
    values += block_ends_env(block_ends_uri, region)
    values += hook_env(cfg) + controller_env(cfg) + accounting_env(cfg, accounting)
    values += topology_env(cfg) + logs_env(cfg)
    if registries is not None:
        values += registry_env()
    lines = [
        "# Generated by gpu-cluster (userdata/render.py); do not edit.",
        "# Cluster-wide settings for gpu-cluster-boot. Per-node identity comes from",
        "# instance metadata at boot; local overrides go to /etc/gpu-cluster/overrides.env.",
    ]
    lines += [f"{key}={shlex.quote(str(value))}" for key, value in values]
    return "\n".join(lines) + "\n"


def _base_env(cfg, spec: InstanceSpec, fsx: FsxEndpoint) -> list[tuple[str, object]]:
    """cluster.env: the cluster, FSx, Slurm, munge and boot retry settings."""
    return [
        ("CLUSTER_NAME", cfg.name),
        ("INSTANCE_TYPE", spec.name),
        ("GPUS", spec.gpus),
        ("VCPUS", spec.vcpus),
        ("CPUS_PER_GPU", spec.cpus_per_gpu),
        ("SLURM_PARTITION", cfg.slurm.partition),
        ("FSX_DNS_NAME", fsx.dns_name),
        ("FSX_MOUNT_NAME", fsx.mount_name),
        ("FSX_MOUNTPOINT", layout.FSX_MOUNTPOINT),
        ("FSX_ROOT", layout.fsx_root(cfg.name)),
        ("FSX_MOUNT_TRIES", FSX_MOUNT_TRIES),
        ("SLURM_SERIES", SLURM_SERIES),
        ("SLURM_CONF_TEMPLATE", layout.SLURM_CONF_TEMPLATE),
        ("SLURMD_DEFAULT_TEMPLATE", layout.SLURMD_DEFAULT_TEMPLATE),
        ("SLURM_MAX_NODES_FACTOR", slurm_conf.MAX_NODES_FACTOR),
        ("SLURM_MAX_NODES_SPARE", slurm_conf.MAX_NODES_SPARE),
        ("SLURM_NODE_HARDWARE", slurm_conf.node_hardware(spec)),
        ("CONTROLLER_WAIT", CONTROLLER_WAIT),
        ("MUNGE_KEY", layout.MUNGE_KEY),
        ("MUNGE_JOIN_TIMEOUT", MUNGE_JOIN_TIMEOUT),
        ("MUNGE_CONTROLLER_INTERVAL", MUNGE_CONTROLLER_INTERVAL),
        ("MUNGE_WORKER_INTERVAL", MUNGE_WORKER_INTERVAL),
        ("MUNGE_WORKER_MIN_AGE", MUNGE_WORKER_MIN_AGE),
        ("NODE_REAP_GRACE", NODE_REAP_GRACE),
        ("MUNGE_KEY_RECOVERY_WAIT", 180),  # > worker min age 90 + interval 30 (steps/40-munge.sh)
        ("BOOT_ATTEMPTS", 4),  # a failed step runs up to 4 times (bin/gpu-cluster-boot run_steps)
        ("BOOT_RETRY_DELAY", 30),  # s before the first retry, doubled each time: 30, 60, 120
        ("BLOCK_END_MARGIN_MINUTES", cfg.capacity.block_end_margin_minutes),
    ]


def _install_env(cfg, spec: InstanceSpec) -> list[tuple[str, object]]:
    """cluster.env: what the install steps fetch and where, and the validation job."""
    return [
        ("ENROOT_VERSION", ENROOT_VERSION),
        ("ENROOT_URL", ENROOT_URL),
        ("PYXIS_VERSION", PYXIS_VERSION),
        ("PYXIS_URL", PYXIS_URL),
        ("DOWNLOAD_SHA256", pins.PRODUCT.cluster_env()),
        ("DOWNLOAD_RECORD", layout.DOWNLOAD_RECORD),
        ("IMAGE_MANIFEST", layout.IMAGE_MANIFEST),
        ("NEEDRESTART_DROPIN", layout.NEEDRESTART_DROPIN),
        ("UNATTENDED_UPGRADES_DROPIN", layout.UNATTENDED_UPGRADES_DROPIN),
        ("GPU_CLUSTER_AWS_PYTHON", layout.AWS_PYTHON),
        ("AWS_VENV", layout.AWS_VENV),
        ("AWS_REQUIREMENTS", layout.AWS_REQUIREMENTS),
        ("PYXIS_SO", layout.PYXIS_PLUGIN),
        ("PYXIS_CONF_TEMPLATE", layout.PYXIS_CONF_TEMPLATE),
        *agent_env(),
        ("FSX_CLIENT_KEY_URL", FSX_CLIENT_KEY_URL),
        ("FSX_CLIENT_REPO", FSX_CLIENT_REPO),
        ("NVME_MOUNT", layout.NVME_MOUNT),
        ("NVME_WAIT", NVME_WAIT if spec.local_nvme_gb else 0),
        ("ENROOT_FALLBACK_BASE", layout.ENROOT_FALLBACK_BASE),
        ("LIMITS_FILE", layout.LIMITS_FILE),
        ("LOGIND_DROPIN", layout.LOGIND_DROPIN),
        ("VALIDATION_ENABLED", int(cfg.validation.enabled)),
        ("VALIDATION_JOB", layout.VALIDATION_JOB),
        ("VALIDATION_WAIT_MINUTES", cfg.validation.wait_for_nodes_minutes),
        ("VALIDATION_JOIN_TIMEOUT_MINUTES", cfg.validation.join_timeout_minutes),
    ]


# The controller reads the published block ends at most this often (s): an extension
# is bought days ahead of the old end, so minutes of delay cost nothing, and 12 small
# GETs an hour cost nothing either.
BLOCK_ENDS_INTERVAL = 300


# The controller's topology refresh (lib/topology.sh): a newcomer whose network nodes EC2
# does not report yet is asked about again after TOPOLOGY_RETRY s (for 15 minutes after a
# change); otherwise the whole topology is read again every TOPOLOGY_INTERVAL s, a few
# hundred DescribeInstanceTopology calls a day at most.
TOPOLOGY_RETRY = 60
TOPOLOGY_INTERVAL = 1800


def block_ends_env(uri: str, region: str) -> list[tuple[str, object]]:
    """cluster.env lines of the published block ends (model/block_ends.py), read by the
    controller's agent loop (lib/block-end.sh block_end_fetch); none without a URI
    (on-demand stacks have no blocks, and keep their bytes)."""
    if not uri:
        return []
    return [("BLOCK_ENDS_URI", uri), ("BLOCK_ENDS_REGION", region), ("BLOCK_ENDS_INTERVAL", BLOCK_ENDS_INTERVAL)]


def controller_env(cfg) -> list[tuple[str, object]]:
    """cluster.env: the controller is its own CPU instance (controller.placement
    dedicated): it runs slurmctld only, no slurmd, no job runtime (steps 50, 60, 80, 85).
    Only then, so a stack with the default placement gets the same bytes as before."""
    return [("CONTROLLER_DEDICATED", 1)] if cfg.controller.dedicated else []


def topology_env(cfg) -> list[tuple[str, object]]:
    """cluster.env: the topology plugin and the controller's refresh (lib/topology.sh);
    nothing with `slurm.topology: none`."""
    if cfg.slurm.topology == "none":
        return []
    return [
        ("TOPOLOGY_PLUGIN", cfg.slurm.topology),
        ("TOPOLOGY_CONF", f"{layout.SLURM_ETC}/topology.conf"),
        ("TOPOLOGY_TEMPLATE", layout.TOPOLOGY_CONF_TEMPLATE),
        ("TOPOLOGY_RETRY", TOPOLOGY_RETRY),
        ("TOPOLOGY_INTERVAL", TOPOLOGY_INTERVAL),
    ]


def hook_env(cfg) -> list[tuple[str, object]]:
    """cluster.env lines of step 99 (only when the stack sets hooks.on_node_ready, so a
    stack without a hook gets the same bytes as before hooks existed)."""
    hook = cfg.hooks.on_node_ready
    if hook is None:
        return []
    return [
        ("ON_NODE_READY_SCRIPT", layout.ON_NODE_READY),
        ("ON_NODE_READY_LOG", layout.ON_NODE_READY_LOG),
        ("ON_NODE_READY_STATUS", layout.ON_NODE_READY_STATUS),
        ("ON_NODE_READY_MARKERS", layout.hook_markers(cfg.name)),
        ("ON_NODE_READY_TIMEOUT", hook.timeout_minutes * 60),
        ("ON_NODE_READY_RUN_ON", hook.run_on),
    ]


def hook_files(cfg) -> dict[str, str]:
    """The stack's hook and the step that runs it; nothing without a hook."""
    hook = cfg.hooks.on_node_ready
    if hook is None:
        return {}
    return {layout.ON_NODE_READY: hook.text}


def switches_values(cfg) -> dict[str, object]:
    """The templates' `--switches=1@HH:MM:SS` (sbatch's wait time format), or none without
    a topology or a wait."""
    minutes = cfg.slurm.switches_wait_minutes
    if cfg.slurm.topology == "none" or minutes == 0:
        return {"switches": False, "switches_wait": ""}
    return {"switches": True, "switches_wait": f"{minutes // 60:02d}:{minutes % 60:02d}:00"}


def job_templates(cfg, spec: InstanceSpec) -> dict[str, str]:
    """Users' job templates, rendered for the instance type (step 90 copies them to /fsx/jobs)."""
    values = {
        "instance_type": spec.name,
        "partition": cfg.slurm.partition,
        "gpus": spec.gpus,
        "tasks_per_node": spec.gpus or 1,
        "cpus_per_task": spec.cpus_per_gpu,
        "job_dir": layout.FSX_JOBS,
        "run_launcher": layout.RUN_LAUNCHER,
        **switches_values(cfg),
    }
    out = {}
    for path in sorted((templating.TEMPLATE_ROOT / "jobs").glob("*.j2")):
        name = f"jobs/{path.name}"
        header = f"Generated by gpu-cluster from userdata/templates/{name}; copy and edit freely"
        out[f"{layout.TEMPLATES}/{name[:-3]}"] = templating.render(name, header=header, **values)
    return out


def boot_files() -> dict[str, str]:
    """The entry point, steps, helpers and static configs, verbatim from nodeside/
    (step 99 among them: node_files ships it only with a hook)."""
    out = {}
    root = templating.NODESIDE_ROOT
    for path in sorted(p for d in BOOT_DIRS for p in (root / d).rglob("*")):
        rel = path.relative_to(root).as_posix()
        if path.is_dir() or "__pycache__" in rel:
            continue
        if rel in _PLACED:
            dest = _PLACED[rel]
        elif rel.split("/", 1)[0] in ("bin", "steps", "lib"):
            dest = f"{layout.HOME}/{rel}"
        else:
            raise ValueError(f"nodeside/{rel} has no node path; add it to _PLACED")
        out[dest] = path.read_text(encoding="utf-8")
    return out


# Python shipped verbatim (their repository copy is what runs; tests import them as
# modules): the health program, the training launcher and the image manifest program
# (stdlib only), the controller agents' AWS client and repair agent (run with the node's
# boto3, GPU_CLUSTER_AWS_PYTHON), the controller's accounting programs (the secret
# read uses that client), the topology refresh (the node's boto3 too), and the deep DCGM
# runs on idle nodes (stdlib only).
_PROGRAMS = {
    "health.py": layout.HEALTH_PROGRAM,
    "run.py": layout.RUN_LAUNCHER,
    "bake.py": layout.BAKE_PROGRAM,
    "aws_client.py": layout.AWS_CLIENT,
    "repair.py": layout.REPAIR_PROGRAM,
    "slurmdbd_conf.py": layout.SLURMDBD_CONF_PROGRAM,
    "accounting_sync.py": layout.ACCOUNTING_SYNC,
    "dcgm_idle.py": layout.DCGM_IDLE_PROGRAM,
    "topology.py": layout.TOPOLOGY_PROGRAM,
    "cluster_metrics.py": layout.CLUSTER_METRICS_PROGRAM,
}


def program_files() -> dict[str, str]:
    return {dest: templating.verbatim(rel) for rel, dest in _PROGRAMS.items()}


def health_env(cfg, spec: InstanceSpec) -> list[tuple[str, object]]:
    """cluster.env: what the health program checks against (nodeside/health.py).

    The expected counts are here, not read from the catalog on the node, so the local
    lane can set what a check expects in overrides.env (e.g. a GPU count while Slurm's
    gres stays empty). HEALTH_XID_SOURCE: `kernel` (dmesg) or a file path."""
    health = cfg.health
    return [
        ("HEALTH_GPUS", spec.gpus),
        ("HEALTH_PCIE_GEN", spec.pcie_gen),
        ("HEALTH_PCIE_WIDTH", spec.pcie_width),
        ("HEALTH_EFA_COUNT", spec.efa_count),
        ("HEALTH_NVME_MOUNT", layout.NVME_MOUNT if spec.local_nvme_gb else ""),
        ("HEALTH_NVME_MIN_FREE_PERCENT", health.nvme_min_free_percent),
        ("HEALTH_CLOCK_MAX_OFFSET_MS", health.clock_max_offset_ms),
        ("HEALTH_CLOCK_REFERENCE", health.clock_reference),
        ("HEALTH_DCGM_LEVEL1", int(health.dcgm_level1)),
        ("HEALTH_XID_SOURCE", "kernel"),
        ("HEALTH_RECORDS", layout.health_records(cfg.name)),
        ("HEALTH_STATE", layout.HEALTH_STATE),
        ("HEALTH_BOOT_STATUS", layout.LOCAL_STATUS),
    ]


def repair_env(cfg) -> list[tuple[str, object]]:
    """cluster.env: the controller's repair agent (nodeside/repair.py, lib/repair.sh)."""
    repair = cfg.repair
    return [
        ("REPAIR_POLICY", repair.policy),
        ("REPAIR_MAX_PER_HOUR", repair.max_replacements_per_hour),
        ("REPAIR_MAX_OUT", repair.max_nodes_out),
        ("REPAIR_REPEAT_WINDOW_MINUTES", repair.repeat_window_minutes),
        ("REPAIR_RESET_GRACE_MINUTES", repair.reset_grace_minutes),
        ("REPAIR_JOB_GRACE_MINUTES", repair.job_grace_minutes),
        ("REPAIR_PROGRAM", layout.REPAIR_PROGRAM),
    ]


def dcgm_env(cfg) -> list[tuple[str, object]]:
    """cluster.env: the controller's deep DCGM runs on idle nodes (nodeside/dcgm_idle.py, lib/dcgm.sh);
    level 0 (off) also when the health program is off."""
    d = cfg.health.dcgm_idle
    return [
        ("DCGM_IDLE_LEVEL", d.level if cfg.health.enabled else 0),
        ("DCGM_IDLE_EVERY_HOURS", d.every_hours),
        ("DCGM_IDLE_MINUTES", d.idle_minutes),
        ("DCGM_IDLE_MAX_NODES", d.max_nodes),
        ("DCGM_IDLE_TIME_LIMIT_MINUTES", d.limit_minutes()),
        ("DCGM_IDLE_PROGRAM", layout.DCGM_IDLE_PROGRAM),
    ]


def validation_ctx(cfg, spec: InstanceSpec) -> dict:
    return {
        "cluster_name": cfg.name,
        "instance_type": spec.name,
        "gpus": spec.gpus,
        "vcpus": spec.vcpus,
        "cpus_per_gpu": spec.cpus_per_gpu,
        "efa_count": spec.efa_count,
        "efa_gbps": spec.efa_gbps,
        "partition": cfg.slurm.partition,
        "fsx_root": layout.fsx_root(cfg.name),
        "container_image": cfg.validation.container_image,
        "time_limit_minutes": cfg.validation.time_limit_minutes,
        "baseline_margin": cfg.validation.baseline_margin,
        "level_margin": cfg.validation.level_margin,
    }


def node_files(
    cfg,
    spec: InstanceSpec,
    fsx: FsxEndpoint,
    cgroup_plugin: str = "autodetect",
    registries: RegistryAccess | None = None,
    block_ends_uri: str = "",
    region: str = "",
    accounting: AccountingEndpoint | None = None,
) -> dict[str, bytes]:
    """Every file a node gets, keyed by absolute path, in sorted order.

    `registries` (model.registries.registry_access, None without `containers`) adds
    step 65 and its files (userdata/registries.py); `block_ends_uri` and `region`:
    see `block_ends_env`."""
    files: dict[str, str] = {}
    boot = boot_files()
    if cfg.hooks.on_node_ready is None:
        del boot[layout.ON_NODE_READY_STEP]
    sources = (
        boot,
        hook_files(cfg),
        job_templates(cfg, spec),
        slurm_conf.render_slurm_files(
            cfg.name,
            cfg.slurm.partition,
            spec,
            cgroup_plugin=cgroup_plugin,
            default_time_minutes=cfg.slurm.default_time_minutes,
            health=cfg.health,
            accounting=accounting_settings(cfg.accounting.priority) if cfg.accounting.enabled else None,
            custom=[(k, str(v)) for k, v in cfg.slurm.custom_settings.items()],
            more_partitions=partition_lines(cfg.slurm),
            topology=cfg.slurm.topology,
            switches_wait_minutes=cfg.slurm.switches_wait_minutes,
        ),
        accounting_files(cfg, accounting),
        cloudwatch_files(cfg),
        program_files(),
        validation_files(validation_ctx(cfg, spec)),
        {layout.CLUSTER_ENV: cluster_env(cfg, spec, fsx, registries, block_ends_uri, region, accounting)},
        registry_files(registries) if registries is not None else {},
    )
    for source in sources:
        for path, text in source.items():
            if path in files and files[path] != text:
                raise ValueError(f"{path} is rendered twice with different content")
            files[path] = text
    return {path: files[path].encode("utf-8") for path in sorted(files)}


# Level 9 over a whole payload is tens of milliseconds, and a process that runs the program
# more than once (the plan writer's moments, the tests) renders the same payload again
# and again; the output is a pure function of the bytes (mtime 0), so it is kept by them.
@functools.lru_cache(maxsize=64)
def _gzip(data: bytes) -> bytes:
    return gzip.compress(data, compresslevel=9, mtime=0)


def cloud_config(files: dict[str, bytes]) -> str:
    """`#cloud-config` with one write_files entry per file (gz+b64, owner, mode)."""
    entries = [
        {
            "path": path,
            "owner": "root:root",
            "permissions": f"0{file_mode(path, content):o}",
            "encoding": "gz+b64",
            "content": base64.b64encode(_gzip(content)).decode("ascii"),
        }
        for path, content in sorted(files.items())
    ]
    body = yaml.safe_dump({"write_files": entries}, sort_keys=False, width=1 << 30, default_flow_style=False)
    return (
        "#cloud-config\n# Generated by gpu-cluster (userdata/render.py): node files, see docs/node-contract.md\n" + body
    )


def boot_script(payload_uri: str, sha256: str) -> str:
    """The x-shellscript part: fetch and check the S3 payload, then run the entry point."""
    lines = [
        "#!/bin/bash",
        "# Generated by gpu-cluster (userdata/render.py): run the node bootstrap.",
        "set -euo pipefail",
        f"{layout.FETCH} {shlex.quote(payload_uri)} {sha256} /",
        f"exec {layout.ENTRY_POINT}",
    ]
    return "\n".join(lines) + "\n"


def mime(parts: list[tuple[str, str, str]]) -> bytes:
    """A MIME multipart with the fixed BOUNDARY; parts are (type, filename, text)."""
    out = [f'Content-Type: multipart/mixed; boundary="{BOUNDARY}"', "MIME-Version: 1.0", ""]
    for ctype, filename, text in parts:
        out += [
            f"--{BOUNDARY}",
            f'Content-Type: {ctype}; charset="us-ascii"',
            "MIME-Version: 1.0",
            "Content-Transfer-Encoding: 7bit",
            f'Content-Disposition: attachment; filename="{filename}"',
            "",
            text.rstrip("\n"),
        ]
    out += [f"--{BOUNDARY}--", ""]
    return "\n".join(out).encode("ascii")


def payload_tar(files: dict[str, bytes]) -> bytes:
    """Deterministic tar.gz of node files (root-owned, mtime 0, sorted, no directories)."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path, content in sorted(files.items()):
            info = tarfile.TarInfo(path.lstrip("/"))
            info.size, info.mode, info.mtime = len(content), file_mode(path, content), 0
            info.uid = info.gid = 0
            info.uname = info.gname = "root"
            tar.addfile(info, io.BytesIO(content))
    return _gzip(raw.getvalue())


def assemble(inline: dict[str, bytes], payload_uri: str, sha256: str) -> bytes:
    parts = [
        ("text/cloud-config", "cloud-config.yaml", cloud_config(inline)),
        ("text/x-shellscript", "gpu-cluster-boot.sh", boot_script(payload_uri, sha256)),
    ]
    return _gzip(mime(parts))


def render_userdata(
    cfg,
    spec: InstanceSpec,
    fsx: FsxEndpoint,
    payload_uri: str,
    *,
    cgroup_plugin: str = "autodetect",
    registries: RegistryAccess | None = None,
    block_ends_uri: str = "",
    region: str = "",
    accounting: AccountingEndpoint | None = None,
) -> NodeFiles:
    """User data for every node of `cfg` on `spec` (see module doc and docs/node-contract.md).

    payload_uri: `s3://bucket/key` (or `file:///path` for the local cluster) where the
    caller puts `s3_payload`; `{sha256}` in it becomes the payload's digest
    (content-addressed keys, so a launch template version never points at other bytes).
    cgroup_plugin: passed to the Slurm renderer (`cgroup/v1` for hosts with a v1
    hierarchy, e.g. the local cluster).
    registries: what the nodes log in to (`containers`, model/registries.py); None renders
    no registry files.
    block_ends_uri: where the program publishes the block ends (`s3://bucket/key`, or
    `file:///path` locally; model/block_ends.py), in the S3 bucket's `region`; "" (no
    Capacity Blocks): the nodes rely on their GpuClusterBlockEnd tags alone.
    accounting: the database slurmdbd uses (userdata/accounting_files.py); required
    with `accounting.enabled`.
    """
    files = node_files(
        cfg,
        spec,
        fsx,
        cgroup_plugin=cgroup_plugin,
        registries=registries,
        block_ends_uri=block_ends_uri,
        region=region,
        accounting=accounting,
    )
    inline = {path: files[path] for path in INLINE_FILES}
    tar = payload_tar({p: c for p, c in files.items() if p not in inline})
    sha = hashlib.sha256(tar).hexdigest()
    user_data = assemble(inline, payload_uri.replace("{sha256}", sha), sha)
    if len(user_data) > EC2_USER_DATA_LIMIT:
        raise UserDataTooLarge(
            f"the bootstrap user data is {len(user_data)} bytes, over EC2's "
            f"{EC2_USER_DATA_LIMIT}; keep cluster.env and the fetcher small"
        )
    return NodeFiles(user_data=user_data, files=files, s3_payload=(sha, tar))
