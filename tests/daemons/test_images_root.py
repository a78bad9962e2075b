"""Node root images built for real (root, chroot, mounts); the fast part is tests/localcluster/test_images.py."""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path

import pytest

from localcluster import images
from model import pins
from tests.support.localcluster_inputs import _fake_inputs

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (chroot, mounts)")


@pytest.fixture
def fake_cache(tmp_path, monkeypatch):
    base, m = _fake_inputs(tmp_path)
    monkeypatch.setattr(images, "CACHE_ROOT", tmp_path)
    monkeypatch.setattr(images, "build_base", lambda lane: base)
    monkeypatch.setattr(images.mirror_mod, "build_mirror", lambda: m)
    return tmp_path, base, m


@needs_root
def test_failed_build_names_stage_and_log_and_leaves_no_cache_entry(fake_cache):
    tmp_path, base, m = fake_cache
    files = {"/etc/gpu-cluster/cluster.env": b"CLUSTER_NAME=x\n"}
    key = images._root_key(images.LANES["bookworm"], base, m, images.lane_settings(images.LANES["bookworm"], m), files)
    log = tmp_path / "logs" / f"root-bookworm-{key}.log"
    # The fake base has no /usr/bin/env: the chroot in the packages stage fails.
    with pytest.raises(images.ImageBuildError) as err:
        images.build_root("bookworm", files)
    assert str(err.value).startswith("root bookworm: stage 'packages' failed: `chroot ")
    assert str(err.value).endswith(f"exited with 127 (log: {log})")
    assert list((tmp_path / "roots").iterdir()) == []
    assert "FAILED in stage packages" in log.read_text()
    assert not (base / "usr/sbin/policy-rc.d").exists()
    assert images._mounts_under(tmp_path) == []


@needs_root
def test_cached_root_is_returned_without_building(fake_cache):
    tmp_path, base, m = fake_cache
    files = {"/etc/gpu-cluster/cluster.env": b"CLUSTER_NAME=x\n"}
    key = images._root_key(images.LANES["bookworm"], base, m, images.lane_settings(images.LANES["bookworm"], m), files)
    cached = tmp_path / "roots" / f"bookworm-{key}"
    cached.mkdir(parents=True)
    assert images.build_root("bookworm", files) == cached
    assert not (tmp_path / "logs").exists()


def chroot(root: Path, *cmd: str) -> str:
    return subprocess.run(["chroot", str(root), *cmd], check=True, capture_output=True, text=True).stdout


def env_value(root: Path, name: str) -> str:
    for line in (root / "etc/gpu-cluster/cluster.env").read_text().splitlines():
        if line.startswith(name + "="):
            return line.split("=", 1)[1].strip("'")
    raise AssertionError(f"{name} not in cluster.env")


