"""The topology.conf the controller generates (nodeside/topology.py) against real
slurmctld: Debian 12's Slurm 22.05 on this host, and Debian 13's 24.11 in the faithful
trixie lane's baked root (slurm_harness's sysroot mode).

The cluster is our rendered slurm.conf (TopologyPlugin=topology/tree, max_switch_wait)
plus "fake switches": six CLOUD nodes f1-f6 behind power saving with ResumeProgram=/bin/true.
Slurm allocates such nodes like any idle node and the job then waits for them to boot
(CONFIGURING), so where the scheduler put a job is visible without six slurmds; the
topology over them comes from DescribeInstanceTopology-shaped answers through the
refresh's own renderer. Shown:
- slurmctld reads the generated tree (one switch per network node, the synthetic root
  over two tops, the flat leaf of an instance without topology), and `block` on 24.11;
- a 2-node job lands on the one leaf with two free nodes; a `--switches=1` job waits
  while free nodes exist only across leaves, within its bound;
- a refresh (`scontrol reconfigure` with a new topology.conf) leaves the allocated job
  on its nodes and places the waiting one by the new tree;
- a node that registered after the last refresh is under no switch: Slurm refuses a job
  naming it until the refresh puts it in a leaf (here the flat one); on 22.05 even after
  it (dynamic nodes join the tree from 23.02.2 on), which is why the refresh writes no
  switch for Slurm before 23.02.2;
- on 22.05 a dynamic node that runs a job across `scontrol reconfigure` stays ALLOCATED,
  with no job, once the job ended (24.11 frees it), which is why the refresh does not
  reconfigure Slurm before 23.02.2 at all.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from nodeside import topology
from tests.support.node_shell import fill_placeholders
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
    wait_for,
)
from tests.support.slurm_sysroot import lane_sysroot
from userdata import layout as node_layout
from userdata import slurm_conf as sc

_why = missing_prerequisites()
pytestmark = [pytest.mark.slurm, pytest.mark.skipif(_why is not None, reason=_why or "")]

FAKE = "NodeName=f[1-6] CPUs=2 Boards=1 SocketsPerBoard=1 CoresPerSocket=2 ThreadsPerCore=1 RealMemory=1000 State=CLOUD"
POWER_SAVE = "ResumeProgram=/bin/true\nSuspendProgram=/bin/true\nSuspendTime=3600\nResumeTimeout=3600\n"
# EC2's answer for the fake nodes: f1, f2 share a leaf; f3 and f4 sit under the same
# middle node on two leaves; f5 under another top; f6's type has no topology (yet).
ANSWER = {
    "f1": ["nn-0a1b2c3d4e5f60001", "nn-0a1b2c3d4e5f60011", "nn-0a1b2c3d4e5f60111"],
    "f2": ["nn-0a1b2c3d4e5f60001", "nn-0a1b2c3d4e5f60011", "nn-0a1b2c3d4e5f60111"],
    "f3": ["nn-0a1b2c3d4e5f60001", "nn-0a1b2c3d4e5f60012", "nn-0a1b2c3d4e5f60121"],
    "f4": ["nn-0a1b2c3d4e5f60001", "nn-0a1b2c3d4e5f60012", "nn-0a1b2c3d4e5f60122"],
    "f5": ["nn-0a1b2c3d4e5f60002", "nn-0a1b2c3d4e5f60021", "nn-0a1b2c3d4e5f60211"],
    "f6": [],
}


def answers(paths: dict[str, list[str]]) -> tuple[dict[str, str], dict[str, dict]]:
    ids = {node: f"i-{n:017x}" for n, node in enumerate(sorted(paths))}
    return ids, {
        ids[n]: {"InstanceId": ids[n], "InstanceType": "p5.48xlarge", "NetworkNodes": p} for n, p in paths.items()
    }


def generated(plugin: str, paths: dict[str, list[str]], extra_flat: tuple[str, ...] = ()) -> str:
    """topology.conf as the refresh writes it for these answers."""
    ids, ans = answers(paths)
    placed, flat = topology.placement(ids, ans)
    flat.update(dict.fromkeys(extra_flat, "no boot marker"))
    return topology.render(plugin, placed, flat, {n: ans[i] for n, i in ids.items()})


def _sysroots() -> list:
    return [pytest.param(None, id="host-22.05"), pytest.param("trixie", id="trixie-24.11")]


@pytest.fixture(params=_sysroots())
def cluster(request, tmp_path):
    lane = request.param
    with _root(lane, tmp_path) as sysroot:
        if sysroot is None:
            c = SlurmTestCluster(SlurmLayout(tmp_path / "slurm"))
        else:
            inner = Path(tempfile.mkdtemp(prefix="topology-", dir=sysroot / "tmp"))
            c = SlurmTestCluster(SlurmLayout(Path("/") / inner.relative_to(sysroot)), sysroot=sysroot)
        c.series = "22.05" if lane is None else "24.11"
        try:
            yield c
        finally:
            c.run("scancel", "--user=root", check=False)
            c.stop()


def _root(lane, tmp_path):
    if lane is None:
        import contextlib

        return contextlib.nullcontext(None)
    if shutil.which("debootstrap") is None:
        pytest.skip("debootstrap missing: cannot build the trixie lane's root")
    return lane_sysroot(lane, tmp_path / "sysroot")


def start(c: SlurmTestCluster, topology_conf: str, with_slurmd: bool = False, plugin: str = "tree") -> None:
    spec = host_profile_spec()
    files = sc.render_slurm_files(
        "topo", "train", spec, cgroup_plugin=host_cgroup_plugin(), topology="tree", switches_wait_minutes=15
    )
    conf = fill_placeholders(
        files[node_layout.SLURM_CONF_TEMPLATE],
        {"CONTROLLER_HOST": host_short_name(), "CONTROLLER_ADDR": "127.0.0.1", "MAX_NODES": 16},
    )
    conf = conf.replace("PartitionName=", f"{FAKE}\n{POWER_SAVE}PartitionName=", 1)
    conf = conf.replace("TopologyPlugin=topology/tree", f"TopologyPlugin=topology/{plugin}")
    c.write_configs(
        {
            "slurm.conf": localize_slurm_conf(conf, c.layout, ctld_port=free_port(), slurmd_port=free_port()),
            "cgroup.conf": files["/etc/slurm/cgroup.conf"],
            "gres.conf": files["/etc/slurm/gres.conf"],
            "plugstack.conf": localize_plugstack_conf(files[node_layout.PLUGSTACK_CONF], c.layout),
            "topology.conf": topology_conf,
        }
    )
    c.start_munged()
    c.start_slurmctld()
    if with_slurmd:
        c.start_slurmd(fill_placeholders(sc.slurmd_conf_arg(spec), {"NODE_ADDR": "127.0.0.1", "NODE_BLOCK": "a"}))
        c.wait_node_state(host_short_name())


def show_topology(c: SlurmTestCluster) -> dict[str, dict[str, str]]:
    out = c.run("scontrol", "show", "topology").stdout
    return {f["SwitchName"]: f for f in map(parse_node_line, out.splitlines()) if "SwitchName" in f}


def hosts(c: SlurmTestCluster, expr: str) -> list[str]:
    """A Slurm host list (`f[1-2]`, `f1,f2`) as names."""
    if not expr or expr in ("(null)", "None"):
        return []
    return c.run("scontrol", "show", "hostnames", expr).stdout.split()


def submit(c: SlurmTestCluster, *args: str) -> str:
    r = c.run("sbatch", "--parsable", "--exclusive", "-o", "/dev/null", *args, "--wrap", "sleep 600")
    return r.stdout.strip().split(";")[0]


def job(c: SlurmTestCluster, job_id: str) -> dict[str, str]:
    return parse_node_line(c.run("scontrol", "-o", "show", "job", job_id).stdout)


def nodes_of(c: SlurmTestCluster, job_id: str) -> list[str]:
    """The job's nodes once the scheduler allocated them."""
    expr = wait_for(
        lambda: (j := job(c, job_id)).get("NodeList") not in (None, "", "(null)") and j["NodeList"],
        30,
        f"job {job_id} to be allocated",
    )
    return hosts(c, expr)


