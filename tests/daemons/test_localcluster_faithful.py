"""The faithful lane: nodes are whole machines booting like EC2 instances.

A 2-node cluster of `systemd-nspawn --boot` machines (systemd as PID 1) from the lane's
baked root: cloud-init in each reads our exact user data from its NoCloud seed and runs
it; systemd runs the units the boot enables. Then: both nodes idle in Slurm, a container
job through Pyxis and Enroot on every node, a reboot that brings a node back with no
manual step, and nothing left behind by `down` (checked when the shared cluster goes down:
tests/support/lane_clusters.py).

Lanes: every lane in GPU_CLUSTER_FAITHFUL_LANES (comma-separated; default `bookworm`)
boots, runs jobs and container jobs (what each lane's OS, Slurm and Pyxis/Enroot build
must accept); the node-behaviour tests (marker `nodes_lane`: the reboot, the late /fsx)
run on the nodes' lane only (GPU_CLUSTER_LIFECYCLE_LANE): the same shipped scripts on
another lane would only prove that lane's nspawn again. The root is built by
localcluster/images.py (needs GPU_CLUSTER_VENDOR_DIR, as `make` sets it) or taken from
GPU_CLUSTER_LOCAL_ROOT.
"""

from __future__ import annotations

import json
import re
import time

import pytest

from tests.support import lane_clusters
from tests.support.localcluster_probe import JOIN_GATE_WAIT, faithful_lane_unavailable, wait_joined

NAME, NODES = lane_clusters.SHAPES["plain"].name, 2
# Every shipped step (the lanes skip 25-logs with a reason; still a step), in order.
STEPS = lane_clusters.boot_steps()

# One booted cluster per lane per session (tests/support/lane_clusters.py): the lifecycle
# module goes on with the nodes' lane's cluster after this one.
pytestmark = [pytest.mark.faithful, pytest.mark.lane_cluster("plain")]


@pytest.fixture(scope="module", params=lane_clusters.machine_lanes())
def lane(request) -> str:
    return request.param


@pytest.fixture(scope="module")
def cluster(request, lane, lane_pool):
    why = faithful_lane_unavailable()
    if why:
        pytest.skip(why)
    yield from lane_clusters.shared_cluster(request, lane_pool, lane)


def _boot_log(node) -> str:
    p = node.upper("/var/log/gpu-cluster/boot.log")
    return p.read_text(errors="replace") if p.exists() else ""


def test_every_machine_booted_with_systemd_and_cloud_init_from_our_exact_user_data(cluster):
    sent = cluster.user_data_file.read_bytes()
    for w in cluster.watches.values():
        node = w.node
        assert w.rc == 0, _boot_log(node)[-3000:]
        # A step listed twice failed once and was retried: the boot log says why.
        failed = [
            line
            for line in _boot_log(node).splitlines()
            if any(k in line for k in (" FAILED ", " ERROR: ", "not retrying"))
        ]
        assert [s.step for s in w.steps] == STEPS, failed
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


def _leaf_nodes(cluster, leaf: str) -> list[str]:
    """The nodes `scontrol show topology` lists under one switch, on the controller."""
    out = cluster.ctl("scontrol", "show", "topology").stdout
    line = next((ln for ln in out.splitlines() if ln.startswith(f"SwitchName={leaf} ")), "")
    expr = next((t.split("=", 1)[1] for t in line.split() if t.startswith("Nodes=")), "")
    return cluster.ctl("scontrol", "show", "hostnames", expr).stdout.split() if expr else []


def _applies_topology(cluster) -> bool:
    """Slurm 23.02.2 and later put dynamic nodes in the switch tree; before that the refresh
    only records the network nodes (nodeside/topology.py)."""
    from nodeside import topology

    v = topology.slurm_version(lambda argv, **kw: cluster.ctl(*argv))
    return not topology.too_old(v)


def _recorded_leaf(cluster, hostname: str) -> str | None:
    path = cluster.c.fsx_dir / ".gpu-cluster" / NAME / "topology" / "nodes.json"
    nodes = json.loads(path.read_text()).get("nodes", {}) if path.exists() else {}
    return ((nodes.get(hostname) or {}).get("network_nodes") or [None])[-1]


