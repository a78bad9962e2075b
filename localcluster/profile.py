"""The test instance profile and the user data a local node boots from.

The local cluster renders the user data of a small stack with the real renderer, but
hands it a TEST InstanceSpec measured from this host with `slurmd -C` and no GPUs or
EFA, so Slurm's node lines match what each namespace node really has. The stack
config itself keeps production values (p5.48xlarge, a Capacity-Block-free on-demand
layout) so the renderer takes its normal path.

The node files are then read back out of the ACTUAL user-data bytes (gunzip, MIME,
cloud-config `write_files`) - the same route cloud-init takes on EC2 - so a node only
runs what would have shipped.
"""

from __future__ import annotations

import base64
import email
import gzip
import io
import os
import re
import subprocess
import tarfile
from dataclasses import dataclass

import yaml

from localcluster import timesync
from model.catalog import InstanceSpec
from model.config import ClusterConfig, parse_config
from userdata import layout

PROFILE_NOTE = "test profile: no GPUs, CPUs/memory from this host"
AZ = "us-east-2b"
FSX_DNS = "fs-0local.fsx.us-east-2.amazonaws.com"
FSX_MOUNT = "local"


def slurmd_facts(text: str | None = None) -> dict[str, int]:
    """Parse the first line of `slurmd -C` (CPUs, sockets, cores, threads, RealMemory)."""
    if text is None:
        text = subprocess.run(["slurmd", "-C"], check=True, capture_output=True, text=True).stdout
    first = text.splitlines()[0]
    facts = dict(re.findall(r"(\w+)=(\S+)", first))
    return {k: int(facts[k]) for k in ("CPUs", "SocketsPerBoard", "CoresPerSocket", "ThreadsPerCore", "RealMemory")}


def test_instance_spec(facts: dict[str, int] | None = None) -> InstanceSpec:
    """An InstanceSpec shaped like this host, without GPUs or EFA.

    memory_mib is what `slurmd -C` measured; the spec's 95% rule then keeps
    RealMemory below it, as it does on EC2.
    """
    f = facts or slurmd_facts()
    return InstanceSpec(
        name="local.test",
        gpu_model="none",
        gpus=0,
        gpu_memory_mib=0,
        vcpus=f["CPUs"],
        sockets=f["SocketsPerBoard"],
        cores_per_socket=f["CoresPerSocket"],
        threads_per_core=f["ThreadsPerCore"],
        memory_mib=f["RealMemory"],
        network_cards=1,
        efa_count=0,
        efa_on_card0=False,
        local_nvme_gb=0,
        efa_gbps=0,
        sources={"all": "slurmd -C on this host"},
        unconfirmed=(),
    )


# The container job's image, under /fsx: built from the lane's root before the nodes
# boot, so the gate's container step runs it (a registry image cannot be imported
# offline) and the demo's srun uses the same file.
TEST_IMAGE = "images/test.sqsh"


PLACEMENTS = ("block", "dedicated")  # controller.placement (model/controller.py)


# The lanes' health program: every node runs it as on EC2, at the shortest interval the
# config allows (a fault drains its node within one interval), and measures its clock by
# SNTP against the metadata stand-in's reference (localcluster/timesync.py): a container's
# own timedatectl reports the host's clock as unsynchronised.
LANE_HEALTH = {"enabled": True, "interval_seconds": 30, "clock_reference": f"127.0.0.1:{timesync.PORT}"}
# The repair agent needs an Auto Scaling group to replace through: only a lane that runs
# the Auto Scaling stand-in (LocalCluster(autoscaling=True)) asks for another policy.
LANE_REPAIR = {"policy": "none"}


def local_config(
    name: str = "local",
    nodes: int = 2,
    *,
    placement: str = "block",
    team: dict | None = None,
    settings: dict | None = None,
) -> ClusterConfig:
    """A small on-demand stack with p5.48xlarge config values (the spec is swapped).

    `nodes` is capacity.nodes (at least 2), as in a stack file: with placement `block`
    the controller is one of them; with `dedicated` they are all workers and the
    controller is its own CPU instance besides them. `settings`: more stack config, by
    section (a section's keys are added to the lane's own, e.g. {"repair": {...}}).
    """
    if placement not in PLACEMENTS:
        raise ValueError(f"controller placement '{placement}': use one of {', '.join(PLACEMENTS)}")
    raw: dict = {
        "name": name,
        "instance_type": "p5.48xlarge",
        "network": {"availability_zone": AZ, "subnet_id": "subnet-0a1b2c3d4e5f60718"},
        "capacity": {"nodes": max(2, nodes)},
        "validation": {
            "wait_for_nodes_minutes": 5,
            # room for the container step's bound (userdata/validation_files.py TIMEOUTS)
            "time_limit_minutes": 15,
            "container_image": f"{layout.FSX_MOUNTPOINT}/{TEST_IMAGE}",
        },
        "health": dict(LANE_HEALTH),
        "repair": dict(LANE_REPAIR),
    }
    for section, values in (settings or {}).items():
        raw[section] = {**raw.get(section, {}), **values}
    if placement == "dedicated":  # only then, so the default stack renders the same bytes as before
        raw["controller"] = {"placement": "dedicated"}
    raw.update(team or {})
    return parse_config(raw)


@dataclass(frozen=True)
class ShippedFile:
    path: str
    content: bytes
    permissions: int
    owner: str