def evaluated_pending(c: SlurmTestCluster, job_id: str) -> dict[str, str]:
    """The job after the scheduler has looked at it, still pending."""
    return wait_for(
        lambda: (j := job(c, job_id)).get("LastSchedEval", "Unknown") != "Unknown" and j,
        30,
        f"the scheduler to evaluate job {job_id}",
    )


def reconfigure(c: SlurmTestCluster) -> None:
    """`scontrol reconfigure` as the refresh runs it. The answer may time out on a loaded
    host while slurmctld still re-reads its files (22.05 answers after the reconfigure),
    so the tests look at what slurmctld shows afterwards, not at scontrol's status."""
    r = c.run("scontrol", "reconfigure", check=False, timeout=90)
    if r.returncode != 0:
        print(f"\n{c.series}: scontrol reconfigure said {r.returncode}: {r.stderr.strip()}")


def refresh_with_flat(c: SlurmTestCluster, paths: dict[str, list[str]], host: str) -> None:
    """A refresh that places `host` (a node that registered since) in the flat leaf beside
    the nodes of `paths`: the new topology.conf, the reconfigure, and the leaf in
    `scontrol show topology`."""
    c.write_configs({"topology.conf": generated("tree", paths, extra_flat=(host,))})
    reconfigure(c)
    wait_for(
        lambda: host in hosts(c, show_topology(c).get("gpu-cluster-flat", {}).get("Nodes", "")),
        60,
        f"{host} in the flat leaf",
    )


