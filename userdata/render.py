"""Node user data: the one renderer from stack config + instance spec to EC2 user data.

    render_userdata(cfg, spec, fsx) -> NodeFiles(user_data, files, s3_payload)

Pure (no pulumi import, no I/O beyond reading templates). The user data is the gzip
(mtime 0) of a MIME multipart with a fixed boundary:
  1. `text/cloud-config`: `write_files` for every node file (gz+b64, owner, mode);
  2. `text/x-shellscript`: runs /opt/gpu-cluster/bin/gpu-cluster-boot, which runs the
     ordered steps (docs/node-contract.md).
Per-node identity (instance id, IPv4, role, node count) comes from instance metadata
at boot, so every node of a template gets the same bytes, whatever the node count.

EC2 takes at most 16384 bytes of user data before base64. When the inline rendering is
larger than `inline_budget`, every file except cluster.env moves into `s3_payload`
(sha256, deterministic tar.gz): the program uploads it to `payload_uri`, and the user
data fetches it with the instance role, checks the sha256 and unpacks it before booting.
In practice that is every real stack: the boot scripts, Slurm files and the validation
gate's stdlib Python compress to about 30 KB even as one gzip stream, twice the limit,
so only cluster.env and the fetcher (about 2 KB) stay inline.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import io
import shlex
import tarfile
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from model.catalog import InstanceSpec
from userdata import slurm_conf, templating
from userdata.validation_files import validation_files

TEMPLATE_DIR = Path(__file__).parent / "templates" / "boot"
EC2_USER_DATA_LIMIT = 16384  # bytes before base64 (EC2 user guide, FACTS 5)
INLINE_BUDGET = 12288  # above this the bulk goes to S3: 4 KiB spare under the EC2 limit
BOUNDARY = "==gpu-cluster-7d1c0f5e=="  # fixed: byte-stable output

HOME = "/opt/gpu-cluster"
ETC = "/etc/gpu-cluster"
ENTRY_POINT = f"{HOME}/bin/gpu-cluster-boot"
FETCH = f"{HOME}/bin/gpu-cluster-fetch"
CLUSTER_ENV = f"{ETC}/cluster.env"
FSX_MOUNTPOINT = "/fsx"
VALIDATION_JOB = f"{HOME}/validation/first-boot.sbatch"

# Pinned versions (seed 000 "Validated environment").
SLURM_SERIES = "23.11"
ENROOT_VERSION = "4.2.1"
PYXIS_VERSION = "0.24.0"
ENROOT_URL = "https://github.com/NVIDIA/enroot/releases/download"
PYXIS_URL = "https://github.com/NVIDIA/pyxis/archive/refs/tags"
# FSx for Lustre client repository for Ubuntu (FACTS 4.5).
FSX_CLIENT_KEY_URL = "https://fsx-lustre-client-repo-public-keys.s3.amazonaws.com/fsx-ubuntu-public-key.asc"
FSX_CLIENT_REPO = "https://fsx-lustre-client-repo.s3.amazonaws.com/ubuntu"

# Node-local NVMe on the DLAMI; the fallback is on the root volume (step 60 says so).
NVME_MOUNT = "/opt/dlami/nvme"
ENROOT_FALLBACK_BASE = "/var/lib/gpu-cluster-enroot"

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

LIMITS_FILE = "/etc/security/limits.d/90-gpu-cluster-memlock.conf"
LOGIND_DROPIN = "/etc/systemd/logind.conf.d/gpu-cluster.conf"

# Template file (relative to TEMPLATE_DIR) -> node path, for files outside the
# bin/, steps/, lib/ directories, which map one to one under /opt/gpu-cluster.
_PLACED = {
    "conf/enroot.conf": f"{HOME}/templates/enroot.conf",
    "conf/enroot-tmpfiles.conf": f"{HOME}/templates/enroot-tmpfiles.conf",
    "system/limits-memlock.conf": LIMITS_FILE,
    "system/gpu-cluster-munge-responder.service": "/etc/systemd/system/gpu-cluster-munge-responder.service",
    "system/per-boot.sh": "/var/lib/cloud/scripts/per-boot/gpu-cluster-boot.sh",
}
_EXECUTABLE_DIRS = (f"{HOME}/bin/", f"{HOME}/steps/")


@dataclass(frozen=True)
class FsxEndpoint:
    dns_name: str
    mount_name: str


@dataclass(frozen=True)
class NodeFiles:
    user_data: bytes  # handed to EC2 before base64 (gzip of a MIME multipart)
    files: dict[str, bytes] = field(default_factory=dict)  # node path -> content
    s3_payload: tuple[str, bytes] | None = None  # (sha256 hex, tar.gz) when it outgrew the budget


class UserDataTooLarge(ValueError):
    pass



def file_mode(path: str, content: bytes) -> int:
    """0755 for programs (entry point, steps, anything starting with #!), else 0644."""
    if path.startswith(_EXECUTABLE_DIRS) or content.startswith(b"#!"):
        return 0o755
    return 0o644


def cluster_env(cfg, spec: InstanceSpec, fsx: FsxEndpoint) -> str:
    """/etc/gpu-cluster/cluster.env: every setting the steps read, shell-quoted.

    Nothing per node and nothing depending on the node count (that comes from the
    GpuClusterNodes tag at boot)."""
    fsx_root = slurm_conf.FSX_ROOT_FMT.format(cluster=cfg.name)
    values: list[tuple[str, object]] = [
        ("CLUSTER_NAME", cfg.name),
        ("INSTANCE_TYPE", spec.name),
        ("GPUS", spec.gpus),
        ("VCPUS", spec.vcpus),
        ("CPUS_PER_GPU", spec.cpus_per_gpu),
        ("SLURM_PARTITION", cfg.slurm.partition),
        ("FSX_DNS_NAME", fsx.dns_name),
        ("FSX_MOUNT_NAME", fsx.mount_name),
        ("FSX_MOUNTPOINT", FSX_MOUNTPOINT),
        ("FSX_ROOT", fsx_root),
        ("FSX_MOUNT_TRIES", FSX_MOUNT_TRIES),
        ("SLURM_SERIES", SLURM_SERIES),
        ("SLURM_CONF_TEMPLATE", slurm_conf.SLURM_CONF_TEMPLATE_PATH),
        ("SLURMD_DEFAULT_TEMPLATE", slurm_conf.SLURMD_DEFAULT_TEMPLATE_PATH),
        ("SLURM_MAX_NODES_FACTOR", slurm_conf.MAX_NODES_FACTOR),
        ("SLURM_MAX_NODES_SPARE", slurm_conf.MAX_NODES_SPARE),
        ("CONTROLLER_WAIT", CONTROLLER_WAIT),
        ("MUNGE_KEY", "/etc/munge/munge.key"),
        ("MUNGE_JOIN_TIMEOUT", MUNGE_JOIN_TIMEOUT),
        ("MUNGE_CONTROLLER_INTERVAL", MUNGE_CONTROLLER_INTERVAL),
        ("MUNGE_WORKER_INTERVAL", MUNGE_WORKER_INTERVAL),
        ("MUNGE_WORKER_MIN_AGE", MUNGE_WORKER_MIN_AGE),
        ("NODE_REAP_GRACE", NODE_REAP_GRACE),
        ("ENROOT_VERSION", ENROOT_VERSION),
        ("ENROOT_URL", ENROOT_URL),
        ("PYXIS_VERSION", PYXIS_VERSION),
        ("PYXIS_URL", PYXIS_URL),
        ("PYXIS_SO", slurm_conf.PYXIS_PLUGIN_PATH),
        ("PYXIS_CONF_TEMPLATE", slurm_conf.PYXIS_CONF_TEMPLATE_PATH),
        ("FSX_CLIENT_KEY_URL", FSX_CLIENT_KEY_URL),
        ("FSX_CLIENT_REPO", FSX_CLIENT_REPO),
        ("NVME_MOUNT", NVME_MOUNT),
        ("NVME_WAIT", NVME_WAIT if spec.local_nvme_gb else 0),
        ("ENROOT_FALLBACK_BASE", ENROOT_FALLBACK_BASE),
        ("LIMITS_FILE", LIMITS_FILE),
        ("LOGIND_DROPIN", LOGIND_DROPIN),
        ("VALIDATION_ENABLED", int(cfg.validation.enabled)),
        ("VALIDATION_JOB", VALIDATION_JOB),
        ("VALIDATION_WAIT_MINUTES", cfg.validation.wait_for_nodes_minutes),
    ]
    lines = [
        "# Generated by gpu-cluster (userdata/render.py); do not edit.",
        "# Cluster-wide settings for gpu-cluster-boot. Per-node identity comes from",
        "# instance metadata at boot; local overrides go to /etc/gpu-cluster/overrides.env.",
    ]
    lines += [f"{key}={shlex.quote(str(value))}" for key, value in values]
    return "\n".join(lines) + "\n"


def job_templates(cfg, spec: InstanceSpec) -> dict[str, str]:
    """Users' job templates, rendered for the instance type (step 90 copies them to /fsx/jobs)."""
    tasks = spec.gpus or 1
    values = {
        "instance_type": spec.name,
        "partition": cfg.slurm.partition,
        "gpus": spec.gpus,
        "tasks_per_node": tasks,
        "cpus_per_task": max(1, spec.vcpus // tasks),
        "job_dir": f"{FSX_MOUNTPOINT}/jobs",
    }
    out = {}
    for path in sorted((TEMPLATE_DIR / "jobs").glob("*.j2")):
        name = f"jobs/{path.name}"
        header = f"Generated by gpu-cluster from userdata/templates/boot/{name}; copy and edit freely"
        out[f"{HOME}/templates/{name[:-3]}"] = templating.render(f"boot/{name}", header=header, **values)
    return out


def boot_files() -> dict[str, str]:
    """The entry point, steps, helpers and static configs, verbatim from templates/boot."""
    out = {}
    for path in sorted(TEMPLATE_DIR.rglob("*")):
        rel = path.relative_to(TEMPLATE_DIR).as_posix()
        if path.is_dir() or rel.endswith(".j2"):
            continue
        top = rel.split("/", 1)[0]
        if rel in _PLACED:
            dest = _PLACED[rel]
        elif top in ("bin", "steps", "lib"):
            dest = f"{HOME}/{rel}"
        else:
            raise ValueError(f"templates/boot/{rel} has no node path; add it to _PLACED")
        out[dest] = path.read_text(encoding="utf-8")
    return out


def validation_ctx(cfg, spec: InstanceSpec) -> dict:
    return {
        "cluster_name": cfg.name,
        "instance_type": spec.name,
        "gpus": spec.gpus,
        "vcpus": spec.vcpus,
        "efa_count": spec.efa_count,
        "efa_gbps": spec.efa_gbps,
        "partition": cfg.slurm.partition,
        "fsx_root": slurm_conf.FSX_ROOT_FMT.format(cluster=cfg.name),
        "container_image": cfg.validation.container_image,
        "time_limit_minutes": cfg.validation.time_limit_minutes,
        "baseline_margin": cfg.validation.baseline_margin,
    }


def node_files(cfg, spec: InstanceSpec, fsx: FsxEndpoint, cgroup_plugin: str = "autodetect") -> dict[str, bytes]:
    """Every file a node gets, keyed by absolute path, in sorted order."""
    files: dict[str, str] = {}
    sources = (
        boot_files(),
        job_templates(cfg, spec),
        slurm_conf.render_slurm_files(cfg.name, cfg.slurm.partition, spec, cgroup_plugin=cgroup_plugin),
        validation_files(validation_ctx(cfg, spec)),
        {CLUSTER_ENV: cluster_env(cfg, spec, fsx)},
    )
    for source in sources:
        for path, text in source.items():
            if path in files and files[path] != text:
                raise ValueError(f"{path} is rendered twice with different content")
            files[path] = text
    return {path: files[path].encode("utf-8") for path in sorted(files)}


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
    return "#cloud-config\n# Generated by gpu-cluster (userdata/render.py): node files, see docs/node-contract.md\n" + body


def boot_script(payload: tuple[str | None, str] | None) -> str:
    """The x-shellscript part: (fetch and check the S3 payload, then) run the entry point."""
    lines = [
        "#!/bin/bash",
        "# Generated by gpu-cluster (userdata/render.py): run the node bootstrap.",
        "set -euo pipefail",
    ]
    if payload:
        uri, sha = payload
        if uri is None:
            lines.append('echo "gpu-cluster: the node files are in an S3 payload, but the user data '
                         'was rendered without payload_uri" >&2; exit 1')
        else:
            lines.append(f"{FETCH} {shlex.quote(uri)} {sha} /")
    lines.append(f"exec {ENTRY_POINT}")
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


FETCH_SCRIPT = """#!/usr/bin/env bash
# Generated by gpu-cluster (userdata/render.py). Fetches the node files that did not fit
# in the 16 KB user data: `gpu-cluster-fetch URI SHA256 DEST`, URI s3://bucket/key (the
# instance role reads it with the aws CLI, in this instance's region so an S3 gateway
# endpoint serves it; 5 tries) or file:///path (local cluster). Refuses a payload whose
# sha256 differs; unpacks root-owned files into DEST. A failure is recorded in the
# node's local status (there is no entry point, and no /fsx, without the payload).
set -euo pipefail

# fail DEST REASON: say why, in the log and in DEST/var/lib/gpu-cluster/status.
fail() {
  local state="${1%/}/var/lib/gpu-cluster" reason
  reason=${2//\\\"/}
  reason=${reason//\\\\/}
  echo "gpu-cluster-fetch: $2" >&2
  mkdir -p "$state"
  printf '{"step":"payload","state":"failed","reason":"%s","marker":"local only (/fsx not mounted yet)"}\\n' "$reason" >"$state/status"
  exit 1
}

# region: AWS_REGION, else the instance's region from IMDSv2 (empty if unknown).
region() {
  local base=${AWS_EC2_METADATA_SERVICE_ENDPOINT:-http://169.254.169.254} token
  if [[ -n ${AWS_REGION:-} ]]; then echo "$AWS_REGION"; return 0; fi
  base=${base%/}
  if token=$(curl -sf -X PUT -H 'X-aws-ec2-metadata-token-ttl-seconds: 60' --max-time 5 "$base/latest/api/token"); then
    curl -sf -H "X-aws-ec2-metadata-token: $token" --max-time 5 "$base/latest/meta-data/placement/region" || true
  fi
}

fetch() {
  local where
  case $1 in
    s3://*)
      where=$(region)
      aws s3 cp --only-show-errors ${where:+--region "$where"} "$1" "$2"
      ;;
    file://*) cp "${1#file://}" "$2" ;;
    *) echo "gpu-cluster-fetch: unsupported payload URI '$1'" >&2; return 1 ;;
  esac
}

main() {
  local uri=$1 sha=$2 dest=$3 tmp try
  tmp=$(mktemp)
  for try in 1 2 3 4 5; do
    if fetch "$uri" "$tmp"; then break; fi
    if ((try == 5)); then fail "$dest" "cannot fetch $uri after 5 tries (instance role, S3 access)"; fi
    sleep 10
  done
  if [[ $(sha256sum "$tmp" | cut -d' ' -f1) != "$sha" ]]; then
    rm -f "$tmp"
    fail "$dest" "$uri does not have sha256 $sha; not unpacking"
  fi
  tar -xzf "$tmp" -C "$dest" --no-same-owner
  rm -f "$tmp"
  echo "gpu-cluster-fetch: unpacked $uri ($sha) into $dest"
}

main "$@"
"""


def assemble(files: dict[str, bytes], payload: tuple[str | None, str] | None = None) -> bytes:
    parts = [
        ("text/cloud-config", "cloud-config.yaml", cloud_config(files)),
        ("text/x-shellscript", "gpu-cluster-boot.sh", boot_script(payload)),
    ]
    return _gzip(mime(parts))


def render_userdata(cfg, spec: InstanceSpec, fsx: FsxEndpoint, payload_uri: str | None = None, *,
                    inline_budget: int = INLINE_BUDGET, cgroup_plugin: str = "autodetect") -> NodeFiles:
    """User data for every node of `cfg` on `spec` (see module doc and docs/node-contract.md).

    payload_uri: `s3://bucket/key` (or `file:///path` for the local cluster) the program
    puts `s3_payload` at, used only when the inline user data would exceed
    `inline_budget`; `{sha256}` in it becomes the payload's digest (content-addressed
    keys). Without it an overflowing render still returns `s3_payload`, and its user
    data stops at boot saying payload_uri is missing: callers must check s3_payload.
    cgroup_plugin: passed to the Slurm renderer (`cgroup/v1` for hosts with a v1
    hierarchy, e.g. the local cluster).
    """
    files = node_files(cfg, spec, fsx, cgroup_plugin=cgroup_plugin)
    user_data = assemble(files)
    if len(user_data) <= inline_budget:
        return NodeFiles(user_data=user_data, files=files)
    # The content outgrew the inline budget: cluster.env and the fetcher stay inline,
    # everything else travels as one checked tar.gz the program uploads to payload_uri.
    inline = {CLUSTER_ENV: files[CLUSTER_ENV], FETCH: FETCH_SCRIPT.encode()}
    tar = payload_tar({p: c for p, c in files.items() if p not in inline})
    sha = hashlib.sha256(tar).hexdigest()
    uri = payload_uri.replace("{sha256}", sha) if payload_uri is not None else None
    user_data = assemble(inline, (uri, sha))
    if len(user_data) > EC2_USER_DATA_LIMIT:
        raise UserDataTooLarge(f"even the S3 bootstrap user data is {len(user_data)} bytes")
    return NodeFiles(user_data=user_data, files={**files, FETCH: inline[FETCH]}, s3_payload=(sha, tar))
