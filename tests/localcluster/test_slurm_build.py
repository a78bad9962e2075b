"""localcluster/slurm_build.py without building: Ubuntu's package set, the units taken from
the release source, the maintainer scripts. The build itself is tests/daemons/test_slurm_2311_root.py."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from localcluster import slurm_build as sb
from tests.support.vendor import vendor_file

TARBALL, WHY = vendor_file(sb.TARBALL)


def test_the_package_set_is_ubuntus():
    specs = {s["name"]: s for s in sb.package_specs("x86_64-linux-gnu")}
    assert sorted(specs) == ["libslurm-dev", "libslurm40t64", "slurm-client", "slurm-wlm", "slurm-wlm-basic-plugins",
                             "slurm-wlm-mysql-plugin", "slurmctld", "slurmd", "slurmdbd"]  # fmt: skip
    same = f"(= {sb.DEB_VERSION})"
    assert specs["slurm-wlm"]["depends"] == [f"slurm-client {same}", f"slurmctld {same}", f"slurmd {same}"]
    assert specs["slurm-wlm-basic-plugins"]["files"] == ["usr/lib/x86_64-linux-gnu/slurm-wlm/*.so"]
    # slurmdbd depends on its storage plugin, which basic-plugins must not also ship (dpkg
    # refuses two packages owning one file).
    plug = "usr/lib/x86_64-linux-gnu/slurm-wlm/"
    mysql = [plug + "accounting_storage_mysql.so", plug + "jobcomp_mysql.so"]
    assert specs["slurm-wlm-basic-plugins"]["exclude"] == mysql == specs["slurm-wlm-mysql-plugin"]["files"]
    assert specs["slurmdbd"]["depends"][:2] == [f"slurm-wlm-basic-plugins {same}", f"slurm-wlm-mysql-plugin {same}"]
    assert sb.plugin_dir("x86_64-linux-gnu") == "/usr/lib/x86_64-linux-gnu/slurm-wlm"
    assert sb.DEB_VERSION.startswith("23.11.4-")  # step 20 checks SLURM_SERIES 23.11.*


@pytest.mark.skipif(shutil.which("sh") is None, reason="no sh")
@pytest.mark.parametrize("script", [sb.PREINST_USER, sb.daemon_postinst("slurmd"), sb.daemon_prerm("slurmd"),
                                    sb.daemon_postrm("slurmctld")])  # fmt: skip
def test_maintainer_scripts_are_valid_sh(script):
    assert script.startswith("#!/bin/sh\nset -e\n")
    assert subprocess.run(["sh", "-n"], input=script, text=True).returncode == 0


def test_the_user_and_daemon_directories_are_debians():
    assert f"--uid {sb.SLURM_UID} " in sb.PREINST_USER and sb.SLURM_UID == 64030
    post = sb.daemon_postinst("slurmd")
    assert "chown slurm:slurm /var/lib/slurm /var/lib/slurm/slurmd /var/log/slurm" in post
    assert "deb-systemd-helper enable slurmd.service" in post and "invoke-rc.d slurmd start" in post


@pytest.mark.skipif(TARBALL is None, reason=WHY)
def test_units_are_the_release_sources_own_with_configures_substitutions():
    slurmd = sb.unit(TARBALL, "slurmd.service")
    assert "ExecStart=/usr/sbin/slurmd --systemd $SLURMD_OPTIONS" in slurmd.splitlines()
    assert "Delegate=yes" in slurmd.splitlines() and "TasksMax=infinity" in slurmd.splitlines()
    # Debian's condition (the release has it commented out in slurmd's unit): enabled at
    # install, slurmd is skipped at a boot that has no slurm.conf yet, not failed.
    assert "ConditionPathExists=/etc/slurm/slurm.conf" in slurmd.splitlines()
    assert "ConditionPathExists=/etc/slurm/slurm.conf" in sb.unit(TARBALL, "slurmctld.service").splitlines()
    # slurmdbd's own condition: its unit is enabled on every image, started only where
    # the boot wrote slurmdbd.conf (a controller with accounting).
    slurmdbd = sb.unit(TARBALL, "slurmdbd.service").splitlines()
    assert "ConditionPathExists=/etc/slurm/slurmdbd.conf" in slurmdbd
    assert "ExecStart=/usr/sbin/slurmdbd -D -s $SLURMDBD_OPTIONS" in slurmdbd