def test_tree_placement_switch_wait_and_a_refresh(cluster):
    c = cluster
    start(c, generated("tree", ANSWER))
    topo = show_topology(c)
    assert {name: (sw["Level"], hosts(c, sw.get("Nodes", ""))) for name, sw in topo.items()} == {
        "nn-0a1b2c3d4e5f60111": ("0", ["f1", "f2"]),
        "nn-0a1b2c3d4e5f60121": ("0", ["f3"]),
        "nn-0a1b2c3d4e5f60122": ("0", ["f4"]),
        "nn-0a1b2c3d4e5f60211": ("0", ["f5"]),
        "gpu-cluster-flat": ("0", ["f6"]),
        "nn-0a1b2c3d4e5f60011": ("1", ["f1", "f2"]),
        "nn-0a1b2c3d4e5f60012": ("1", ["f3", "f4"]),
        "nn-0a1b2c3d4e5f60021": ("1", ["f5"]),
        "nn-0a1b2c3d4e5f60001": ("2", ["f1", "f2", "f3", "f4"]),
        "nn-0a1b2c3d4e5f60002": ("2", ["f5"]),
        # the synthetic root over the two tops and the flat leaf reaches every node
        "gpu-cluster-root": ("3", ["f1", "f2", "f3", "f4", "f5", "f6"]),
    }

    # Only f1+f2 share a leaf: a 2-node job goes there, not to the first two free nodes.
    a = submit(c, "-N2")
    assert nodes_of(c, a) == ["f1", "f2"]
    # Free: f3, f4 (two leaves of one middle node), f5, f6. --switches=1 waits.
    b = submit(c, "-N2", "--switches=1@10:00")
    pending = evaluated_pending(c, b)
    assert pending["JobState"] == "PENDING" and pending["Switches"] == "1@00:10:00", pending
    # A job without the constraint takes two of them at once: the wait was the switch count.
    d = submit(c, "-N2")
    spread = nodes_of(c, d)
    assert len(spread) == 2 and set(spread) <= {"f3", "f4", "f5", "f6"}
    assert job(c, b)["JobState"] == "PENDING"

    # A refresh after a replacement: f5's successor sits under f6's new leaf with f5.
    moved = dict(ANSWER, f6=ANSWER["f5"])
    c.write_configs({"topology.conf": generated("tree", moved)})
    c.run("scancel", d)
    reconfigure(c)
    wait_for(
        lambda: hosts(c, show_topology(c).get("nn-0a1b2c3d4e5f60211", {}).get("Nodes", "")) == ["f5", "f6"],
        30,
        "the new topology in scontrol show topology",
    )
    assert "gpu-cluster-flat" not in show_topology(c)
    # The allocated job kept its nodes; the waiting one now finds a leaf with two free nodes.
    assert hosts(c, job(c, a)["NodeList"]) == ["f1", "f2"] and job(c, a)["JobState"] in ("CONFIGURING", "RUNNING")
    assert nodes_of(c, b) == ["f5", "f6"]


