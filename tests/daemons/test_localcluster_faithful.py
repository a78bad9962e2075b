"""The faithful lane: nodes are whole machines booting like EC2 instances.

A 2-node cluster of `systemd-nspawn --boot` machines (systemd as PID 1) from the lane's
baked root: cloud-init in each reads our exact user data from its NoCloud seed and runs
it; systemd runs the units the boot enables. Then: both nodes idle in Slurm, a container
job through Pyxis and Enroot on every node, a reboot that brings a node back with no
manual step, and nothing left behind by `down`.

Lanes: GPU_CLUSTER_FAITHFUL_LANES (comma-separated; default `bookworm`). The root is
built by localcluster/images.py (needs GPU_CLUSTER_VENDOR_DIR, as `make` sets it) or
taken from GPU_CLUSTER_LOCAL_ROOT.
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import pytest

from tests.support.localcluster_probe import JOIN_GATE_WAIT, faithful_lane_unavailable, wait_joined

NAME, SUBNET, NODES = "fttest", 6, 2
LANES = [x for x in os.environ.get("GPU_CLUSTER_FAITHFUL_LANES", "bookworm").split(",") if x]
STEPS = ["10-identity", "20-packages", "30-fsx", "40-munge", "50-slurm", "60-enroot", "70-pyxis",
         "80-limits", "85-services", "90-jobs", "95-handoff"]  # fmt: skip

pytestmark = pytest.mark.faithful


@pytest.fixture(scope="module", params=LANES)
def cluster(request):
    why = faithful_lane_unavailable()
    if why:
        pytest.skip(why)
    from localcluster.cluster import LocalCluster

    lines: list[str] = []
    LocalCluster(NAME, SUBNET, out=lines.append).c.down()  # leftovers of an aborted run
    lc = LocalCluster(NAME, SUBNET, out=lines.append, lane=request.param)
    supervisors: list[int] = []
    try:
        lc.up(NODES, timeout=300)
        supervisors = [n.init_pid for n in lc.c.nodes.values()]
        # The controller submits the first-boot gate once every node is idle; its container
        # step holds both nodes for a while. The cluster is ready when the gate is done.
        assert lc.validation_job(timeout=300) is not None, "first-boot validation job did not finish"
        yield lc
    except BaseException:
        print("\n".join(lines))
        raise
    finally:
        supervisors += [n.init_pid for n in lc.c.nodes.values()]
        lc.c.down()
        _assert_nothing_left(lc, supervisors)


def _assert_nothing_left(lc, supervisors: list[int]) -> None:
    from localcluster.nodes import NETNS_DIR

    leftovers = [ns for ns in (os.listdir(NETNS_DIR) if NETNS_DIR.is_dir() else []) if ns.startswith(f"gcl-{NAME}-")]
    assert leftovers == [], f"network namespaces left: {leftovers}"
    assert not lc.c.root.exists(), f"{lc.c.root} left behind"
    cg = [str(p) for p in Path("/sys/fs/cgroup").glob(f"*/gcl-{NAME}-*")]
    assert cg == [], f"cgroups left (slurm_<node> and the machines' own): {cg}"
    with open("/proc/self/mountinfo") as f:
        mounts = [line.split()[4] for line in f if str(lc.c.root) in line.split()[4]]
    assert mounts == [], f"mounts left: {mounts}"
    alive = [p for p in supervisors if p and Path(f"/proc/{p}").exists()
             and b"supervisor.sh" in Path(f"/proc/{p}/cmdline").read_bytes()]  # fmt: skip
    assert alive == [], f"machine supervisors still running: {alive}"


def _boot_log(node) -> str:
    p = node.upper("/var/log/gpu-cluster/boot.log")
    return p.read_text(errors="replace") if p.exists() else ""


def test_every_machine_booted_with_systemd_and_cloud_init_from_our_exact_user_data(cluster):
    sent = cluster.user_data_file.read_bytes()
    for w in cluster.watches.values():
        node = w.node
        assert w.rc == 0, _boot_log(node)[-3000:]
        assert [s.step for s in w.steps] == STEPS
        assert all(s.state == "ok" for s in w.steps)
        # PID 1 is systemd, and it says the machine is up with nothing failed.
        pid1 = cluster.c.run(node, ["readlink", "/proc/1/exe"]).stdout.strip()
        assert pid1.endswith("/systemd"), pid1
        st = cluster.machine_state(node)
        assert st["cloud_init"] == "done", cluster.c.run(node, ["cloud-init", "status", "--long"]).stdout
        assert st["systemd"] == "running", cluster.c.run(node, ["systemctl", "--failed"]).stdout
        assert st["units"] == {u: "active" for u in cluster.units(node)}
        # cloud-init got our bytes from the NoCloud seed, and ran the user-data script.
        inst = node.upper(f"/var/lib/cloud/instances/{node.instance_id}")
        assert (inst / "user-data.txt").read_bytes() == sent
        assert (inst / "sem/config_scripts_user").exists()
        ds = cluster.c.run(node, ["cloud-init", "query", "platform"]).stdout.strip()
        assert ds == "nocloud"
        assert "(services: systemd, " in _boot_log(node)
        # step 85 enabled our units for the next boot, in systemd's own view
        enabled = cluster.c.run(node, ["systemctl", "is-enabled", *cluster.units(node)]).stdout.split()
        assert enabled == ["enabled"] * len(cluster.units(node))


def test_both_machines_idle_and_run_jobs(cluster):
    assert cluster.node_states() == {h: "idle" for h in cluster.c.nodes}
    r = cluster.ctl("srun", f"-N{NODES}", "--time=1", "hostname", timeout=120)
    assert r.returncode == 0, r.stderr
    assert sorted(r.stdout.split()) == sorted(cluster.c.nodes)


def test_container_job_runs_in_the_image_on_every_machine(cluster):
    r = cluster.container_srun()
    assert r.returncode == 0, r.stdout + r.stderr
    lines = sorted(r.stdout.splitlines())
    image = re.escape("gpu-cluster test image (bash and cat from ") + r"Debian GNU/Linux \d+ \(\w+\)\)"
    assert len(lines) == NODES, r.stdout
    for host, line in zip(sorted(cluster.c.nodes), lines, strict=True):
        assert re.fullmatch(rf"{host}: {image}; /fsx mounted: yes", line), line


def test_container_job_of_an_ordinary_user_runs_on_every_machine(cluster):
    """Pyxis runs Enroot as the job's user: its unprivileged path (user namespaces and the
    `+caps` helpers), which the root-run gate never takes."""
    from localcluster import images

    assert cluster.ordinary_users() == [images.ORDINARY_USER]
    r = cluster.container_srun(user=images.ORDINARY_USER)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = sorted(r.stdout.splitlines())
    assert [line.split(":")[0] for line in lines] == sorted(cluster.c.nodes), r.stdout
    assert all("gpu-cluster test image" in line for line in lines), r.stdout


def test_first_boot_gate_runs_its_container_step_on_every_machine(cluster):
    """The gate's container step (Pyxis + Enroot, one task per node) passes: the local
    stack's validation.container_image is the test image, on /fsx before the nodes boot."""
    report = cluster.validation_report(timeout=180)
    hosts = "+".join(sorted(cluster.c.nodes))
    assert re.search(rf"^\s*GO\s+container\s+{re.escape(hosts)}\s*$", report, re.M), report
    assert "GO      pmix" in report, report


