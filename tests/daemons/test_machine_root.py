"""The faithful lane's machines set up for real (chown to the machine root's ids, mounts: root); the fast part is tests/localcluster/test_localcluster_unit.py."""

from __future__ import annotations

import os

import pytest
import yaml

from localcluster import machine
from tests.support.localcluster_inputs import _user_data


@pytest.mark.faithful  # chowns to the machine root's own ids: needs root
def test_machine_seed_is_our_exact_user_data_and_nocloud_meta_data(tmp_path):
    root = _image_root(tmp_path)
    raw = _user_data({"write_files": [{"path": "/a", "content": "x\n"}]}, script=b"#!/bin/sh\necho hi\n")
    machine.seed_root(
        root,
        user_data=raw,
        instance_id="i-0abc",
        hostname="ip-10-77-6-11",
        swaps={"AWS_EC2_METADATA_SERVICE_ENDPOINT": "http://127.0.0.1:1338"},
    )
    seed = root / "var/lib/cloud/seed/nocloud"
    assert (seed / "user-data").read_bytes() == raw
    assert yaml.safe_load((seed / "meta-data").read_text()) == {
        "instance-id": "i-0abc",
        "local-hostname": "ip-10-77-6-11",
    }
    cfg = yaml.safe_load((root / "etc/cloud/cloud.cfg.d/90-gpu-cluster-local.cfg").read_text())
    assert cfg["datasource_list"] == ["NoCloud", "None"]
    assert cfg["network"] == {"config": "disabled"}
    assert "locale" in cfg and cfg["locale"] == "C.UTF-8"  # this fake root has no generated locales
    assert (root / "etc/hostname").read_text() == "ip-10-77-6-11\n"
    assert (root / "etc/hosts").read_text() == "127.0.0.1 localhost\n"  # the image's own is kept
    wants = root / "etc/systemd/system/sysinit.target.wants" / machine.CGROUP_UNIT
    assert os.readlink(wants) == f"/etc/systemd/system/{machine.CGROUP_UNIT}"


@pytest.mark.faithful  # chowns to the machine root's own ids: needs root
def test_machine_overrides_keep_the_images_pins_and_add_only_the_swaps(tmp_path):
    root = _image_root(tmp_path, overrides="SLURM_SERIES=22.05\nENROOT_VERSION='4.1.2'\nGPU_CLUSTER_FSX=bind\n")
    machine.seed_root(
        root,
        user_data=b"x",
        instance_id="i-0abc",
        hostname="h",
        swaps={"AWS_EC2_METADATA_SERVICE_ENDPOINT": "http://127.0.0.1:1338"},
    )
    assert (root / "etc/gpu-cluster/overrides.env").read_text().splitlines() == [
        "SLURM_SERIES=22.05",
        "ENROOT_VERSION='4.1.2'",
        "GPU_CLUSTER_FSX=bind",
        "AWS_EC2_METADATA_SERVICE_ENDPOINT=http://127.0.0.1:1338",
    ]
    assert "GPU_CLUSTER_SERVICE_MANAGER" not in machine.read_env(root / machine.OVERRIDES)  # systemd, the default


@pytest.mark.faithful  # chowns to the machine root's own ids: needs root
def test_machine_root_without_hosts_or_locales_gets_the_netbase_defaults(tmp_path):
    root = _image_root(tmp_path, overrides=None, hosts=False)
    (root / "usr/lib/locale").mkdir(parents=True)
    (root / "usr/lib/locale/locale-archive").write_bytes(b"")
    machine.seed_root(root, user_data=b"x", instance_id="i-0abc", hostname="h", swaps={"A": "1"})
    assert (root / "etc/hosts").read_text().splitlines()[0] == "127.0.0.1\tlocalhost"
    cfg = yaml.safe_load((root / machine.CLOUD_CFG).read_text())
    assert "locale" not in cfg  # generated locales: cloud-init's own default stays
    assert (root / machine.OVERRIDES).read_text() == "A=1\n"


@pytest.mark.skipif(os.geteuid() != 0, reason="mounts need root")
def test_propagation_dir_does_not_stack_mounts_across_starts(tmp_path, monkeypatch):
    """Each start of a machine name used to bind its propagation directory onto itself
    again (os.path.ismount cannot see a same-device self-bind), and a shared self-bind on
    old ones is copied to every peer: the mounts doubled per start until boots took
    minutes. One mount after any number of starts; none after forget."""
    monkeypatch.setattr(machine, "PROPAGATE", tmp_path)
    d = tmp_path / "ip-10-99-0-11"
    try:
        for _ in range(4):
            machine.share_propagation("ip-10-99-0-11")
            assert machine.mounts_at(d) == 1
        machine.forget("ip-10-99-0-11")
        assert machine.mounts_at(d) == 0
        assert not d.exists()
    finally:
        machine.detach_all(d)


# ---------------------------------------------------------------------------------
# faithful lane: what a machine gets before it boots (localcluster/machine.py)
# ---------------------------------------------------------------------------------
def _image_root(tmp_path, overrides: str | None = "SLURM_SERIES=22.05\nGPU_CLUSTER_FSX=bind\n", hosts=True):
    root = tmp_path / "root"
    (root / "etc/gpu-cluster").mkdir(parents=True)
    (root / "etc/passwd").write_text("root:x:0:0:root:/root:/bin/bash\n")
    (root / "etc/group").write_text("root:x:0:\n")
    if overrides is not None:
        (root / "etc/gpu-cluster/overrides.env").write_text(overrides)
    if hosts:
        (root / "etc/hosts").write_text("127.0.0.1 localhost\n")
    return root
