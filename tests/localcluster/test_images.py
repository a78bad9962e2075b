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
from pathlib import Path

import pytest

from localcluster import images, mirror
from model import pins
from tests.support.localcluster_inputs import _fake_inputs

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
        "slurm2311": ("bookworm", "23.11"),  # the nodes' Slurm, built here, on Debian 12
    }
    assert [n for n, lane in images.LANES.items() if lane.local_slurm] == ["slurm2311"]
    m = mirror.Mirror(Path("/x"), "a", "b")
    assert images.lane_settings(images.LANES["trixie"], m) == {
        "ENROOT_URL": "file:///mnt/gpu-cluster-mirror/enroot",
        "PYXIS_URL": "file:///mnt/gpu-cluster-mirror/pyxis",
        "ENROOT_VERSION": "4.1.2",
        "DOWNLOAD_SHA256": "v0.24.0.tar.gz=b",
        "AWS_WHEELS": "/mnt/gpu-cluster-mirror/pypi",
        "SLURM_SERIES": "24.11",
        "GPU_CLUSTER_FSX": "bind",
        "CLOUDWATCH_SKIP": "the local lanes have no route to Amazon's CloudWatch agent downloads or to CloudWatch",
    }


def test_release_asset_names_match_upstream():
    assert mirror.enroot_deb_names("amd64") == ("enroot_4.1.2-1_amd64.deb", "enroot+caps_4.1.2-1_amd64.deb")


def test_vendor_dir_must_be_named(monkeypatch, tmp_path):
    monkeypatch.delenv(mirror.VENDOR_ENV, raising=False)
    with pytest.raises(mirror.MirrorError, match=r"^GPU_CLUSTER_VENDOR_DIR: not set"):
        mirror.vendor_dir()
    (tmp_path / "enroot-4.1.2.tar.gz").write_bytes(b"x")
    monkeypatch.setenv(mirror.VENDOR_ENV, str(tmp_path))
    with pytest.raises(
        mirror.MirrorError,
        match=r"missing pyxis-0\.24\.0\.tar\.gz; `make vendor` downloads and checks them into \./vendor$",
    ):
        mirror.vendor_dir()


def test_lay_down_writes_files_with_modes_and_refuses_escapes(tmp_path):
    images.lay_down(tmp_path, {"/opt/x/bin/run": b"#!/bin/sh\n", "/etc/x.conf": b"a=1\n"})
    assert (tmp_path / "opt/x/bin/run").stat().st_mode & 0o777 == 0o755
    assert (tmp_path / "etc/x.conf").stat().st_mode & 0o777 == 0o644
    assert (tmp_path / "etc/x.conf").read_bytes() == b"a=1\n"
    with pytest.raises(images.ImageBuildError, match="without '..'"):
        images.lay_down(tmp_path, {"/etc/../../escape": b""})


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


def test_unknown_lane_is_refused():
    with pytest.raises(images.ImageBuildError, match="lane 'jammy': unknown; lanes are bookworm, trixie"):
        images.build_root("jammy")


# --- faithful: the real bake ---------------------------------------------------------------


def test_build_tools_are_named_when_missing(monkeypatch, tmp_path):
    # Headers are looked up on this machine's disk: point them at one that exists, so the
    # test does not depend on which -dev packages the machine happens to have.
    header = tmp_path / "string.h"
    header.touch()
    monkeypatch.setattr(mirror, "BUILD_HEADERS", {str(header): "libbsd-dev"})
    monkeypatch.setattr(shutil, "which", lambda name: None if name == "makeself" else "/usr/bin/" + name)
    with pytest.raises(mirror.MirrorError, match=r"needs: makeself \(apt-get install makeself\)"):
        mirror.check_build_tools()


def test_missing_build_headers_are_named_with_their_package(monkeypatch, tmp_path):
    monkeypatch.setattr(mirror, "BUILD_HEADERS", {str(tmp_path / "absent.h"): "libbsd-dev"})
    monkeypatch.setattr(shutil, "which", lambda name: "/usr/bin/" + name)
    with pytest.raises(mirror.MirrorError, match=r"needs: libbsd-dev \(apt-get install libbsd-dev\)"):
        mirror.check_build_tools()


def test_prune_keeps_the_newest_entries_of_each_lane(tmp_path, monkeypatch):
    monkeypatch.setattr(images, "CACHE_ROOT", tmp_path)
    for i, name in enumerate(("bookworm-a", "bookworm-b", "bookworm-c", "trixie-a")):
        d = tmp_path / "roots" / name
        d.mkdir(parents=True)
        os.utime(d, (1000 + i, 1000 + i))
    assert images.prune(keep=2) == [tmp_path / "roots" / "bookworm-a"]
    assert sorted(p.name for p in (tmp_path / "roots").iterdir()) == ["bookworm-b", "bookworm-c", "trixie-a"]


def test_mirror_pins_every_file_a_lane_node_downloads():
    m = mirror.Mirror(Path("/x"), "a", "b", (("enroot_4.1.2-1_amd64.deb", "c"), ("enroot+caps_4.1.2-1_amd64.deb", "d")))
    assert m.download_sha256() == "enroot_4.1.2-1_amd64.deb=c enroot+caps_4.1.2-1_amd64.deb=d v0.24.0.tar.gz=b"


def test_vendored_tarballs_are_checked_against_their_pins(tmp_path):
    bad = tmp_path / "pyxis-0.24.0.tar.gz"
    bad.write_bytes(b"not the release")
    with pytest.raises(
        mirror.MirrorError, match=r"pyxis-0\.24\.0\.tar\.gz: sha256 [0-9a-f]{64}, but model/pins\.py pins ede95ba2"
    ):
        mirror.check_vendor_pin(bad)


@pytest.mark.skipif(not os.environ.get(mirror.VENDOR_ENV), reason="GPU_CLUSTER_VENDOR_DIR not set")
def test_the_vendored_tarballs_match_their_pins():
    vendor = mirror.vendor_dir()
    for name in mirror.vendor_files():
        assert mirror.check_vendor_pin(vendor / name) == pins.vendor_pin(name).sha256


def test_only_the_slurm2311_lane_installs_from_a_local_repository():
    assert images.local_repo(images.LANES["bookworm"]) is None
    assert images.local_repo(images.LANES["trixie"]) is None
    assert images.LOCAL_REPO_PIN > 1000  # its versions win over the archive's, even newer ones


def test_a_roots_local_repositories_come_from_its_manifest(tmp_path):
    assert images.apt_repo_binds(tmp_path) == []
    manifest = tmp_path / images.LANE_RECORD.lstrip("/")
    manifest.parent.mkdir(parents=True)
    manifest.write_text('{"apt_repos": {"/mnt/gpu-cluster-apt/slurm-23.11": "/var/cache/gpu-cluster/apt/s-1"}}')
    assert images.apt_repo_binds(tmp_path) == [("/var/cache/gpu-cluster/apt/s-1", "/mnt/gpu-cluster-apt/slurm-23.11")]
