"""Slurm 23.11 built here, packaged under Ubuntu's names, and baked into the slurm2311 lane's
root through step 20's own apt path (root; the build takes minutes once, then is cached).

Needs the vendored slurm-23.11.4.tar.gz (GPU_CLUSTER_VENDOR_DIR, as `make` sets it) and the
build packages scripts/install-deps.sh installs.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from localcluster import images, slurm_build
from model.slurm_keys import table_23_11
from tests.support.apt_sandbox import AptBox
from tests.support.vendor import vendor_file

TARBALL, WHY = vendor_file(slurm_build.TARBALL)
VERSION = slurm_build.DEB_VERSION
PACKAGES = ["libslurm-dev", "libslurm40t64", "slurm-client", "slurm-wlm", "slurm-wlm-basic-plugins",
            "slurm-wlm-mysql-plugin", "slurmctld", "slurmd", "slurmdbd"]  # fmt: skip

pytestmark = [
    pytest.mark.faithful,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root (the build cache, chroot, mounts)"),
    pytest.mark.skipif(TARBALL is None, reason=WHY),
]


@pytest.fixture(scope="module")
def repo():
    return slurm_build.apt_repo()


def _field(deb: Path, name: str) -> str:
    return subprocess.run(
        ["dpkg-deb", "--field", str(deb), name], check=True, capture_output=True, text=True
    ).stdout.strip()


def _contents(deb: Path) -> list[str]:
    out = subprocess.run(["dpkg-deb", "--contents", str(deb)], check=True, capture_output=True, text=True).stdout
    return [line.split()[5].lstrip(".") for line in out.splitlines()]


def test_the_packages_have_ubuntus_names_relations_and_paths(repo):
    assert sorted(p.name for p in repo.packages) == PACKAGES
    assert {p.version for p in repo.packages} == {VERSION}
    debs = {p.name: repo.root / p.filename for p in repo.packages}
    same = f"(= {VERSION})"
    assert _field(debs["slurm-wlm"], "Depends") == f"slurm-client {same}, slurmctld {same}, slurmd {same}"
    slurmd_depends = _field(debs["slurmd"], "Depends")
    assert slurmd_depends.startswith(f"slurm-wlm-basic-plugins {same}, munge, ucf, init-system-helpers, ")
    assert re.search(r"\blibhwloc15 \(>= ", slurmd_depends), slurmd_depends  # computed from what it links
    assert _field(debs["libslurm-dev"], "Depends").startswith(f"libslurm40t64 {same}")
    plugins = set(_contents(debs["slurm-wlm-basic-plugins"]))
    trip = slurm_build.triplet()
    for plugin in ("mpi_pmix.so", "mpi_pmix_v4.so", "cgroup_v1.so", "cgroup_v2.so", "select_cons_tres.so",
                   "proctrack_cgroup.so", "task_cgroup.so", "task_affinity.so", "auth_munge.so", "jobcomp_filetxt.so",
                   "libslurmfull.so"):  # fmt: skip
        assert f"/usr/lib/{trip}/slurm-wlm/{plugin}" in plugins, plugin
    assert "/etc/slurm/plugstack.conf" in plugins
    assert "/usr/sbin/slurmd" in _contents(debs["slurmd"]) and "/lib/systemd/system/slurmd.service" in _contents(
        debs["slurmd"]
    )
    assert {"/usr/bin/srun", "/usr/bin/sbatch", "/usr/bin/scontrol", "/usr/bin/sinfo"} <= set(
        _contents(debs["slurm-client"])
    )
    assert "/usr/include/slurm/spank.h" in _contents(debs["libslurm-dev"])
    # accounting: slurmdbd with its storage plugin, which basic-plugins does not also ship
    assert _field(debs["slurmdbd"], "Depends").startswith(
        f"slurm-wlm-basic-plugins {same}, slurm-wlm-mysql-plugin {same}, munge, ucf"
    )
    assert {"/usr/sbin/slurmdbd", "/lib/systemd/system/slurmdbd.service"} <= set(_contents(debs["slurmdbd"]))
    mysql = {f"/usr/lib/{trip}/slurm-wlm/accounting_storage_mysql.so", f"/usr/lib/{trip}/slurm-wlm/jobcomp_mysql.so"}
    assert mysql <= set(_contents(debs["slurm-wlm-mysql-plugin"])) and not mysql & plugins
    assert re.search(r"\blibmariadb3 \(>= ", _field(debs["slurm-wlm-mysql-plugin"], "Depends"))
    assert slurm_build.unpackaged(slurm_build.build_stage(), trip) == []


def test_every_plugin_the_rendered_files_name_is_built(repo):
    # The 23.11 key table's plugin words for what we render (select/cons_tres,
    # task/cgroup, ...) exist as files in the package: the source table and the build agree.
    debs = {p.name: repo.root / p.filename for p in repo.packages}
    built = {Path(p).name for p in _contents(debs["slurm-wlm-basic-plugins"])}
    for plugin in ("select/cons_tres", "proctrack/cgroup", "task/cgroup", "task/affinity", "auth/munge",
                   "jobcomp/filetxt", "cgroup/v1", "cgroup/v2"):  # fmt: skip
        kind, name = plugin.split("/")
        assert plugin in str(table_23_11().data["values"]), plugin
        assert f"{kind}_{name}.so" in built, plugin


def test_apt_installs_them_by_name_from_the_local_repository(repo, tmp_path):
    box = AptBox(tmp_path / "apt", f"deb [trusted=yes] file:{repo.root} ./\n")
    assert box.run("apt-get", "update").returncode == 0
    policy = box.run("apt-cache", "policy", "slurmd", "slurm-wlm").stdout
    assert policy.count(f"Candidate: {VERSION}") == 2, policy


@pytest.fixture(scope="module")
def root(repo):
    return images.build_root("slurm2311")


def _chroot(root: Path, *cmd: str) -> str:
    return subprocess.run(["chroot", str(root), *cmd], check=True, capture_output=True, text=True).stdout


def test_step_20_installed_the_nodes_slurm_through_apt_and_held_it(root):
    status = dict(
        (w[1], (w[0], w[2]))
        for w in (
            ln.split()
            for ln in _chroot(
                root, "dpkg-query", "-W", "-f=${db:Status-Abbrev} ${Package} ${Version}\n", *PACKAGES
            ).splitlines()
        )  # fmt: skip
    )
    # step 20 holds slurm* and libslurm* (no upgrade changes Slurm on a running cluster)
    assert status == {p: ("hi", VERSION) for p in PACKAGES}
    assert _chroot(root, "slurmctld", "-V").strip() == "slurm 23.11.4"
    assert _chroot(root, "getent", "passwd", "slurm").split(":")[2] == str(slurm_build.SLURM_UID)
    missing = _chroot(root, "sh", "-c", "for f in /usr/sbin/slurm* /usr/bin/srun /usr/lib/*/slurm-wlm/*.so; do "
                                        "ldd $f | grep -q 'not found' && echo $f; done; true")  # fmt: skip
    assert missing == ""
    # The repository's source and pin stay in the root; machines get it bound at boot.
    assert (
        (root / "etc/apt/sources.list.d/gpu-cluster-slurm-23.11.list")
        .read_text()
        .startswith("deb [trusted=yes] file:/mnt/gpu-cluster-apt/slurm-23.11 ")
    )
    assert list((root / "mnt/gpu-cluster-apt/slurm-23.11").iterdir()) == []
    assert images.apt_repo_binds(root) == [(str(slurm_build.apt_repo().root), "/mnt/gpu-cluster-apt/slurm-23.11")]
    # Pyxis was built by step 20 against these headers.
    assert Path(root, "usr/local/lib/slurm/spank_pyxis.so").stat().st_size > 0
    assert (
        "#define SLURM_VERSION_NUMBER 0x170b04" in (root / "usr/include/slurm/slurm_version.h").read_text()
    )  # 23.11.4