@dataclass(frozen=True)
class UserData:
    raw: bytes  # what EC2 gets (before base64)
    files: dict[str, ShippedFile]  # from cloud-config write_files
    runcmd: list  # cloud-config runcmd, as written
    scripts: list[bytes]  # text/x-shellscript parts, run in order after write_files
    rendered_files: dict[str, bytes]  # the renderer's own view (NodeFiles.files)
    payload: tuple[str, bytes] | None  # (sha256, tar.gz) when the files travel outside the user data


def _decode(entry: dict) -> bytes:
    content = entry.get("content", "")
    data = content.encode() if isinstance(content, str) else bytes(content)
    enc = (entry.get("encoding") or "text").lower()
    if enc in ("b64", "base64"):
        return base64.b64decode(data)
    if enc in ("gz+b64", "gzip+base64", "gz+base64", "gzip+b64"):
        return gzip.decompress(base64.b64decode(data))
    if enc in ("gz", "gzip"):
        return gzip.decompress(data)
    return data


def parse_user_data(raw: bytes) -> tuple[dict[str, ShippedFile], list, list[bytes]]:
    """Read user data as cloud-init does: optional gzip, MIME multipart or plain."""
    data = gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw
    parts: list[tuple[str, bytes]] = []
    if data.startswith(b"#cloud-config"):
        parts.append(("text/cloud-config", data))
    elif data.startswith(b"#!"):
        parts.append(("text/x-shellscript", data))
    else:
        msg = email.message_from_bytes(data)
        for part in msg.walk():
            if part.is_multipart():
                continue
            parts.append((part.get_content_type(), part.get_payload(decode=True) or b""))
    files: dict[str, ShippedFile] = {}
    runcmd: list = []
    scripts: list[bytes] = []
    for ctype, body in parts:
        if ctype == "text/cloud-config":
            doc = yaml.safe_load(body) or {}
            for entry in doc.get("write_files", []) or []:
                path = entry["path"]
                content = _decode(entry)
                if entry.get("append") and path in files:
                    content = files[path].content + content
                files[path] = ShippedFile(
                    path, content, int(str(entry.get("permissions", "0644")), 8), entry.get("owner", "root:root")
                )
            runcmd.extend(doc.get("runcmd", []) or [])
        elif ctype == "text/x-shellscript":
            scripts.append(body)
    return files, runcmd, scripts


def payload_files(tar_gz: bytes) -> dict[str, bytes]:
    """The files inside an S3 payload (what gpu-cluster-fetch unpacks into /)."""
    out = {}
    with tarfile.open(fileobj=io.BytesIO(tar_gz), mode="r:gz") as tar:
        for member in tar.getmembers():
            if member.isfile():
                out["/" + member.name.lstrip("./")] = tar.extractfile(member).read()
    return out


def cgroup_plugin() -> str:
    """Slurm's cgroup plugin for this host: a v1 hierarchy needs `cgroup/v1` [SLURM-CGROUP]."""
    return "autodetect" if os.path.exists("/sys/fs/cgroup/cgroup.controllers") else "cgroup/v1"


def render(
    name: str,
    nodes: int,
    payload_dir: str,
    spec: InstanceSpec | None = None,
    *,
    placement: str = "block",
    team: dict | None = None,
    db_host: str | None = None,
    settings: dict | None = None,
) -> UserData:
    """Render the stack's user data with the real renderer, then parse it back.

    When the files outgrow the inline budget the renderer moves them into a payload;
    EC2 nodes fetch it from S3, local nodes from `file://<payload_dir>/<sha256>.tar.gz`
    (the renderer's documented local form), through the same fetch script.
    """
    from userdata.accounting_files import AccountingEndpoint
    from userdata.render import FsxEndpoint, render_userdata

    cfg = local_config(name, nodes, placement=placement, team=team, settings=settings)
    # The lane's database (localcluster/team.py): the secret comes from the file swap.
    endpoint = AccountingEndpoint(db_host, 3306, "local-secret-file", "us-east-2") if db_host else None
    out = render_userdata(
        cfg,
        spec or test_instance_spec(),
        FsxEndpoint(dns_name=FSX_DNS, mount_name=FSX_MOUNT),
        payload_uri=f"file://{payload_dir}/{{sha256}}.tar.gz",
        cgroup_plugin=cgroup_plugin(),
        accounting=endpoint,
    )
    files, runcmd, scripts = parse_user_data(out.user_data)
    return UserData(out.user_data, files, runcmd, scripts, dict(out.files), out.s3_payload)


def parity_problems(ud: UserData) -> list[str]:
    """Where what ships (user data + payload) differs from what the renderer says it wrote."""
    shipped = {p: f.content for p, f in ud.files.items()}
    if ud.payload is not None:
        for path, content in payload_files(ud.payload[1]).items():
            shipped.setdefault(path, content)
    problems = []
    for path, content in sorted(ud.rendered_files.items()):
        if path not in shipped:
            problems.append(f"{path}: in NodeFiles.files but shipped neither in write_files nor in the payload")
        elif shipped[path] != content:
            problems.append(f"{path}: shipped content differs from NodeFiles.files")
    for path in sorted(set(shipped) - set(ud.rendered_files)):
        problems.append(f"{path}: shipped but not in NodeFiles.files")
    return problems
