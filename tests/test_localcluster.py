"""The local cluster: IMDSv2 stand-in and user-data parsing (fast), then real daemons.

The `localcluster` tests boot a real Slurm cluster from the rendered user data with
network-namespace nodes (root, Debian's slurm/munge), once per module, and inject the
four faults of issue 4: a destroyed worker replaced from the same user data, a
restarted controller, /fsx missing at boot, and a wrong munge key.
"""

from __future__ import annotations

import base64
import gzip
import json
import os
import re
import shutil
import threading
import time
import urllib.error
import urllib.request
from email.mime.multipart import MIMEMultipart
from email.mime.text import MIMEText
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml

from localcluster import imds, profile
from localcluster.cluster import OVERRIDES, boot_command, overrides_env

# ---------------------------------------------------------------------------------
# IMDSv2 stand-in
# ---------------------------------------------------------------------------------
IDENTITY = {"instance_id": "i-0123456789abcdef0", "local_ipv4": "10.77.0.11",
            "local_hostname": "ip-10-77-0-11.us-east-2.compute.internal",
            "availability_zone": "us-east-2b",
            "tags": {"GpuClusterName": "local", "GpuClusterRole": "controller",
                     "GpuClusterNodes": "2", "GpuClusterBlock": "on-demand"}}


@pytest.fixture(scope="module")
def imds_url():
    handler = type("H", (imds.Handler,), {"tree": imds.metadata_tree(IDENTITY), "tokens": {}, "log_path": None})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def _req(url, method="GET", headers=None):
    req = urllib.request.Request(url, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, ""


def _token(base, ttl="60"):
    code, token = _req(f"{base}/latest/api/token", "PUT", {"X-aws-ec2-metadata-token-ttl-seconds": ttl})
    assert code == 200
    return token


@pytest.mark.parametrize("path,value", [
    ("meta-data/instance-id", "i-0123456789abcdef0"),
    ("meta-data/local-ipv4", "10.77.0.11"),
    ("meta-data/local-hostname", "ip-10-77-0-11.us-east-2.compute.internal"),
    ("meta-data/placement/availability-zone", "us-east-2b"),
    ("meta-data/tags/instance/GpuClusterName", "local"),
    ("meta-data/tags/instance/GpuClusterRole", "controller"),
    ("meta-data/tags/instance/GpuClusterNodes", "2"),
    ("meta-data/tags/instance/GpuClusterBlock", "on-demand"),
    ("meta-data/tags/instance", "GpuClusterBlock\nGpuClusterName\nGpuClusterNodes\nGpuClusterRole"),
])
def test_imds_answers_contract_paths_with_a_token(imds_url, path, value):
    assert _req(f"{imds_url}/latest/{path}", headers={"X-aws-ec2-metadata-token": _token(imds_url)}) == (200, value)


@pytest.mark.parametrize("headers,code", [
    ({}, 401),                                                   # IMDSv1 style: refused
    ({"X-aws-ec2-metadata-token": "not-a-token"}, 401),
])
def test_imds_rejects_requests_without_a_valid_token(imds_url, headers, code):
    assert _req(f"{imds_url}/latest/meta-data/instance-id", headers=headers)[0] == code


@pytest.mark.parametrize("ttl,code", [(None, 400), ("0", 400), ("21601", 400), ("abc", 400), ("21600", 200)])
def test_imds_token_needs_a_ttl_header_in_range(imds_url, ttl, code):
    headers = {} if ttl is None else {"X-aws-ec2-metadata-token-ttl-seconds": ttl}
    assert _req(f"{imds_url}/latest/api/token", "PUT", headers)[0] == code


def test_imds_unknown_path_and_absent_tag_are_404(imds_url):
    h = {"X-aws-ec2-metadata-token": _token(imds_url)}
    assert _req(f"{imds_url}/latest/meta-data/tags/instance/Nope", headers=h)[0] == 404
    assert _req(f"{imds_url}/latest/meta-data/iam/info", headers=h)[0] == 404


# ---------------------------------------------------------------------------------
# user data, read back the way cloud-init reads it
# ---------------------------------------------------------------------------------
def _user_data(cloud_config: dict, script: bytes | None = None) -> bytes:
    msg = MIMEMultipart(boundary="==BOUNDARY==")
    msg.attach(MIMEText("#cloud-config\n" + yaml.safe_dump(cloud_config), "cloud-config"))
    if script is not None:
        msg.attach(MIMEText(script.decode(), "x-shellscript"))
    return gzip.compress(msg.as_bytes(), mtime=0)


def test_parse_user_data_decodes_every_write_files_encoding():
    raw = _user_data({
        "write_files": [
            {"path": "/a/text", "content": "plain\n"},
            {"path": "/a/b64", "encoding": "b64", "content": base64.b64encode(b"\x00bin").decode(),
             "permissions": "0755", "owner": "root:root"},
            {"path": "/a/gz", "encoding": "gz+b64",
             "content": base64.b64encode(gzip.compress(b"zipped", mtime=0)).decode(),
             "permissions": "0400", "owner": "munge:munge"},
        ],
        "runcmd": [["/opt/gpu-cluster/bin/gpu-cluster-boot"]],
    }, script=b"#!/bin/sh\necho hi\n")
    files, runcmd, scripts = profile.parse_user_data(raw)
    assert {p: (f.content, f.permissions, f.owner) for p, f in files.items()} == {
        "/a/text": (b"plain\n", 0o644, "root:root"),
        "/a/b64": (b"\x00bin", 0o755, "root:root"),
        "/a/gz": (b"zipped", 0o400, "munge:munge"),
    }
    assert runcmd == [["/opt/gpu-cluster/bin/gpu-cluster-boot"]]
    assert scripts == [b"#!/bin/sh\necho hi\n"]


@pytest.mark.parametrize("runcmd,expected", [
    ([["/opt/gpu-cluster/bin/gpu-cluster-boot"]], "set -e\n/opt/gpu-cluster/bin/gpu-cluster-boot"),
    (["/opt/gpu-cluster/bin/gpu-cluster-boot --once"], "set -e\n/opt/gpu-cluster/bin/gpu-cluster-boot --once"),
    ([], "/opt/gpu-cluster/bin/gpu-cluster-boot"),
])
def test_boot_command_follows_runcmd_or_the_contract_entry_point(runcmd, expected):
    assert boot_command(runcmd) == expected


def test_overrides_are_exactly_the_three_documented_swaps():
    assert overrides_env().decode().splitlines() == [
        "AWS_EC2_METADATA_SERVICE_ENDPOINT=http://127.0.0.1:1338",
        "GPU_CLUSTER_SERVICE_MANAGER=direct",
        "GPU_CLUSTER_PACKAGES=preinstalled",
    ]
    assert set(OVERRIDES) == {"AWS_EC2_METADATA_SERVICE_ENDPOINT", "GPU_CLUSTER_SERVICE_MANAGER",
                              "GPU_CLUSTER_PACKAGES"}


def test_test_profile_is_measured_from_slurmd_c_without_gpus():
    facts = profile.slurmd_facts("NodeName=vm CPUs=8 Boards=1 SocketsPerBoard=2 CoresPerSocket=2 "
                                 "ThreadsPerCore=2 RealMemory=32000\nUpTime=0-00:06:45\n")
    spec = profile.test_instance_spec(facts)
    assert (spec.vcpus, spec.sockets, spec.cores_per_socket, spec.threads_per_core) == (8, 2, 2, 2)
    assert (spec.gpus, spec.efa_count, spec.memory_mib) == (0, 0, 32000)
    assert spec.real_memory_mib < 32000
