"""Node root images built for real (root, chroot, mounts); the fast part is tests/localcluster/test_images.py."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import subprocess
import time
from pathlib import Path

import pytest

from localcluster import images, mirror
from model import pins
from nodeside import bake
from tests.support.localcluster_inputs import _fake_inputs
from userdata import layout

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
@pytest.mark.parametrize("lane,slurm", [("bookworm", "22.05."), ("trixie", "24.11."), ("slurm2311", "23.11.")])
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
        ["AWS_WHEELS", "/mnt/gpu-cluster-mirror/pypi"],
        ["SLURM_SERIES", slurm[:-1]],
        ["GPU_CLUSTER_FSX", "bind"],
        # one shell word: the nodes source the file (the reason has spaces and a quote)
        ["CLOUDWATCH_SKIP", shlex.quote(mirror.CLOUDWATCH_SKIP)],
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


@contextlib.contextmanager
def overlay(root: Path, tmp: Path):
    """A writable overlay of a cached root (the cache entry stays read-only)."""
    upper, work, merged = tmp / "upper", tmp / "work", tmp / "merged"
    for d in (upper, work, merged):
        d.mkdir()
    subprocess.run(
        ["mount", "-t", "overlay", "overlay", "-o", f"lowerdir={root},upperdir={upper},workdir={work}", str(merged)],
        check=True,
    )
    try:
        yield merged
    finally:
        subprocess.run(["umount", str(merged)], check=True)


def boot_step_20(node: Path, tmp_path: Path) -> tuple[bool, list[str]]:
    st = images._Stages("verify", tmp_path / "verify.log")
    ok = True
    try:
        images.in_root(st, node, tmp_path / "debs", None, [layout.ENTRY_POINT, "--only", "packages"])
    except images.ImageBuildError:
        ok = False
    finally:
        st.close()
    text = (tmp_path / "verify.log").read_text().splitlines()
    return ok, [ln.split("] ", 1)[1] for ln in text if "[20-packages]" in ln]


@pytest.mark.faithful
@needs_root
def test_the_lane_root_is_baked_with_a_manifest_and_the_tags_an_ami_gets(tmp_path):
    root = images.build_root("bookworm")
    manifest, digest = bake.read_manifest(str(root))  # checks manifest.json.sha256
    assert manifest["pins"]["SLURM_SERIES"] == "22.05" and manifest["pins"]["ENROOT_VERSION"] == "4.1.2"
    assert manifest["kernel"] is None and manifest["versions"]["kernel"] == "none"
    assert manifest["lustre"] == {
        "skipped": "GPU_CLUSTER_FSX=bind: /fsx is a bind mount, not Lustre (docs/node-contract.md)"
    }
    assert {"munge", "slurmd", "slurmctld", "slurm-client", "libpmix2"} <= set(manifest["held"])
    assert manifest["versions"]["enroot"] == "4.1.2" and manifest["versions"]["slurm"].startswith("22.05.")
    lane = json.loads((root / images.LANE_RECORD.lstrip("/")).read_text())
    assert lane["image_manifest_sha256"] == digest
    assert lane["image_tags"] == bake.image_tags(manifest, digest)
    assert lane["image_tags"]["GpuClusterImageManifest"] == digest
    assert bake.pin_problems(bake.recorded_from_tags(lane["image_tags"]), manifest["pins"]) == []


@pytest.mark.faithful
@needs_root
def test_a_node_booted_from_the_root_verifies_the_manifest_and_downloads_nothing(tmp_path):
    # As on a baked AMI: step 20 at boot compares what is installed with the manifest and
    # installs nothing (no mirror mounted, no apt run); a package changed since fails it.
    root = images.build_root("bookworm")
    _, digest = bake.read_manifest(str(root))
    with overlay(root, tmp_path) as node:
        ok, lines = boot_step_20(node, tmp_path)
        assert ok, lines
        assert lines == [
            "SKIPPED: Lustre client: GPU_CLUSTER_FSX=bind: /fsx is a bind mount, not Lustre (docs/node-contract.md)",
            f"baked image: manifest sha256 {digest}; Slurm, munge, PMIx, Enroot 4.1.2, Pyxis 0.24.0, kernel none, "
            "boto3, holds and drop-ins as baked; nothing downloaded",
        ]
        assert (node / "var/lib/gpu-cluster/image.env").read_text().startswith(f"NODE_IMAGE_MANIFEST={digest}\n")
        chroot(node, "apt-mark", "unhold", "munge")
        (tmp_path / "verify.log").unlink()
        ok, lines = boot_step_20(node, tmp_path)
        assert not ok
        assert lines[-1] == (
            f"ERROR: baked image ({layout.IMAGE_MANIFEST}): munge is no longer held (apt-mark hold), as the image was baked"
        )


def fake_module(path: Path, vermagic: str) -> None:
    """A relocatable ELF object with a .modinfo section, as a kernel module has: what
    modinfo reads (built with the host's gcc and objcopy)."""
    info, obj = path.with_suffix(".info"), path.with_suffix(".o")
    info.write_bytes(f"vermagic={vermagic} SMP mod_unload modversions \0name=lustre\0license=GPL\0".encode())
    subprocess.run(["gcc", "-c", "-x", "c", "-", "-o", str(obj)], input=b"int lustre_stub;\n", check=True)
    subprocess.run(["objcopy", "--add-section", f".modinfo={info}", str(obj), str(path)], check=True)
    info.unlink()
    obj.unlink()


@pytest.mark.faithful
@needs_root
def test_a_root_whose_kernel_has_no_lustre_module_refuses_to_bake(tmp_path):
    # The lane roots have no kernel (/fsx is a bind mount: docs/node-contract.md); here the
    # image gets a kernel and its module tree, and the bake's record runs as step 20 does
    # (cluster.env, overrides.env, then GPU_CLUSTER_FSX=lustre), with the root's real modinfo.
    k = "6.8.0-1015-aws"
    record = (
        "set -a; . /etc/gpu-cluster/cluster.env; . /etc/gpu-cluster/overrides.env; set +a; "
        f"GPU_CLUSTER_FSX=lustre NODE_TEMPLATES=/opt/gpu-cluster/templates exec {layout.BAKE_PROGRAM} record"
    )

    def bake_record(node: Path) -> subprocess.CompletedProcess:
        return subprocess.run(["chroot", str(node), "bash", "-c", record], capture_output=True, text=True)

    with overlay(images.build_root("bookworm"), tmp_path) as node:
        (node / "boot").mkdir(exist_ok=True)
        (node / f"boot/vmlinuz-{k}").write_text("kernel image")
        tree = node / f"lib/modules/{k}"
        (tree / "kernel/fs").mkdir(parents=True)
        r = bake_record(node)
        assert r.returncode == 1
        assert r.stderr.startswith(
            f"gpu-cluster-bake record: no Lustre client module for kernel {k} (no lustre.ko under /lib/modules/{k}): "
        ), r.stderr
        (tree / "updates/fs/lustre").mkdir(parents=True)
        fake_module(tree / "updates/fs/lustre/lustre.ko", "6.8.0-1009-aws")
        r = bake_record(node)
        assert r.stderr == (
            f"gpu-cluster-bake record: /lib/modules/{k}/updates/fs/lustre/lustre.ko was built for kernel "
            f"'6.8.0-1009-aws', not {k} (modinfo -F vermagic): it would not load; install lustre-client-modules-{k}\n"
        )
        fake_module(tree / "updates/fs/lustre/lustre.ko", k)
        r = bake_record(node)
        # The module is accepted; the next check is the mount helper this root lacks.
        assert r.stderr == (
            "gpu-cluster-bake record: lustre-client-utils is not installed: mount.lustre is missing, /fsx would not mount\n"
        )
        assert not (node / layout.IMAGE_MANIFEST.lstrip("/")).with_name("manifest.json.tmp").exists()