def test_rebooted_worker_comes_back_idle_through_the_per_boot_script(cluster):
    node = next(n for n in cluster.c.nodes.values() if n.role == "worker")
    leader = node.leader()
    offset = len(_boot_log(node))
    w = cluster.reboot(node.hostname, timeout=240)
    assert w.rc == 0, _boot_log(node)[-3000:]
    assert node.leader() not in (None, leader)  # a new PID 1, same machine and root
    assert (node.path / "console.log").read_text(errors="replace").count("supervisor: nspawn exited 133") == 1
    after = _boot_log(node)[offset:]
    # cloud-init ran the per-boot script (the user-data script is per instance), which
    # ran every step again; same instance, so no new munge key request.
    assert "gpu-cluster-boot: 11 step(s)" in after
    assert after.count("all 11 step(s) ok") == 1
    assert "requesting the cluster's munge key" not in after
    st = cluster.machine_state(node)
    assert st["units"] == {u: "active" for u in cluster.units(node)}
    # nothing failed at boot (Debian's slurmctld package enables its unit on every node)
    assert st["systemd"] == "running", cluster.c.run(node, ["systemctl", "--failed"]).stdout
    cluster.wait_idle(NODES, timeout=60)
    r = cluster.ctl("srun", "-w", node.hostname, "--time=1", "hostname", timeout=60)
    assert (r.returncode, r.stdout.strip()) == (0, node.hostname), r.stderr


def test_fsx_attached_late_is_picked_up_by_the_mount_retry_and_kept_across_a_reboot(cluster):
    w = cluster.launch("worker", fsx=False, expected=NODES + 1)
    node = w.node
    try:
        log = node.upper("/var/log/gpu-cluster/boot.log")
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not (log.exists() and "failed (try 2 of" in log.read_text()):
            time.sleep(0.5)
        assert "failed (try 2 of" in _boot_log(node), _boot_log(node)[-2000:]  # no /fsx yet: Lustre tried
        cluster.c.attach_fsx(node)  # the shared directory appears, as a late Lustre mount would
        cluster.watch([w], timeout=180)
        assert w.rc == 0, _boot_log(node)[-3000:]
        wait_joined(cluster.c.fsx_dir / ".gpu-cluster" / NAME, node.hostname)
        cluster.wait_idle(NODES + 1, timeout=JOIN_GATE_WAIT)
        r = cluster.reboot(node.hostname, timeout=180)  # a rebooted node still has it
        assert r.rc == 0, _boot_log(node)[-3000:]
        assert cluster.c.run(node, ["mountpoint", "-q", "/fsx"]).returncode == 0
    finally:
        cluster.c.kill_node(node)
        cluster.watches.pop(node.hostname, None)
        assert cluster.forget_node(node.hostname)
