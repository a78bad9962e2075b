"""The rendered Slurm configuration against real daemons (Debian's Slurm 22.05 here).

slurm.conf, gres.conf and cgroup.conf go through the renderer, the same placeholder
filling as the boot (controller = this host, 127.0.0.1), and `localize_slurm_conf`
(test paths, free ports, a private munged); nothing else is changed. Then:
- slurmctld accepts the real p5.48xlarge files (GresTypes=gpu, DefCpuPerGPU) alone;
- a dynamic slurmd registers with the node line from `slurmd_conf_arg`, for a profile
  measured from this host, and runs job steps (memlock, PMIx, GPU GRES with stand-in
  device nodes, DefCpuPerGPU).
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path

import pytest

from model.catalog import CATALOG
from model.health import HealthConfig
from tests.support.node_shell import fill_placeholders, max_node_count
from tests.support.slurm_harness import (
    SlurmLayout,
    SlurmTestCluster,
    free_port,
    host_cgroup_plugin,
    host_profile_spec,
    host_short_name,
    localize_plugstack_conf,
    localize_slurm_conf,
    missing_prerequisites,
    parse_node_line,
    sysroot_params,
)
from userdata import layout as node_layout
from userdata import slurm_conf as sc
from userdata.render import boot_files

_why = missing_prerequisites()
pytestmark = [pytest.mark.slurm, pytest.mark.skipif(_why is not None, reason=_why or "")]

CLUSTER, PARTITION = "oracle", "train"


def _config(
    spec,
    layout: SlurmLayout,
    *,
    expected_nodes: int,
    gres_dir: str | None = None,
    cgroup_plugin: str | None = None,
    health: HealthConfig | None = None,
) -> dict[str, str]:
    # With the health section's lines as every stack renders them (HealthCheckProgram, ...).
    files = sc.render_slurm_files(
        CLUSTER, PARTITION, spec, cgroup_plugin=cgroup_plugin or host_cgroup_plugin(), health=health or HealthConfig()
    )
    conf = fill_placeholders(
        files[node_layout.SLURM_CONF_TEMPLATE],
        {
            "CONTROLLER_HOST": host_short_name(),
            "CONTROLLER_ADDR": "127.0.0.1",
            "MAX_NODES": max_node_count(expected_nodes),
        },
    )
    gres = files["/etc/slurm/gres.conf"]
    if gres_dir is not None:
        gres = gres.replace("File=/dev/", f"File={gres_dir}/")
    return {
        "slurm.conf": localize_slurm_conf(conf, layout, ctld_port=free_port(), slurmd_port=free_port()),
        "gres.conf": gres,
        "cgroup.conf": files["/etc/slurm/cgroup.conf"],
        "plugstack.conf": localize_plugstack_conf(files[node_layout.PLUGSTACK_CONF], layout),
    }


@pytest.fixture(params=sysroot_params())
def cluster(request, tmp_path):
    sysroot = request.param
    if sysroot is None:
        c = SlurmTestCluster(SlurmLayout(tmp_path))
    else:
        host_dir = Path(tempfile.mkdtemp(prefix="gpu-cluster-oracle-", dir=sysroot / "tmp"))
        c = SlurmTestCluster(SlurmLayout(Path("/") / host_dir.relative_to(sysroot)), sysroot=sysroot)
    yield c
    c.stop()
    if sysroot is not None:
        shutil.rmtree(host_dir, ignore_errors=True)


def _show_config(cluster: SlurmTestCluster) -> dict[str, str]:
    out = cluster.run("scontrol", "show", "config").stdout
    pairs = {}
    for line in out.splitlines():
        key, sep, value = line.partition(" = ")
        if sep:
            pairs[key.strip()] = value.strip()
    return pairs


def test_slurmctld_accepts_p5_config(cluster):
    spec = CATALOG["p5.48xlarge"]
    # Exactly the files a p5 node gets (cgroup.conf with the default autodetect).
    cluster.write_configs(_config(spec, cluster.layout, expected_nodes=1024, cgroup_plugin="autodetect"))
    cluster.start_munged()
    cluster.start_slurmctld()
    cfg = _show_config(cluster)
    assert cfg["ClusterName"] == CLUSTER
    assert cfg["SlurmctldHost[0]"] == f"{host_short_name()}(127.0.0.1)"
    assert cfg["SelectType"] == "select/cons_tres"
    assert cfg["SelectTypeParameters"] == "CR_CORE"
    assert cfg["HealthCheckProgram"] == node_layout.HEALTH_PROGRAM
    assert cfg["HealthCheckInterval"] == "300 sec"
    assert cfg["HealthCheckNodeState"] == "ANY"
    assert cfg["JobRequeue"] == "1"
    assert cfg["ProctrackType"] == "proctrack/cgroup"
    assert cfg["TaskPlugin"] == "task/cgroup,task/affinity"
    assert cfg["GresTypes"] == "gpu"
    assert cfg["JobDefaults"] == "DefCpuPerGPU=24"
    assert cfg["MaxNodeCount"] == "2052"
    assert cfg["TreeWidth"] == "65533"
    assert cfg["ReturnToService"] == "2"
    assert cfg["PropagateResourceLimitsExcept"] == "MEMLOCK"
    assert cfg["JobCompType"] == "jobcomp/filetxt"
    assert cfg["MailProg"] == "/bin/true"
    assert cfg["MpiDefault"] in ("none", "(null)")  # 24.11 prints none as (null)
    assert cfg["StateSaveLocation"] == str(cluster.layout.state)
    assert cfg["CgroupPlugin"] == "autodetect"
    assert cfg["ConstrainDevices"] == "no" and cfg["ConstrainCores"] == "yes" and cfg["ConstrainRAMSpace"] == "no"
    part = parse_node_line(cluster.run("scontrol", "-o", "show", "partition", PARTITION).stdout)
    assert part["Default"] == "YES" and part["MaxTime"] == "UNLIMITED" and part["State"] == "UP"
    assert part["DefaultTime"] == "01:00:00"  # a job without --time gets an hour, not INFINITE
    # The controller wrote its state where the config says (on /fsx for real nodes).
    cluster.stop()
    assert cluster.host_path(cluster.layout.state / "node_state").exists()


@pytest.mark.parametrize(
    ("states", "cycle"),
    [(("IDLE", "ALLOC", "MIXED"), True), (("IDLE",), False)],
    ids=["three", "idle"],
)
def test_slurmctld_accepts_the_health_node_states(cluster, states, cycle):
    """The HealthCheckNodeState values the health section renders, read back from slurmctld."""
    health = HealthConfig(interval_seconds=30, node_states=states, cycle=cycle)
    cluster.write_configs(_config(CATALOG["p5.48xlarge"], cluster.layout, expected_nodes=2, health=health))
    cluster.start_munged()
    cluster.start_slurmctld()
    cfg = _show_config(cluster)
    assert cfg["HealthCheckInterval"] == "30 sec"
    assert set(cfg["HealthCheckNodeState"].split(",")) == set(states) | ({"CYCLE"} if cycle else set())


def test_dynamic_node_registers_and_runs_steps(cluster):
    spec = host_profile_spec()
    cluster.write_configs(_config(spec, cluster.layout, expected_nodes=2))
    cluster.start_munged()
    cluster.start_slurmctld()
    line = fill_placeholders(sc.slurmd_conf_arg(spec), {"NODE_ADDR": "127.0.0.1", "NODE_BLOCK": "a"})
    cluster.start_slurmd(line)
    node = cluster.wait_node_state(host_short_name())
    assert node["NodeAddr"] == "127.0.0.1"
    assert node["CPUTot"] == str(spec.vcpus)
    assert node["RealMemory"] == str(spec.real_memory_mib)
    assert node["Sockets"] == str(spec.sockets)
    assert node["CoresPerSocket"] == str(spec.cores_per_socket)
    assert node["ThreadsPerCore"] == str(spec.threads_per_core)
    assert node["AvailableFeatures"] == "block-a,local-test"
    assert node["Partitions"] == PARTITION
    assert "DYNAMIC" in node["State"]

    assert "pmix" in cluster.run("srun", "--mpi=list").stdout.split()
    assert cluster.run("srun", "-N1", "-n1", "hostname", timeout=20).stdout.strip() == host_short_name()
    # PMIx launches (the path `srun --mpi=pmix` takes for nccl-tests).
    r = cluster.run("srun", "--mpi=pmix", "-n1", "printenv", "PMIX_RANK", timeout=20, check=False)
    assert r.returncode == 0 and r.stdout.strip() == "0", r.stderr
    # PropagateResourceLimitsExcept=MEMLOCK: a step keeps slurmd's memlock, not the low
    # limit of the shell that submitted it [SLURM-MEMLOCK].
    slurmd_memlock = subprocess.run(["bash", "-c", "ulimit -l"], capture_output=True, text=True).stdout.strip()
    assert slurmd_memlock != "64"
    r = cluster.run("bash", "-c", "ulimit -S -l 64 && srun -n1 bash -c 'ulimit -l'", timeout=20)
    assert r.stdout.strip() == slurmd_memlock


def test_check_slurmd_c_passes_on_this_host(tmp_path):
    script = tmp_path / "check-slurmd-c.sh"
    script.write_text(boot_files()[node_layout.CHECK_SLURMD_C])
    env = {**os.environ, "SLURM_NODE_HARDWARE": sc.node_hardware(host_profile_spec())}
    r = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=20, env=env)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("check-slurmd-c: ok\n")


def test_gpu_node_gres_and_def_cpu_per_gpu(cluster):
    base = host_profile_spec()
    if base.vcpus < 2:
        pytest.skip("needs 2 CPUs to tell DefCpuPerGPU from the 1-CPU default")
    # Two GPUs on this host's CPUs: DefCpuPerGPU = vCPUs / 2. Character devices stand
    # in for /dev/nvidia0-1 (slurmd only needs them to be devices).
    spec = dataclasses.replace(base, gpus=2)
    dev = cluster.layout.root / "dev"
    cluster.host_path(dev).mkdir()
    for i in range(2):
        os.mknod(cluster.host_path(dev / f"nvidia{i}"), 0o600 | stat.S_IFCHR, os.makedev(1, 3))
    # cgroup.conf as rendered for the nodes (autodetect): slurmd must find this host's
    # hierarchy by itself (v1 here, v2 on Ubuntu 24.04).
    cluster.write_configs(
        _config(spec, cluster.layout, expected_nodes=2, gres_dir=str(dev), cgroup_plugin="autodetect")
    )
    cluster.start_munged()
    cluster.start_slurmctld()
    line = fill_placeholders(sc.slurmd_conf_arg(spec), {"NODE_ADDR": "127.0.0.1", "NODE_BLOCK": "on-demand"})
    cluster.start_slurmd(line)
    node = cluster.wait_node_state(host_short_name())
    assert node["Gres"] == "gpu:2"
    assert node["AvailableFeatures"] == "block-on-demand,local-test"
    per_gpu = spec.vcpus // 2
    assert _show_config(cluster)["JobDefaults"] == f"DefCpuPerGPU={per_gpu}"
    # A job that forgets --cpus-per-task gets DefCpuPerGPU CPUs per GPU, bound to them.
    r = cluster.run("srun", "-n1", "--gres=gpu:2", "bash", "-c", "echo $CUDA_VISIBLE_DEVICES; nproc", timeout=20)
    assert r.stdout.split() == ["0,1", str(2 * per_gpu)]
    r = cluster.run("srun", "-n1", "--gres=gpu:1", "nproc", timeout=20)
    assert r.stdout.strip() == str(per_gpu)
