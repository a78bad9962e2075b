"""A controller that outlives blocks, on a faithful lane (GPU_CLUSTER_LIFECYCLE_LANE; machines: systemd + cloud-init).

The stack has `controller.placement: dedicated` (CONTROLLER_DEDICATED=1 in cluster.env):
one controller machine (role controller, on demand) besides block `a`'s two workers,
all booted by cloud-init from the same user data. The tests run in file order on one
cluster:
- the controller runs slurmctld only (no slurmd: it is not a Slurm node), block a's
  workers are the partition and run a job;
- block a ends as EC2 ends it: the block-end pass has drained its nodes (its drain,
  against a real slurmctld, is tests/daemons/test_block_end_daemons.py; here the end tag
  is absent, so the test drains with the same reason), then every machine of the block
  is killed at once, no shutdown; a job submitted between blocks waits (PENDING) while
  `sinfo`/`squeue` keep answering;
- block b's two workers boot and join the SAME controller (same machine, same boot):
  they register drained into the running cluster, the controller's join gate
  (nodeside/lib/join-gate.sh) runs the validation job on them (no healthy partner: every
  node is new) with its container step, resumes them, and the waiting job runs to
  completion on b's nodes.
A poller asks the controller `sinfo` and `squeue` every few seconds from block a's end
until the waiting job is done; every answer must be a success.
"""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path

import pytest

from tests.support.localcluster_probe import faithful_lane_unavailable, lifecycle_lane
from userdata import layout

NAME, SUBNET, WORKERS = "cftest", 8, 2

pytestmark = pytest.mark.faithful


class Poller:
    """`sinfo` and `squeue` on the controller every `every` seconds, in a thread."""

    def __init__(self, lc, every: float = 3.0):
        self.lc, self.every = lc, every
        self.ctl = lc.c.controller()  # resolved once: the node table changes while blocks come and go
        self.answers: list[tuple[float, str, int, str]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            for cmd in (["sinfo", "-h", "-N", "-o", "%N %t"], ["squeue", "-h", "-o", "%i %T %R"]):
                t = time.monotonic()
                try:
                    r = self.lc.c.run(self.ctl, cmd, timeout=30)
                    self.answers.append((t, cmd[0], r.returncode, (r.stdout + r.stderr)[-300:]))
                except Exception as e:  # a hung or refused call is a failed answer, kept as such
                    self.answers.append((t, cmd[0], -1, repr(e)))
            self._stop.wait(self.every)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=60)


@pytest.fixture(scope="module")
def cluster():
    why = faithful_lane_unavailable()
    if why:
        pytest.skip(why)
    from localcluster.cluster import LocalCluster

    lines: list[str] = []
    LocalCluster(NAME, SUBNET, out=lines.append).c.down()  # leftovers of an aborted run
    lc = LocalCluster(NAME, SUBNET, out=lines.append, lane=lifecycle_lane(), placement="dedicated")
    t0 = time.monotonic()
    try:
        lc.up(WORKERS, timeout=600, block="a")
        # The controller submits the first-boot gate once block a's nodes are idle; the
        # cluster is ready when it is done (its container step holds both nodes).
        assert lc.validation_job(timeout=420) is not None, "first-boot validation job did not finish"
        lc.poller = Poller(lc)
        yield lc
    except BaseException:
        print("\n".join(lines))
        raise
    finally:
        if getattr(lc, "poller", None) is not None:
            lc.poller.stop()
        print(f"\ncontroller lane: {time.monotonic() - t0:.0f}s from bring-up to the last test's end")
        lc.c.down()
        assert not lc.c.root.exists(), f"{lc.c.root} left behind"


def _read(p: Path) -> str:
    return p.read_text(errors="replace") if p.exists() else ""


def _boot_log(node) -> str:
    return _read(node.upper("/var/log/gpu-cluster/boot.log"))


def _wait(check, timeout: float, interval: float = 1.0):
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got or time.monotonic() > deadline:
            return got
        time.sleep(interval)


def _block(lc, block: str) -> list[str]:
    return sorted(h for h, n in lc.c.nodes.items() if n.block == block and n.role == "worker")


def _job(lc, job: str) -> str:
    return lc.ctl("scontrol", "show", "job", job).stdout


def _features(lc) -> dict[str, str]:
    out = lc.ctl("sinfo", "-h", "-N", "-o", "%N %f").stdout
    return dict(line.split(" ", 1) for line in out.splitlines() if " " in line)


def _join_history(lc) -> str:
    return _read(lc.validation_dir() / "join" / "history")