def _placed(cluster, hostname: str, leaf: str) -> bool:
    """The node is where EC2 says: in Slurm's tree, or (Slurm before 23.02.2) in the record."""
    if _applies_topology(cluster):
        return hostname in _leaf_nodes(cluster, leaf)
    return (
        _recorded_leaf(cluster, hostname) == leaf
        and "SwitchName" not in cluster.ctl("scontrol", "show", "topology").stdout
    )


def _wait_topology(cluster, check, what: str, timeout: float = 120):
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, (
            f"gave up waiting for {what}: {cluster.ctl('scontrol', 'show', 'topology').stdout}"
        )
        time.sleep(1)


def _standin_refused(cluster) -> list[dict]:
    log = cluster.c.aws_state / "requests.jsonl"
    return [r for r in map(json.loads, log.read_text().splitlines()) if r.get("refused")] if log.exists() else []


def test_the_controller_placed_every_node_by_ec2s_topology(cluster):
    """The controller's refresh read DescribeInstanceTopology from the lane's EC2 stand-in
    (AWS_ENDPOINT_URL_EC2) and Slurm holds each node under its leaf network node."""
    from localcluster import topology_standin

    for node in cluster.c.nodes.values():
        leaf = topology_standin.lane_network_nodes(node.serial)[-1]
        _wait_topology(
            cluster, lambda n=node, lf=leaf: _placed(cluster, n.hostname, lf), f"{node.hostname} under {leaf}"
        )
    assert _standin_refused(cluster) == []


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


@pytest.mark.nodes_lane
def test_a_local_apt_repository_serves_a_running_machine(cluster, tmp_path):
    # What an upgrade test does on a lane machine: a repository attached to the running
    # machine (read-only bind + its sources entry), read by the machine's own apt, and a
    # package from it installed (apt checks it against the repository's hashes). On the
    # slurm2311 lane the root's own repository (bound at launch) is readable too.
    from localcluster import apt_repo
    from tests.support.apt_sandbox import make_deb

    node = cluster.slurm_nodes()[-1]
    repo = apt_repo.build_repo("attach-probe", [make_deb(tmp_path, "gcl-attach-probe", "1.0")], cache=tmp_path / "apt")
    apt_repo.attach(node.hostname, node.leader(), repo)
    lists = [path for path in repo.apt_files()]
    if cluster.lane == "slurm2311":
        lists.append("/etc/apt/sources.list.d/gpu-cluster-slurm-23.11.list")
    try:
        for source in lists:  # one list at a time: the machine cannot reach the Debian archive
            only = [
                f"-oDir::Etc::SourceList={source}",
                "-oDir::Etc::SourceParts=/nonexistent",
                "-oAPT::Get::List-Cleanup=0",
            ]
            r = cluster.c.run(node, ["apt-get", *only, "update"], timeout=120)
            assert r.returncode == 0 and "Err:" not in r.stdout, r.stdout + r.stderr
        policy = cluster.c.run(node, ["apt-cache", "policy", "gcl-attach-probe", "slurmd"]).stdout
        assert "Candidate: 1.0" in policy, policy
        if cluster.lane == "slurm2311":
            assert "*** 23.11.4-0local1 1001" in policy, policy  # installed, from the pinned repository
        r = cluster.c.run(
            node, ["apt-get", "install", "-y", "--no-install-recommends", "gcl-attach-probe"], timeout=120
        )
        assert r.returncode == 0, r.stdout + r.stderr
        assert cluster.c.run(node, ["cat", "/usr/share/gcl-attach-probe/version"]).stdout == "1.0"
    finally:
        cluster.c.run(node, ["apt-get", "purge", "-y", "gcl-attach-probe"], timeout=120)
        cluster.c.run(node, ["rm", "-f", *repo.apt_files()])


