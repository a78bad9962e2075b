"""gpu-cluster-boot's parts that need root (mount namespaces, chown); the rest is tests/nodeside/test_boot_entrypoint.py."""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.support.boot_sandbox import (
    BOOT,
    IDENTITY,
    Sandbox,
    _identity_boot,
    _Imds,
    _mode,
    needs_root,
)


@pytest.fixture
def box(tmp_path: Path) -> Sandbox:
    return Sandbox(tmp_path)


@pytest.fixture(scope="module")
def imds():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Imds)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()


@needs_root
def test_marker_on_fsx_with_identity(box):
    box.step(
        "10-identity",
        f"""cat >"{box.state}/identity.env" <<'E'
INSTANCE_ID='i-0abc'
NODE_NAME='ip-10-0-0-5'
NODE_ROLE='worker'
E""",
    )
    box.step("20-b", 'echo "reason with \\"quotes\\" and \\\\ backslash" >"$GC_REASON_FILE"; exit 1')
    r = box.boot(mount_fsx=True)
    assert r.returncode == 1
    m = box.marker("ip-10-0-0-5")
    assert set(m) >= {"node", "instance_id", "role", "step", "state", "reason", "log"}
    assert (m["node"], m["instance_id"], m["role"]) == ("ip-10-0-0-5", "i-0abc", "worker")
    assert (m["step"], m["state"]) == ("20-b", "failed")
    assert m["reason"].startswith('reason with "quotes" and \\ backslash')
    assert m == box.status()


@needs_root
def test_rerun_converges_and_only_from(box):
    # A step that converges: creates its file once, is a no-op later.
    box.step("10-a", f'[ -e "{box.root}/made" ] || echo once >>"{box.root}/made"')
    box.step("20-b", "true")
    box.step("30-c", "true")
    assert box.boot(mount_fsx=True).returncode == 0
    assert box.boot(mount_fsx=True).returncode == 0
    assert (box.root / "made").read_text() == "once\n"
    assert box.trace() == ["10-a", "20-b", "30-c"] * 2
    (box.root / "trace").write_text("")
    assert box.boot("--only", "b").returncode == 0
    assert box.boot("--only", "30").returncode == 0
    assert box.boot("--from", "20-b").returncode == 0
    assert box.trace() == ["20-b", "30-c", "20-b", "30-c"]
    assert box.status()["step"] == "30-c"
    r = box.boot("--only", "nope")
    assert r.returncode == 2 and "no step matches 'nope'" in r.stderr
    assert box.boot("--list").stdout.split() == ["10-a.sh", "20-b.sh", "30-c.sh"]


@needs_root
def test_identity_pins_ipv4_and_writes_identity(box, imds, monkeypatch):
    monkeypatch.setattr(_Imds, "DATA", IDENTITY)
    r = _identity_boot(box, imds)
    assert r.returncode == 0, r.stdout + r.stderr
    hosts = (box.root / "hosts").read_text().splitlines()
    # Debian's 127.0.1.1 line is gone, ours is last; the rest is kept.
    assert hosts == [
        "127.0.0.1 localhost",
        "::1 localhost ip6-localhost",
        "10.9.8.7 ip-10-9-8-7.us-east-2.compute.internal ip-10-9-8-7",
    ]
    env = (box.state / "identity.env").read_text()
    for line in (
        "INSTANCE_ID='i-0123456789abcdef0'",
        "NODE_ADDR='10.9.8.7'",
        "NODE_NAME='ip-10-9-8-7'",
        "NODE_ROLE='controller'",
        "NODE_BLOCK='a'",
        "GPU_CLUSTER_NODES='4'",
    ):
        assert line in env.splitlines()
    assert box.status()["instance_id"] == "i-0123456789abcdef0" and box.status()["role"] == "controller"
    # Rerun: nothing to change, same file.
    before = (box.root / "hosts").read_text()
    assert _identity_boot(box, imds).returncode == 0
    assert (box.root / "hosts").read_text() == before


@needs_root
@pytest.mark.parametrize(
    "key,value,reason",
    [
        ("GpuClusterName", "other", "GpuClusterName tag is 'other' but this user data belongs to cluster 'demo'"),
        ("GpuClusterRole", "boss", "GpuClusterRole tag is 'boss'; expected controller, worker or login"),
        ("GpuClusterNodes", None, "instance tag GpuClusterNodes is not visible in instance metadata"),
    ],
)
def test_identity_rejects_bad_tags(box, imds, monkeypatch, key, value, reason):
    data = dict(IDENTITY)
    if value is None:
        del data[f"/latest/meta-data/tags/instance/{key}"]
    else:
        data[f"/latest/meta-data/tags/instance/{key}"] = value
    monkeypatch.setattr(_Imds, "DATA", data)
    r = _identity_boot(box, imds)
    assert r.returncode == 1
    assert box.status()["reason"].startswith(reason), box.status()["reason"]


@needs_root
def test_fsx_step_on_a_mounted_fsx_creates_private_layout(box):
    shutil.copy(BOOT / "steps" / "30-fsx.sh", box.home / "steps" / "30-fsx.sh")
    shutil.rmtree(box.fsx / ".gpu-cluster")
    with (box.etc / "cluster.env").open("a") as f:
        f.write("FSX_DNS_NAME=fs-1.fsx.example\nFSX_MOUNT_NAME=abc\nFSX_MOUNT_TRIES=1\n")
    r = box.boot("--only", "fsx", mount_fsx=True, GPU_CLUSTER_PACKAGES="preinstalled")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "creating" in r.stdout
    assert _mode(box.fsx_root) == 0o700 and _mode(box.fsx / "jobs") == 0o755
    for d in ("munge", "munge/requests", "munge/responses", "slurmctld", "status", "validation"):
        assert _mode(box.fsx_root / d) == 0o700, d
    # the status marker landed on /fsx once the directory existed
    assert json.loads((box.fsx_root / "status" / f"{box.status()['node']}.json").read_text())["state"] == "ok"
    r = box.boot("--only", "fsx", mount_fsx=True, GPU_CLUSTER_PACKAGES="preinstalled")
    assert r.returncode == 0 and "nothing to mount" in r.stdout


@needs_root
def test_fsx_step_without_mount_or_lustre_fails_fast(box):
    shutil.copy(BOOT / "steps" / "30-fsx.sh", box.home / "steps" / "30-fsx.sh")
    modinfo = shutil.which("modinfo", path="/usr/sbin:/sbin:/usr/bin:/bin")
    if modinfo and subprocess.run([modinfo, "lustre"], capture_output=True).returncode == 0:
        pytest.skip("this host has a Lustre client")
    r = box.boot("--only", "fsx", GPU_CLUSTER_PACKAGES="preinstalled")
    assert r.returncode == 1
    st = box.status()
    assert (st["step"], st["state"]) == ("30-fsx", "failed")
    assert st["reason"].startswith(f"{box.fsx} is not a mount point and there is no Lustre client")
    assert st["marker"] == "local only (/fsx not mounted yet)"
