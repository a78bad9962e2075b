"""A sandbox that runs gpu-cluster-boot and its shell helpers for real against fakes, and a fake IMDS."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

BOOT = Path(__file__).resolve().parents[2] / "nodeside"
ENTRY = BOOT / "bin" / "gpu-cluster-boot"
COMMON = BOOT / "lib" / "common.sh"
MUNGE_JOIN = BOOT / "lib" / "munge-join.sh"


needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (mount namespace, chown)")


class Sandbox:
    """A node file layout under tmp: home (bin, lib, steps), etc, state, run, log, fsx."""

    def __init__(self, root: Path):
        self.root = root
        self.home, self.etc = root / "opt", root / "etc"
        self.state, self.run_dir, self.log_dir = root / "state", root / "run", root / "log"
        self.fsx = root / "fsx"
        self.fsx_root = self.fsx / ".gpu-cluster" / "demo"
        for d in (self.home / "bin", self.home / "lib", self.home / "steps", self.etc, self.fsx_root / "status"):
            d.mkdir(parents=True, exist_ok=True)
        shutil.copy(ENTRY, self.home / "bin" / "gpu-cluster-boot")
        shutil.copy(COMMON, self.home / "lib" / "common.sh")
        (self.etc / "cluster.env").write_text(
            "CLUSTER_NAME=demo\n"
            f"FSX_MOUNTPOINT={self.fsx}\nFSX_ROOT={self.fsx_root}\n"
            "FROM_CLUSTER_ENV=cluster\nGPU_CLUSTER_PACKAGES=install\n"
        )
        (root / "trace").touch()

    def step(self, name: str, body: str) -> None:
        path = self.home / "steps" / f"{name}.sh"
        path.write_text(
            "#!/usr/bin/env bash\nset -euo pipefail\n"
            '. "$GPU_CLUSTER_HOME/lib/common.sh"\n'
            f'echo "{name}" >>"{self.root}/trace"\n{body}\n'
        )
        path.chmod(0o755)

    def env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("GPU_CLUSTER", "AWS_EC2"))}
        env.update(
            GPU_CLUSTER_HOME=str(self.home),
            GPU_CLUSTER_ETC=str(self.etc),
            GPU_CLUSTER_STATE=str(self.state),
            GPU_CLUSTER_RUN=str(self.run_dir),
            GPU_CLUSTER_LOG_DIR=str(self.log_dir),
        )
        env.update(extra)
        return env

    def boot(self, *args: str, mount_fsx: bool = False, **extra: str) -> subprocess.CompletedProcess:
        cmd = [str(self.home / "bin" / "gpu-cluster-boot"), *args]
        if mount_fsx:
            # /fsx is a mount point only inside this private mount namespace.
            inner = f'mount --bind "{self.fsx}" "{self.fsx}" && exec "$@"'
            cmd = ["unshare", "--mount", "--propagation", "private", "bash", "-c", inner, "boot", *cmd]
        return subprocess.run(cmd, env=self.env(**extra), capture_output=True, text=True, timeout=60)

    def trace(self) -> list[str]:
        return (self.root / "trace").read_text().split()

    def status(self) -> dict:
        return json.loads((self.state / "status").read_text())

    def marker(self, node: str) -> dict:
        return json.loads((self.fsx_root / "status" / f"{node}.json").read_text())


class _Imds(BaseHTTPRequestHandler):
    TOKEN = "tok-123"
    DATA = {"/latest/meta-data/instance-id": "i-0feed", "/latest/meta-data/tags/instance/GpuClusterRole": "worker"}
    seen: list[str] = []

    def log_message(self, *args):  # quiet
        pass

    def do_PUT(self):
        self.seen.append("PUT " + self.path)
        if self.path != "/latest/api/token" or not self.headers.get("X-aws-ec2-metadata-token-ttl-seconds"):
            self.send_response(400)
            self.end_headers()
            return
        self._reply(200, self.TOKEN)

    def do_GET(self):
        self.seen.append("GET " + self.path)
        if self.headers.get("X-aws-ec2-metadata-token") != self.TOKEN:
            self._reply(401, "")
        elif self.path in self.DATA:
            self._reply(200, self.DATA[self.path])
        else:
            self._reply(404, "")

    def _reply(self, code, body):
        data = body.encode()
        self.send_response(code)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


IDENTITY = {
    "/latest/meta-data/instance-id": "i-0123456789abcdef0",
    "/latest/meta-data/local-ipv4": "10.9.8.7",
    "/latest/meta-data/local-hostname": "ip-10-9-8-7.us-east-2.compute.internal",
    "/latest/meta-data/placement/availability-zone": "us-east-2b",
    "/latest/meta-data/tags/instance/GpuClusterName": "demo",
    "/latest/meta-data/tags/instance/GpuClusterRole": "controller",
    "/latest/meta-data/tags/instance/GpuClusterNodes": "4",
    "/latest/meta-data/tags/instance/GpuClusterBlock": "a",
}


def _identity_boot(box: Sandbox, imds: str) -> subprocess.CompletedProcess:
    shutil.copy(BOOT / "steps" / "10-identity.sh", box.home / "steps" / "10-identity.sh")
    hosts = box.root / "hosts"
    hosts.write_text("127.0.0.1 localhost\n127.0.1.1 ip-10-9-8-7\n::1 localhost ip6-localhost\n")
    inner = f'mount --bind "{hosts}" /etc/hosts && hostname old-name && exec "$@"'
    cmd = [
        "unshare",
        "--uts",
        "--mount",
        "--propagation",
        "private",
        "bash",
        "-c",
        inner,
        "x",
        str(box.home / "bin" / "gpu-cluster-boot"),
        "--only",
        "identity",
    ]
    return subprocess.run(
        cmd,
        env=box.env(
            AWS_EC2_METADATA_SERVICE_ENDPOINT=imds,
            GPU_CLUSTER_SERVICE_MANAGER="direct",
            IMDS_TRIES="2",
            IMDS_RETRY_SLEEP="0",
        ),
        capture_output=True,
        text=True,
        timeout=60,
    )


def _mode(p: Path) -> int:
    return stat.S_IMODE(p.stat().st_mode)


def _retry_settings(box: Sandbox, attempts: int, delay: int) -> None:
    with (box.etc / "cluster.env").open("a") as f:
        f.write(f"BOOT_ATTEMPTS={attempts}\nBOOT_RETRY_DELAY={delay}\n")
