"""Node root images (localcluster/images.py, localcluster/mirror.py).

Fast tests: the archive read from apt configuration, the lane's swaps, the cache key,
the payload layout, a failed build (named stage, log, no cache entry) and a cache hit.
`faithful` tests build the real roots: debootstrap, then the shipped
`gpu-cluster-boot --only packages` in a chroot, with apt installing Slurm, munge and
PMIx from the archive and Enroot/Pyxis from the local mirror.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from localcluster import images, mirror

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (chroot, mounts)")

DEB822 = """\
Types: deb
# a comment line
URIs: http://mirror.example/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb-src
URIs: http://mirror.example/debian
Suites: bookworm
Components: main

Types: deb
URIs: http://mirror.example/debian-security
Suites: bookworm-security
Components: main contrib
"""


def test_deb822_keeps_binary_entries_only():
    assert images.parse_deb822(DEB822) == [
        images.AptSource(("http://mirror.example/debian",), ("bookworm", "bookworm-updates"), ("main",)),
        images.AptSource(("http://mirror.example/debian-security",), ("bookworm-security",), ("main", "contrib")),
    ]


def test_one_line_sources_are_read_too():
    text = "# c\ndeb [arch=amd64] http://mirror.example/debian bookworm main\ndeb-src http://x bookworm main\n"
    assert images.parse_one_line(text) == [
        images.AptSource(("http://mirror.example/debian",), ("bookworm",), ("main",))
    ]


def test_trixie_lane_uses_the_same_archive_with_its_own_suites():
    src = images.lane_sources("trixie", images.parse_deb822(DEB822), "bookworm")
    assert images.archive_uri(src) == "http://mirror.example/debian"
    assert images.render_sources(src, "/usr/share/keyrings/debian-archive-keyring.gpg") == (
        "Types: deb\nURIs: http://mirror.example/debian\nSuites: trixie trixie-updates\nComponents: main\n"
        "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n\n"
        "Types: deb\nURIs: http://mirror.example/debian-security\nSuites: trixie-security\n"
        "Components: main contrib\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n"
    )


def test_sources_without_the_release_suite_are_refused():
    only_security = images.parse_deb822(DEB822.split("\n\n")[2])
    with pytest.raises(images.ImageBuildError, match="no entry for the release suite 'bookworm'"):
        images.lane_sources("trixie", only_security, "bookworm")


def test_codename_comes_from_os_release():
    assert images.host_codename('NAME="Debian"\nVERSION_CODENAME=bookworm\n') == "bookworm"
    with pytest.raises(images.ImageBuildError, match="VERSION_CODENAME"):
        images.host_codename("NAME=x\n")


def test_lanes_pin_their_slurm_series_and_the_mirror_pins_enroot():
    assert {n: (lane.suite, lane.slurm_series) for n, lane in images.LANES.items()} == {
        "bookworm": ("bookworm", "22.05"),
        "trixie": ("trixie", "24.11"),
    }
    m = mirror.Mirror(Path("/x"), "a", "b")
    assert images.lane_settings(images.LANES["trixie"], m) == {
        "ENROOT_URL": "file:///mnt/gpu-cluster-mirror/enroot",
        "PYXIS_URL": "file:///mnt/gpu-cluster-mirror/pyxis",
        "ENROOT_VERSION": "4.1.2",
        "SLURM_SERIES": "24.11",
        "GPU_CLUSTER_FSX": "bind",
    }


def test_release_asset_names_match_upstream():
    assert mirror.enroot_deb_names("amd64") == ("enroot_4.1.2-1_amd64.deb", "enroot+caps_4.1.2-1_amd64.deb")


def test_vendor_dir_must_be_named(monkeypatch, tmp_path):
    monkeypatch.delenv(mirror.VENDOR_ENV, raising=False)
    with pytest.raises(mirror.MirrorError, match=r"^GPU_CLUSTER_VENDOR_DIR: not set"):
        mirror.vendor_dir()
    (tmp_path / "enroot-4.1.2.tar.gz").write_bytes(b"x")
    monkeypatch.setenv(mirror.VENDOR_ENV, str(tmp_path))
    with pytest.raises(mirror.MirrorError, match=r"missing pyxis-0\.24\.0\.tar\.gz$"):
        mirror.vendor_dir()


def test_lay_down_writes_files_with_modes_and_refuses_escapes(tmp_path):
    images.lay_down(tmp_path, {"/opt/x/bin/run": b"#!/bin/sh\n", "/etc/x.conf": b"a=1\n"})
    assert (tmp_path / "opt/x/bin/run").stat().st_mode & 0o777 == 0o755
    assert (tmp_path / "etc/x.conf").stat().st_mode & 0o777 == 0o644
    assert (tmp_path / "etc/x.conf").read_bytes() == b"a=1\n"
    with pytest.raises(images.ImageBuildError, match="without '..'"):
        images.lay_down(tmp_path, {"/etc/../../escape": b""})


def _fake_inputs(tmp_path: Path):
    base = tmp_path / "bases" / "bookworm-0000"
    for d in ("usr/sbin", "etc", "proc", "sys", "dev", "run", "tmp", "var/cache/apt/archives"):
        (base / d).mkdir(parents=True)
    m = mirror.Mirror(tmp_path / "mirror", "e" * 64, "p" * 64)
    m.root.mkdir()
    return base, m


def test_root_key_covers_the_payload_and_the_pins(tmp_path):
    base, m = _fake_inputs(tmp_path)
    lane = images.LANES["bookworm"]
    settings = images.lane_settings(lane, m)
    files = {"/opt/gpu-cluster/steps/20-packages.sh": b"#!/bin/bash\necho a\n"}
    key = images._root_key(lane, base, m, settings, files)
    assert key == images._root_key(lane, base, m, dict(settings), dict(files))
    assert key != images._root_key(
        lane, base, m, settings, {**files, "/opt/gpu-cluster/steps/20-packages.sh": b"#!/bin/bash\necho b\n"}
    )
    assert key != images._root_key(lane, base, m, {**settings, "ENROOT_VERSION": "4.2.1"}, files)
    assert key != images._root_key(lane, base, mirror.Mirror(m.root, "f" * 64, m.pyxis_tarball_sha256), settings, files)
    assert key != images._root_key(images.LANES["trixie"], base, m, settings, files)


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


def test_unknown_lane_is_refused():
    with pytest.raises(images.ImageBuildError, match="lane 'jammy': unknown; lanes are bookworm, trixie"):
        images.build_root("jammy")


# --- faithful: the real bake ---------------------------------------------------------------


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
    assert (root / "etc/gpu-cluster/overrides.env").read_text() == (
        "ENROOT_URL=file:///mnt/gpu-cluster-mirror/enroot\nPYXIS_URL=file:///mnt/gpu-cluster-mirror/pyxis\n"
        f"ENROOT_VERSION=4.1.2\nSLURM_SERIES={slurm[:-1]}\nGPU_CLUSTER_FSX=bind\n"
    )
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


def test_build_tools_are_named_when_missing(monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: None if name == "makeself" else "/usr/bin/" + name)
    with pytest.raises(mirror.MirrorError, match=r"needs: makeself \(apt-get install makeself\)"):
        mirror.check_build_tools()


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
    ]
    assert lines[0].split()[1].startswith("22.05.")


def test_prune_keeps_the_newest_entries_of_each_lane(tmp_path, monkeypatch):
    monkeypatch.setattr(images, "CACHE_ROOT", tmp_path)
    for i, name in enumerate(("bookworm-a", "bookworm-b", "bookworm-c", "trixie-a")):
        d = tmp_path / "roots" / name
        d.mkdir(parents=True)
        os.utime(d, (1000 + i, 1000 + i))
    assert images.prune(keep=2) == [tmp_path / "roots" / "bookworm-a"]
    assert sorted(p.name for p in (tmp_path / "roots").iterdir()) == ["bookworm-b", "bookworm-c", "trixie-a"]