@pytest.mark.nodes_lane
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
    assert f"gpu-cluster-boot: {len(STEPS)} step(s)" in after
    assert after.count(f"all {len(STEPS)} step(s) ok") == 1
    assert "requesting the cluster's munge key" not in after
    st = cluster.machine_state(node)
    assert st["units"] == {u: "active" for u in cluster.units(node)}
    # nothing failed at boot (Debian's slurmctld package enables its unit on every node)
    assert st["systemd"] == "running", cluster.c.run(node, ["systemctl", "--failed"]).stdout
    cluster.wait_idle(NODES, timeout=60)
    r = cluster.ctl("srun", "-w", node.hostname, "--time=1", "hostname", timeout=60)
    assert (r.returncode, r.stdout.strip()) == (0, node.hostname), r.stderr


@pytest.mark.nodes_lane
def test_fsx_attached_late_is_picked_up_by_the_mount_retry_and_kept_across_a_reboot(cluster):
    from localcluster import topology_standin

    w = cluster.launch("worker", fsx=False, expected=NODES + 1)
    node = w.node
    leaf = topology_standin.lane_network_nodes(node.serial)[-1]
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
        # The newcomer is where EC2 (the stand-in) says, after the controller's refresh.
        _wait_topology(cluster, lambda: _placed(cluster, node.hostname, leaf), f"{node.hostname} under {leaf}")
        r = cluster.reboot(node.hostname, timeout=180)  # a rebooted node still has it
        assert r.rc == 0, _boot_log(node)[-3000:]
        assert cluster.c.run(node, ["mountpoint", "-q", "/fsx"]).returncode == 0
    finally:
        cluster.c.kill_node(node)
        cluster.watches.pop(node.hostname, None)
        assert cluster.forget_node(node.hostname)
    # The node left Slurm: the next refresh drops it from topology.conf.
    _wait_topology(
        cluster,
        lambda: node.hostname not in _leaf_nodes(cluster, leaf) and _recorded_leaf(cluster, node.hostname) is None,
        f"{node.hostname} gone",
    )
    assert _standin_refused(cluster) == []


def _pids(cluster, node, units: list[str]) -> dict[str, str]:
    r = cluster.c.run(node, ["systemctl", "show", "-p", "MainPID", "--value", *units], check=True)
    return dict(zip(units, r.stdout.split(), strict=True))


def _maps(cluster, node, pid: str, library: str) -> list[str]:
    r = cluster.c.run(node, ["grep", "-F", library, f"/proc/{pid}/maps"])
    return sorted({line.split(None, 5)[-1] for line in r.stdout.splitlines()})


def _unattended_upgrade(cluster, node, repo) -> str:
    """Serve `repo` to the node, read its list (the archive is out of reach of a lane machine,
    so apt-daily's list update reads only this repository), then run the daily upgrade job
    itself: apt-daily-upgrade.service, i.e. unattended-upgrade, with needrestart's apt hook.
    Returns what the upgrade wrote to its dpkg log (needrestart's output included)."""
    from localcluster import apt_repo

    apt_repo.attach(node.hostname, node.leader(), repo)
    listed = f"-oDir::Etc::SourceList=/etc/apt/sources.list.d/{repo.label}.list"
    r = cluster.c.run(node, ["apt-get", "update", listed, "-oDir::Etc::SourceParts=-",
                             "-oAPT::Get::List-Cleanup=0"], timeout=120)  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    log = "/var/log/unattended-upgrades/unattended-upgrades-dpkg.log"
    before = cluster.c.run(node, ["stat", "-c", "%s", log]).stdout.strip() or "0"
    # the daily stamp says it ran today; a day later it runs again
    cluster.c.run(node, ["rm", "-f", "/var/lib/apt/periodic/upgrade-stamp"], check=True)
    r = cluster.c.run(node, ["systemctl", "start", "apt-daily-upgrade.service"], timeout=300)
    assert r.returncode == 0, (
        r.stderr + cluster.c.run(node, ["journalctl", "-u", "apt-daily-upgrade", "-n", "40"]).stdout
    )
    out = cluster.c.run(node, ["tail", "-c", f"+{int(before) + 1}", log]).stdout
    uu = cluster.c.run(node, ["tail", "-n", "30", "/var/log/unattended-upgrades/unattended-upgrades.log"]).stdout
    unit = cluster.c.run(node, ["journalctl", "-u", "apt-daily-upgrade.service", "-o", "cat", "-n", "60"]).stdout
    return f"{out}\n--- unattended-upgrades.log ---\n{uu}\n--- journal of apt-daily-upgrade ---\n{unit}"