def test_a_node_registered_after_the_last_refresh_is_scheduled_from_the_next(cluster):
    """A dynamic node that registers after topology.conf was read is under no switch; Slurm
    takes no job for it until the refresh (reconfigure) puts it in a leaf or the flat one."""
    c = cluster
    two = {n: ANSWER[n] for n in ("f1", "f2")}
    start(c, generated("tree", two), with_slurmd=True)
    host = host_short_name()
    assert all(host not in hosts(c, sw.get("Nodes", "")) for sw in show_topology(c).values())
    # Slurm refuses the job outright: the node is under no switch (22.05: "Requested node
    # configuration is not available", 24.11: "Requested topology configuration is not
    # available"). The join gate's job names its newcomers, so it refreshes first.
    r = c.run(
        "sbatch", "--parsable", "--exclusive", "-o", "/dev/null", "-N1", "-w", host, "--wrap", "true", check=False
    )
    assert r.returncode != 0 and "configuration is not available" in r.stderr, r.stdout + r.stderr
    print(f"\n{c.series}: a job naming a node outside topology.conf: {r.stderr.strip()}")
    refresh_with_flat(c, two, host)
    if c.series == "22.05":
        # 22.05 builds the switch tree without dynamic nodes even after the reconfigure that
        # lists one (fixed in 23.02.2): still refused. So the refresh writes no switch on
        # Slurm before 23.02.2 (nodeside/topology.py DYNAMIC_TOPOLOGY_SINCE).
        r = c.run("sbatch", "--exclusive", "-o", "/dev/null", "-N1", "-w", host, "--wrap", "true", check=False)
        assert r.returncode != 0 and "configuration is not available" in r.stderr, r.stdout + r.stderr
        return
    j = submit(c, "-N1", "-w", host, "--time=5")
    assert nodes_of(c, j) == [host]
    wait_for(lambda: job(c, j)["JobState"] == "RUNNING", 30, f"job {j} to run on {host}")


@pytest.mark.parametrize("cluster", ["trixie"], indirect=True, ids=["trixie-24.11"])
def test_block_is_read_and_places_a_job_in_one_block(cluster):
    """topology/block (23.11+; not in 22.05) from the same renderer: one block per
    UltraServer domain (CapacityBlockId), else per leaf."""
    c = cluster
    ids, ans = answers({n: ANSWER["f1"] if n in ("f1", "f2", "f3", "f4") else ANSWER["f5"] for n in ANSWER})
    for n in ("f3", "f4"):
        ans[ids[n]]["CapacityBlockId"] = "cr-0a1b2c3d4e5f60001"
    placed, flat = topology.placement(ids, ans)
    text = topology.render("block", placed, flat, {n: ans[i] for n, i in ids.items()})
    start(c, text, plugin="block")
    out = c.run("scontrol", "show", "topology").stdout
    blocks = {
        f["BlockName"]: hosts(c, f.get("Nodes", "")) for f in map(parse_node_line, out.splitlines()) if "BlockName" in f
    }
    assert blocks == {
        "cr-0a1b2c3d4e5f60001": ["f3", "f4"],
        "nn-0a1b2c3d4e5f60111": ["f1", "f2"],
        "nn-0a1b2c3d4e5f60211": ["f5", "f6"],
    }, out
    a = submit(c, "-N2")
    assert nodes_of(c, a) in (["f1", "f2"], ["f3", "f4"], ["f5", "f6"])


def test_a_job_across_a_reconfigure_frees_its_dynamic_node_on_24_11_and_not_on_22_05(cluster):
    """Why the refresh never reconfigures Slurm before 23.02.2 (nodeside/topology.py). On 22.05
    a dynamic node that runs a job across `scontrol reconfigure` stays ALLOCATED once the job
    ended, with no job and nothing allocated (resuming it, or restarting slurmctld, brings the
    state back: measured). A CI lane's hand-off waited its 300 s for such a node: the
    topology agent's first refresh ran during that node's PMIx check job. 24.11 frees the
    node, as 23.11.4 (the nodes' Slurm) did in the same run on the slurm2311 lane's root."""
    c = cluster
    start(c, generated("tree", {}), with_slurmd=True)
    node = host_short_name()
    if c.series != "22.05":  # as the refresh places a node that registered (flat here)
        refresh_with_flat(c, {n: ANSWER[n] for n in ("f1", "f2")}, node)
    srun = subprocess.Popen(
        c._argv(["srun", "-N1", "-n1", "-w", node, "--time=2", "sleep", "5"]),
        env=c.env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        wait_for(
            lambda: srun.poll() is not None or c.run("squeue", "-h", "-t", "R", "-o", "%i").stdout.strip(),
            30,
            "the job to run",
        )
        assert srun.poll() is None, srun.communicate()[1]
        reconfigure(c)
        _, err = srun.communicate(timeout=60)
    finally:
        if srun.poll() is None:
            srun.kill()
    assert srun.returncode == 0, err
    wait_for(lambda: not c.run("squeue", "-h", "-o", "%i").stdout.strip(), 30, "the job to leave the queue")

    def node_fields() -> dict[str, str]:
        return parse_node_line(c.run("scontrol", "-o", "show", "node", node).stdout)

    if c.series == "22.05":
        fields = node_fields()
        assert (fields["State"].split("+")[0], fields["CPUAlloc"]) == ("ALLOCATED", "0"), fields
    else:
        wait_for(lambda: node_fields()["State"].split("+")[0] == "IDLE", 30, f"{node} to be idle again")