@pytest.mark.faithful
@needs_root
@pytest.mark.parametrize("lane,slurm", [("bookworm", "22.05."), ("trixie", "24.11.")])
def test_root_is_baked_by_the_shipped_packages_step(lane, slurm):
    payload = images.default_payload()
    root = images.build_root(lane, payload)
    versions = dict(
        line.split("\t")
        for line in chroot(
            root,
            "dpkg-query",
            "-W",
            "-f=${Package}\t${Version}\n",
            "slurmd",
            "slurmctld",
            "slurm-client",
            "munge",
            "libpmix-dev",
            "enroot",
            "enroot+caps",
        ).splitlines()
    )
    assert versions["slurmd"].startswith(slurm) and versions["slurmctld"].startswith(slurm)
    assert versions["enroot"] == versions["enroot+caps"] == "4.1.2-1"
    assert versions["munge"] and versions["libpmix-dev"]
    assert chroot(root, "enroot", "version").strip() == "4.1.2"
    assert chroot(root, "getcap", "/usr/bin/enroot-aufs2ovlfs").split()[1] == "cap_sys_admin,cap_mknod=ep"
    pyxis_so = root / env_value(root, "PYXIS_SO").lstrip("/")
    assert pyxis_so.stat().st_size > 0
    assert Path(f"{pyxis_so}.version").read_text() == "0.24.0\n"
    # Our plugstack.conf was written before apt installed its conffile owner, and survived.
    assert (root / "etc/slurm/plugstack.conf").read_bytes() == payload["/etc/slurm/plugstack.conf"]
    overrides = [ln.split("=", 1) for ln in (root / "etc/gpu-cluster/overrides.env").read_text().splitlines()]
    digests = dict(w.split("=") for w in dict(overrides)["DOWNLOAD_SHA256"].strip("'").split())
    assert overrides == [
        ["ENROOT_URL", "file:///mnt/gpu-cluster-mirror/enroot"],
        ["PYXIS_URL", "file:///mnt/gpu-cluster-mirror/pyxis"],
        ["ENROOT_VERSION", "4.1.2"],
        ["DOWNLOAD_SHA256", dict(overrides)["DOWNLOAD_SHA256"]],
        ["SLURM_SERIES", slurm[:-1]],
        ["GPU_CLUSTER_FSX", "bind"],
    ]
    # the packages the mirror built, by their own digests, and the vendored Pyxis tarball
    # unchanged, by its pin (model/pins.py)
    assert sorted(digests) == ["enroot+caps_4.1.2-1_amd64.deb", "enroot_4.1.2-1_amd64.deb", "v0.24.0.tar.gz"]
    assert all(re.fullmatch(r"[0-9a-f]{64}", d) for d in digests.values()), digests
    assert digests["v0.24.0.tar.gz"] == pins.vendor_pin("pyxis-0.24.0.tar.gz").sha256
    # The bake left no traces a booting machine would trip over.
    assert not (root / "usr/sbin/policy-rc.d").exists()
    assert not (root / "var/lib/gpu-cluster").exists()
    assert (root / "etc/machine-id").read_text() == ""
    assert (root / "etc/hostname").read_text() == "localhost\n"
    assert list((root / "mnt/gpu-cluster-mirror").iterdir()) == []
    # Warm: the same inputs return the cached root at once.
    start = time.monotonic()
    assert images.build_root(lane, payload) == root
    assert time.monotonic() - start < 15


@pytest.mark.faithful
@needs_root
def test_a_node_booted_from_the_root_only_verifies_packages(tmp_path):
    # As on a baked AMI: step 20 at boot finds everything at its pinned version and
    # installs nothing (no mirror mounted, so a download attempt would fail).
    root = images.build_root("bookworm")
    node = tmp_path / "node"
    subprocess.run(["cp", "-a", "--reflink=auto", str(root), str(node)], check=True)
    st = images._Stages("verify", tmp_path / "verify.log")
    try:
        images.in_root(st, node, tmp_path / "debs", None, [images.ENTRY_POINT, "--only", "packages"])
    finally:
        st.close()
    lines = [ln.split("] ", 1)[1] for ln in (tmp_path / "verify.log").read_text().splitlines() if "[20-packages]" in ln]
    assert lines == [
        "Slurm " + lines[0].split()[1] + " with PMIx plugin",
        "munge " + lines[1].split()[1],
        "Enroot 4.1.2",
        "Pyxis 0.24.0 at /usr/local/lib/slurm/spank_pyxis.so",
        "SKIPPED: Lustre client (GPU_CLUSTER_FSX=bind: /fsx is a bind mount, not Lustre)",
        lines[5],
    ]
    assert lines[0].split()[1].startswith("22.05.")
    # The baked root's packages stay held, and the drop-ins keep upgrades off them.
    held, needrestart, unattended = lines[5].split("; ")
    assert {"munge", "slurmd", "slurmctld", "slurm-client", "libpmix2"} <= set(held.split()[1:]), held
    assert held.startswith("held ")
    assert needrestart == "needrestart leaves munge/Slurm running"
    assert unattended == "unattended-upgrades skips kernel, Lustre, Slurm, munge"