@pytest.mark.nodes_lane
def test_an_unattended_upgrade_of_their_libraries_leaves_munge_and_slurmd_running(cluster):
    """The daily security upgrade replaces a library munged and one slurmd use, on a worker
    with Debian's unattended-upgrades and needrestart in Ubuntu 24.04's mode (restart what
    uses a replaced library, also when nobody is at the terminal [NR-NOBLE]): with step
    20's drop-ins both daemons keep running, the same processes, and needrestart says it
    deferred them; without the needrestart drop-in the same upgrade restarts both."""
    from localcluster import images
    from tests.support import apt_upgrade
    from userdata import layout

    node = next(n for n in cluster.c.nodes.values() if n.role == "worker")
    root, suite = cluster.base_root(), images.LANES[cluster.lane].suite
    repos = [apt_upgrade.upgrade_repo(root, suite, n) for n in (1, 2)]
    units = [u for _, u, _ in apt_upgrade.LIBRARIES.values()]
    setup = {
        apt_upgrade.UBUNTU_NOBLE_NEEDRESTART_PATH: apt_upgrade.UBUNTU_NOBLE_NEEDRESTART,
        "/etc/apt/apt.conf.d/52gpu-cluster-test-origins": apt_upgrade.origins_pattern(repos),
    }
    try:
        for path, text in setup.items():
            cluster.c.run(node, ["tee", path], input=text, check=True)
        _upgrade_keeps_them_running(cluster, node, repos[0], units)
        # Without the drop-in, the same kind of upgrade restarts both: the test can fail.
        after = _pids(cluster, node, units)
        cluster.c.run(node, ["mv", layout.NEEDRESTART_DROPIN, "/root/needrestart-dropin.away"], check=True)
        try:
            said = _unattended_upgrade(cluster, node, repos[1])
            restarted = _pids(cluster, node, units)
            assert all(restarted[u] not in ("0", after[u]) for u in units), f"{after} -> {restarted}\n{said}"
        finally:
            cluster.c.run(node, ["mv", "/root/needrestart-dropin.away", layout.NEEDRESTART_DROPIN], check=True)
    finally:  # the shared cluster goes on to the lifecycle module: no test setting stays
        cluster.c.run(node, ["rm", "-f", *setup, *(f for r in repos for f in r.apt_files())])
    cluster.wait_idle(NODES, timeout=120)


def _upgrade_keeps_them_running(cluster, node, repo, units: list[str]) -> None:
    from tests.support import apt_upgrade

    before = _pids(cluster, node, units)
    for daemon, unit, lib in apt_upgrade.LIBRARIES.values():  # the daemons use these libraries
        assert any(lib in m and "(deleted)" not in m for m in _maps(cluster, node, before[unit], lib)), daemon
    said = _unattended_upgrade(cluster, node, repo)
    for pkg in apt_upgrade.LIBRARIES:
        version = cluster.c.run(node, ["dpkg-query", "-W", "-f=${Version}", pkg]).stdout
        assert version.endswith("+gcl1"), f"{pkg} {version}: not upgraded\n{said}"
    after = _pids(cluster, node, units)
    assert after == before, f"restarted by the upgrade: {before} -> {after}\n{said}"
    for daemon, unit, lib in apt_upgrade.LIBRARIES.values():
        # still the old library, now deleted on disk: what needrestart looks for
        assert any("(deleted)" in m for m in _maps(cluster, node, after[unit], lib)), f"{daemon}\n{said}"
    deferred = said[said.find("Service restarts being deferred") :]
    assert all(u in deferred for u in units), said
    st = cluster.machine_state(node)
    assert st["units"] == {u: "active" for u in cluster.units(node)}, st
    assert "Success" in cluster.c.run(node, ["bash", "-c", "munge -n | unmunge"]).stdout
    assert cluster.node_states().get(node.hostname) == "idle"