def test_the_dedicated_controller_runs_slurmctld_only_and_block_a_runs_a_job(cluster):
    ctl = cluster.c.controller()
    a = _block(cluster, "a")
    assert len(a) == WORKERS and ctl.block == "on-demand", {h: n.block for h, n in cluster.c.nodes.items()}
    assert all(w.rc == 0 for w in cluster.watches.values()), {h: w.rc for h, w in cluster.watches.items()}
    log = _boot_log(ctl)
    assert "runs slurmctld at" in log and "(dedicated controller)" in log, log[-3000:]
    # cloud-init ran our user data with CONTROLLER_DEDICATED=1 from cluster.env
    assert "CONTROLLER_DEDICATED=1" in _read(ctl.upper("/etc/gpu-cluster/cluster.env"))
    st = cluster.machine_state(ctl)
    assert st["units"] == {u: "active" for u in ("munge", "gpu-cluster-munge-responder", "slurmctld")}, st
    assert st["systemd"] == "running", cluster.c.run(ctl, ["systemctl", "--failed"]).stdout
    slurmd = cluster.c.run(ctl, ["systemctl", "is-active", "slurmd"]).stdout.strip()
    enabled = cluster.c.run(ctl, ["systemctl", "is-enabled", "slurmd"]).stdout.strip()
    assert (slurmd, enabled) == ("inactive", "disabled"), (slurmd, enabled)
    # the partition is block a's workers alone, each with its block's feature
    assert cluster.node_states() == {h: "idle" for h in a}, cluster.node_states()
    assert {h: f.split(",")[0] for h, f in _features(cluster).items()} == {h: "block-a" for h in a}
    r = cluster.ctl("srun", f"-N{WORKERS}", "--time=1", "hostname", timeout=120)
    assert r.returncode == 0, r.stderr
    assert sorted(r.stdout.split()) == a


def test_block_a_ends_and_a_job_submitted_between_blocks_waits(cluster):
    a = _block(cluster, "a")
    cluster.poller.start()
    # The block-end pass drains a block's nodes from end - margin (tested on a real
    # slurmctld in test_block_end_daemons.py); these machines carry no end tag, so the
    # test drains them as that pass does, then EC2 terminates them.
    reason = "capacity block a ends (drained as the block-end pass does)"
    r = cluster.ctl("scontrol", "update", f"nodename={','.join(a)}", "state=drain", f"reason={reason}")
    assert r.returncode == 0, r.stderr
    assert cluster.end_block("a") == a
    assert sorted(cluster.c.nodes) == [cluster.c.controller().hostname]
    out = f"{layout.FSX_MOUNTPOINT}/{NAME}-waiting-%j.out"
    r = cluster.ctl("sbatch", "--parsable", f"-N{WORKERS}", "--time=2", "-o", out, "--wrap", "srun hostname | sort")
    assert r.returncode == 0, r.stderr
    job = r.stdout.strip().split(";")[0]
    assert job.isdigit(), r.stdout
    cluster.waiting_job = job
    # It waits, for a minute of agent ticks: never started on a dead block's node.
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        state = cluster.ctl("squeue", "-h", "-j", job, "-o", "%T").stdout.strip()
        assert state == "PENDING", _job(cluster, job)
        time.sleep(5)
    states = cluster.node_states()
    assert set(states) <= set(a), states  # nothing new; the dead nodes only as Slurm last saw them
    assert not [h for h, s in states.items() if s in ("idle", "mix", "alloc")], states


def test_block_b_joins_the_same_controller_through_the_gate_and_the_waiting_job_runs(cluster):
    job = cluster.waiting_job
    ctl = cluster.c.controller()
    leader, instance = ctl.leader(), ctl.instance_id
    ws = cluster.launch_block("b", WORKERS, timeout=600)
    assert all(w.rc == 0 for w in ws), {w.node.hostname: w.rc for w in ws}
    b = _block(cluster, "b")
    assert len(b) == WORKERS
    # the same controller: same machine, same boot (PID 1), no restart of slurmctld
    assert (cluster.c.controller().instance_id, ctl.leader()) == (instance, leader)
    for host in b:
        # step 50 found the gate open: it registered drained (lib/join-gate.sh join_state_arg)
        assert cluster.c.nodes[host].upper(f"{layout.STATE_DIR}/join-drained").exists(), host
    # the join gate: each newcomer passes its bounded run before it takes the job
    passed = _wait(lambda: all(f"join gate: {h} passed" in _join_history(cluster) for h in b), 900, 5)
    assert passed, _join_history(cluster) + "\n" + cluster.ctl("sinfo", "-R").stdout
    history = _join_history(cluster)
    assert re.search(
        rf"join gate: job \d+ on newcomer\(s\) ({'|'.join(b)}),({'|'.join(b)}) against no partner", history
    )
    done = _wait(lambda: "JobState=COMPLETED" in _job(cluster, job), 300, 2)
    show = _job(cluster, job)
    assert done, show
    nodes = re.search(r"\n\s*NodeList=(\S+)", show)
    assert nodes, show
    got = cluster.ctl("scontrol", "show", "hostnames", nodes.group(1)).stdout.split()
    assert sorted(got) == b, show
    assert _read(cluster.c.fsx_dir / f"{NAME}-waiting-{job}.out").split() == b
    assert {h: f.split(",")[0] for h, f in _features(cluster).items() if h in b} == {h: "block-b" for h in b}
    cluster.poller.stop()
    answers = cluster.poller.answers
    failed = [x for x in answers if x[2] != 0]
    assert not failed, failed[:5]
    span = answers[-1][0] - answers[0][0]
    assert {x[1] for x in answers} == {"sinfo", "squeue"} and span > 120, (len(answers), span)
    print(f"\nsinfo/squeue: {len(answers)} answers over {span:.0f}s from block a's end, none failed")
