"""Continuous health and automatic repair on the faithful lane (bookworm machines).

One 2-node cluster (a colocated controller and one worker, both of block `a`), booted by
cloud-init from the same user data, with the health program on as in every lane
(HealthCheckInterval 30 s, the clock measured by SNTP against the metadata stand-in's
reference). Every node has the lane's stand-in hardware (localcluster/hardware.py: an
nvidia-smi answering for 8 GPUs while Slurm's gres stays empty, 4 EFA devices in a sysfs
tree, its own copy of a kernel log); the Auto Scaling stand-in runs in the controller's
namespace (localcluster/autoscaling.py) and every machine is in its group. Faults go
through what the checks read, on the worker only. The tests run in file order:
1. every node runs the program from slurmd and is healthy by every check it can run;
2. with repair.policy `none` (the controller's overrides.env says so for now): a GPU
   gone drains that worker, and no other node, with the check's evidence, within one
   slurmd HealthCheckInterval; an EFA device gone, /fsx read-only and an XID 79 each
   drain it with their own evidence when the same program runs as slurmd runs it (its
   environment; waiting up to an interval for each would prove nothing more); clearing
   the fault resumes it (the XID after the operator's `gpu-cluster-health --clear-xid`)
   and the next run keeps it in service; nothing calls Auto Scaling;
3. under `auto`: a `--requeue` batch job through gpu-cluster-run runs on that worker, an
   XID 79 drains it (the program run as slurmd runs it), the repair agent requeues the
   job (it resumes from its checkpoint and completes on another node) and terminates the
   instance through its group without decrementing; the lane does what Auto Scaling then
   does (kills the machine, launches a new one into block a), the new node registers
   drained, passes the join gate against a healthy partner and takes a job;
4. the same fault on that successor within the repeat window isolates it: no second
   termination, and the next health run leaves the isolation alone.
Two nodes are all the scenario needs: the controller's node holds the others' place (the
requeued job's second run, the join gate's healthy partner). Lane knobs (controller
overrides.env): REPAIR_INTERVAL=5, DCGM_IDLE_INTERVAL=5, the join gate's JOIN_WAITS
(tests/support/lane_clusters.py: one newcomer, no batch to wait for); the stack's repair
section: job_grace_minutes 0. The lane has no dcgmi: the deep DCGM runs on idle nodes skip every
node with that reason (their own tests: tests/nodeside/test_dcgm_idle.py).
"""

from __future__ import annotations

import calendar
import json
import re
import time
from pathlib import Path

import pytest

from localcluster import hardware
from localcluster.profile import LANE_HEALTH
from nodeside import dcgm_idle
from tests.support.lane_clusters import JOIN_WAITS
from tests.support.localcluster_probe import JOIN_GATE_WAIT, faithful_lane_unavailable, wait_joined
from userdata import layout

NAME, SUBNET, NODES = "hrtest", 9, 2
INTERVAL = LANE_HEALTH["interval_seconds"]
# A drain shows within one interval of the fault: the run (about a second here) and
# the test's own poll (0.5 s) besides.
WITHIN = INTERVAL + 8
KIT = hardware.Kit()
FAULTS = hardware.faults(KIT)
CONTROLLER_SWAPS = {"REPAIR_POLICY": "none", "REPAIR_INTERVAL": "5", "DCGM_IDLE_INTERVAL": "5", **JOIN_WAITS}

pytestmark = pytest.mark.faithful


@pytest.fixture(scope="module")
def cluster():
    why = faithful_lane_unavailable()
    if why:
        pytest.skip(why)
    from localcluster.cluster import LocalCluster

    lines: list[str] = []
    LocalCluster(NAME, SUBNET, out=lines.append).c.down()  # leftovers of an aborted run
    lc = LocalCluster(
        NAME,
        SUBNET,
        out=lines.append,
        lane="bookworm",
        settings={"repair": {"policy": "auto", "job_grace_minutes": 0}},
        kit=KIT,
        swaps={"controller": CONTROLLER_SWAPS},
        autoscaling=True,
    )
    t0 = time.monotonic()
    try:
        lc.up(NODES, timeout=600, block="a")
        assert lc.validation_job(timeout=420) is not None, "first-boot validation job did not finish"
        lc.figures = {}
        yield lc
    except BaseException:
        print("\n".join(lines))
        raise
    finally:
        print(f"\nhealth/repair lane: {time.monotonic() - t0:.0f}s from bring-up to the last test's end")
        for k, v in getattr(lc, "figures", {}).items():
            print(f"  {k}: {v:.1f}s")
        lc.c.down()
        assert not lc.c.root.exists(), f"{lc.c.root} left behind"


# ---- helpers ----------------------------------------------------------------------------


def _read(p: Path) -> str:
    return p.read_text(errors="replace") if p.exists() else ""


def _state_dir(lc) -> Path:
    return lc.c.fsx_dir / ".gpu-cluster" / NAME


def _wait(check, timeout: float, interval: float = 0.5):
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got or time.monotonic() > deadline:
            return got
        time.sleep(interval)


def _nodes(lc) -> dict[str, tuple[str, str]]:
    return lc.node_reasons()


def _workers(lc) -> list[str]:
    return sorted(h for h, n in lc.c.nodes.items() if n.role == "worker")


def _record(lc, node: str) -> dict:
    try:
        return json.loads(_read(_state_dir(lc) / "health" / f"{node}.json"))
    except ValueError:
        return {}


def _in_node(lc, host: str, script: str) -> None:
    lc.in_node(host, script)


def _health_run(lc, host: str, fails: bool) -> dict:
    """One run of the health program on `host` as slurmd starts it (its HealthCheckProgram,
    a near-empty environment with SLURMD_NODENAME): the record it prints, also when a
    read-only /fsx keeps it from writing one. Exit 1 when a check failed, else 0."""
    r = lc.c.run(lc.c.nodes[host], ["env", "-i", f"SLURMD_NODENAME={host}", layout.HEALTH_PROGRAM], timeout=60)
    assert r.returncode == (1 if fails else 0), (r.returncode, r.stderr[-500:], r.stdout[-2000:])
    return json.loads(r.stdout)


def _drained_for(lc, host: str, pattern: str, since: float) -> float:
    """Seconds from `since` until sinfo shows `host` drained with a reason matching `pattern`."""
    rx = re.compile(pattern)
    got = _wait(
        lambda: "drain" in _nodes(lc).get(host, ("", ""))[0] and rx.search(_nodes(lc)[host][1]), WITHIN + 30, 0.5
    )
    assert got, f"{host} not drained for {pattern!r}: {_nodes(lc)}; record {_record(lc, host)}"
    return time.monotonic() - since


def _history(lc) -> list[dict]:
    text = _read(_state_dir(lc) / "repair" / "history.jsonl")
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def _standin(lc) -> Path:
    return lc.c.root / "autoscaling"


def _aws_requests(lc) -> list[dict]:
    text = _read(_standin(lc) / "requests.jsonl")
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def _job(lc, job: str) -> dict[str, str]:
    out = lc.ctl("scontrol", "-o", "show", "job", job).stdout
    return dict(re.findall(r"(\w+)=(\S*)", out))


# ---- 1. healthy ---------------------------------------------------------------------------


def test_every_node_runs_the_health_program_and_is_healthy(cluster):
    booted = time.time()
    hosts = sorted(cluster.c.nodes)
    assert len(hosts) == NODES and len(_workers(cluster)) == NODES - 1

    def fresh() -> bool:
        recs = [_record(cluster, h) for h in hosts]
        return all(r.get("slurm", {}).get("action") == "none" and r.get("state") for r in recs) and all(
            calendar.timegm(time.strptime(r["time"], "%Y-%m-%dT%H:%M:%SZ")) >= booted - 1 for r in recs
        )

    assert _wait(fresh, WITHIN + 5), {h: _record(cluster, h) for h in hosts}
    for host in hosts:
        rec = _record(cluster, host)
        checks = {c["check"]: (c["status"], c["detail"]) for c in rec["checks"]}
        assert rec["state"] == "healthy", rec
        assert checks["gpu-count"] == ("ok", "8 GPUs")
        assert checks["efa"] == ("ok", "4 EFA devices, every port ACTIVE")
        assert checks["xid"] == ("ok", f"no hardware XID ({hardware.KERNEL_LOG})")
        assert checks["ecc"][0] == "ok" and checks["fsx"][0] == "ok", checks
        assert checks["munge"][0] == "ok" and checks["slurmd"][0] == "ok", checks
        # the clock by SNTP against the metadata stand-in's reference, as on EC2 against 169.254.169.123
        assert checks["clock"][0] == "ok" and "of 127.0.0.1:1123 (SNTP, stratum 10)" in checks["clock"][1]
        # what the lane does not stand in is skipped with the reason, never failed
        assert checks["dcgm"] == ("skip", "dcgmi not installed")
        assert checks["pcie"][0] == "skip" and checks["nvme"][0] == "skip", checks
        assert rec["seconds"] < 5, rec["seconds"]
    assert {h: s for h, (s, _) in _nodes(cluster).items()} == {h: "idle" for h in hosts}
    # the deep DCGM runs on idle nodes: none here, said once per node from its health record
    dcgm = _state_dir(cluster) / "dcgm" / "history.jsonl"

    def skipped():
        return sorted(json.loads(line)["node"] for line in _read(dcgm).splitlines() if '"skip"' in line)

    assert _wait(lambda: skipped() == hosts, 30), _read(dcgm)
    # what the runs read to tell how long a node has been idle: Slurm's LastBusyTime, parsed
    shown = cluster.ctl("scontrol", "-o", "show", "node").stdout
    busy = dict(re.findall(r"NodeName=(\S+) .*?LastBusyTime=(\S+)", shown))
    assert sorted(busy) == hosts and all(dcgm_idle._slurm_time(t) for t in busy.values()), busy
    assert {json.loads(line)["detail"] for line in _read(dcgm).splitlines()} == {
        "dcgmi not installed (its health record); no deep diagnostic"
    }


# ---- 2. each fault drains its node, `none` only drains -------------------------------------


def test_each_fault_drains_only_its_node_with_its_evidence_and_none_only_drains(cluster):
    target = _workers(cluster)[0]
    others = sorted(set(cluster.c.nodes) - {target})

    def only_target_drained():
        rows = _nodes(cluster)
        assert {h: rows[h][0] for h in others} == {h: "idle" for h in others}, rows

    # end to end, from slurmd: a fault drains its node within one HealthCheckInterval
    first = FAULTS["gpu-count"]
    _in_node(cluster, target, first.inject)
    t0 = time.monotonic()
    took = _drained_for(cluster, target, rf"^gpu-cluster health: {first.evidence}$", t0)
    assert took <= WITHIN, f"gpu-count: drained after {took:.1f}s, more than one interval ({INTERVAL}s)"
    cluster.figures["fault to drain (gpu-count, policy none, slurmd's interval)"] = took
    failed = [c for c in _record(cluster, target)["checks"] if c["status"] == "fail"]
    assert [(c["check"], c["action"]) for c in failed] == [(first.check, first.action)], failed
    only_target_drained()
    # the other classes through the same program, run as slurmd runs it: each run sees
    # exactly one fault (the previous one goes as this one comes) and drains with its evidence
    previous = first
    for name in ("efa", "fsx", "xid"):
        fault = FAULTS[name]
        _in_node(cluster, target, f"{previous.clear}; {fault.inject}")
        rec = _health_run(cluster, target, fails=True)
        failed = [c for c in rec["checks"] if c["status"] == "fail"]
        assert [(c["check"], c["action"]) for c in failed] == [(fault.check, fault.action)], rec
        assert re.fullmatch(rf"gpu-cluster health: {fault.evidence}", rec["reason"]), rec
        acted = rec["slurm"]  # slurmd's own run may have come first
        assert acted.get("ok") or acted.get("why") == "already drained for this reason", acted
        _drained_for(cluster, target, rf"^gpu-cluster health: {fault.evidence}$", time.monotonic())
        only_target_drained()
        previous = fault
    # the operator clears the kept XID after a repair; that run resumes its own drain
    _in_node(cluster, target, FAULTS["xid"].clear)
    assert _wait(lambda: _nodes(cluster)[target] == ("idle", ""), 5), _nodes(cluster)
    # and the next run keeps it in service (the XID it forgot is not seen again)
    rec = _health_run(cluster, target, fails=False)
    assert rec["state"] == "healthy" and rec["slurm"]["action"] == "none", rec
    assert _record(cluster, target)["state"] == "healthy" and _nodes(cluster)[target] == ("idle", "")
    # policy none: the repair agent never ran, nothing called Auto Scaling
    assert _aws_requests(cluster) == [] and _history(cluster) == []


# ---- 3. auto: requeue, replace through the group, the gate, jobs ----------------------------

TRAIN = """import os, pathlib, socket, sys, time
ckpt = pathlib.Path(sys.argv[1])
resume = sys.argv[sys.argv.index("--resume") + 1] if "--resume" in sys.argv else ""
host = socket.gethostname()
print(f"run {os.environ['GPU_CLUSTER_RESTART_COUNT']} on {host} from '{resume}'", flush=True)
if not resume:
    (ckpt / "step-100").mkdir(parents=True)
    (ckpt / "step-100" / "weights").write_text("100")
    (ckpt / "step-100" / ".complete").touch()
    while True:  # trains on until its node fails under it
        time.sleep(1)
step = int((pathlib.Path(resume) / "weights").read_text())
print(f"resumed at step {step}; finished at step {step + 100} on {host}", flush=True)
"""


def _switch_to_auto(lc) -> None:
    """The controller's agent loop with the stack's policy (auto): the lane's `none` line
    goes from its overrides.env and the loop restarts, as a new controller would boot."""
    ctl = lc.c.controller()
    _in_node(lc, ctl.hostname, f"sed -i '/^REPAIR_POLICY=/d' {layout.OVERRIDES_ENV}")
    r = lc.c.run(ctl, ["systemctl", "restart", "gpu-cluster-munge-responder"], timeout=60)
    assert r.returncode == 0, r.stderr


def _submit_on(lc, target: str) -> str:
    """The training job, on `target`: the other nodes are held by a job of their own until it runs."""
    fsx = layout.FSX_MOUNTPOINT
    (lc.c.fsx_dir / f"{NAME}-train.py").write_text(TRAIN)
    (lc.c.fsx_dir / f"{NAME}-train.sbatch").write_text(
        "#!/bin/bash\n#SBATCH --requeue\n#SBATCH -N1\n#SBATCH --time=10\n"
        f"#SBATCH --output={fsx}/{NAME}-train-%j.out\n#SBATCH --open-mode=append\n"
        f"srun {layout.BIN}/gpu-cluster-run --checkpoint-dir {fsx}/{NAME}-ckpt --resume-flag=--resume -- "
        f"python3 {fsx}/{NAME}-train.py {fsx}/{NAME}-ckpt\n"
    )
    others = ",".join(sorted(set(lc.c.nodes) - {target}))
    hold = lc.ctl(
        "sbatch", "--parsable", "--exclusive", f"-N{NODES - 1}", "-w", others, "-o", "/dev/null", "--wrap", "sleep 600"
    )
    assert hold.returncode == 0, hold.stderr
    holder = hold.stdout.strip().split(";")[0]
    assert _wait(lambda: _job(lc, holder).get("JobState") == "RUNNING", 60), _job(lc, holder)
    r = lc.ctl("sbatch", "--parsable", f"{fsx}/{NAME}-train.sbatch")
    assert r.returncode == 0, r.stderr
    job = r.stdout.strip().split(";")[0]
    assert _wait(lambda: (lc.c.fsx_dir / f"{NAME}-ckpt" / "step-100" / ".complete").exists(), 120), _job(lc, job)
    assert _job(lc, job)["NodeList"] == target, _job(lc, job)
    lc.ctl("scancel", holder)
    return job


def test_under_auto_the_node_is_replaced_the_job_requeued_and_the_replacement_takes_jobs(cluster):
    target = _workers(cluster)[0]
    old = cluster.c.nodes[target]
    _switch_to_auto(cluster)
    job = _submit_on(cluster, target)

    _in_node(cluster, target, FAULTS["xid"].inject)
    t_fault = time.monotonic()
    _health_run(cluster, target, fails=True)  # the drain within an interval: test 2's, from slurmd
    _drained_for(cluster, target, rf"^gpu-cluster health: {FAULTS['xid'].evidence}$", t_fault)
    t_drain = time.monotonic()

    # the agent requeues the job (job grace 0) and terminates the instance through its group
    def terminated():
        return [r for r in _aws_requests(cluster) if r.get("action") == "TerminateInstanceInAutoScalingGroup"]

    assert _wait(terminated, 120, 1), (_history(cluster), _nodes(cluster))
    t_terminate = time.monotonic()
    [call] = terminated()
    assert call["params"] == {"InstanceId": old.instance_id, "ShouldDecrementDesiredCapacity": False}, call
    assert call["status"] == 200 and not [r for r in _aws_requests(cluster) if r.get("refused")]
    actions = [h["action"] for h in _history(cluster) if h["node"] == target]
    # in this order (a pass may also say it waits while the requeued job completes)
    steps = [a for a in actions if a in ("drained", "requeued", "replaced")]
    assert steps[:1] == ["drained"] and steps[-1] == "replaced" and "requeued" in steps, actions
    assert steps.index("requeued") < steps.index("replaced") and steps.count("replaced") == 1, actions
    replaced = re.compile(rf"^gpu-cluster repair: replaced {old.instance_id}: gpu-cluster health: xid 79")
    assert _wait(lambda: replaced.match(_nodes(cluster)[target][1]), 30), _nodes(cluster)

    # what Auto Scaling then does: the instance goes, a new one comes into block a's group
    [(gone, w)] = cluster.follow_terminations()
    assert gone == target and target not in cluster.c.nodes
    new = w.node
    assert (new.block, new.role) == ("a", "worker") and new.instance_id != old.instance_id
    group = json.loads(_read(_standin(cluster) / "groups.json"))[f"gpu-cluster-{NAME}-block-a"]
    assert old.instance_id not in group and new.instance_id in group, group
    cluster.watch([w], timeout=600)
    assert w.rc == 0, cluster.log_tail(new, 30)
    assert new.upper(f"{layout.STATE_DIR}/join-drained").exists()  # registered drained
    wait_joined(_state_dir(cluster), new.hostname, timeout=JOIN_GATE_WAIT)
    assert _wait(lambda: _nodes(cluster).get(new.hostname) == ("idle", ""), 60), _nodes(cluster)
    t_idle = time.monotonic()
    history = _read(_state_dir(cluster) / "validation" / "join" / "history")
    assert re.search(rf"join gate: job \d+ on newcomer\(s\) {new.hostname} against ip-", history), history
    r = cluster.ctl("srun", "-w", new.hostname, "--time=1", "hostname", timeout=120)
    assert (r.returncode, r.stdout.strip()) == (0, new.hostname), r.stderr

    # the job: requeued, held back for the credential lifetime, resumed on another node
    def done():
        return _job(cluster, job).get("JobState") in ("COMPLETED", "FAILED", "CANCELLED")

    assert _wait(done, 300, 2), _job(cluster, job)
    info = _job(cluster, job)
    out = _read(cluster.c.fsx_dir / f"{NAME}-train-{job}.out")
    assert info["JobState"] == "COMPLETED" and info["Restarts"] == "1", info
    runs = [line for line in out.splitlines() if line.startswith(("run ", "resumed "))]
    assert runs[0] == f"run 0 on {target} from ''", out
    second = re.fullmatch(rf"run 1 on (\S+) from '{layout.FSX_MOUNTPOINT}/{NAME}-ckpt/step-100'", runs[1])
    assert second and second.group(1) != target, out
    assert runs[2] == f"resumed at step 100; finished at step 200 on {second.group(1)}", out

    assert _wait(lambda: (new.hostname, "back") in [(h["node"], h["action"]) for h in _history(cluster)], 30)
    succ = [h for h in _history(cluster) if h["action"] == "successor"]
    assert [(h["node"], h["detail"]) for h in succ] == [
        (new.hostname, f"replaces {target} ({old.instance_id}) in block a")
    ], succ
    cluster.successor = new.hostname
    cluster.figures.update(
        {
            "drain to terminate call": t_terminate - t_drain,
            "terminate call to replacement idle (boot + join gate)": t_idle - t_terminate,
            "drain to replacement idle": t_idle - t_drain,
        }
    )


# ---- 4. the limits: a repeat on the successor isolates it ------------------------------------


def test_the_same_fault_on_the_successor_isolates_it_instead_of_replacing_again(cluster):
    succ = cluster.successor
    _in_node(cluster, succ, FAULTS["xid"].inject)
    _health_run(cluster, succ, fails=True)
    _drained_for(cluster, succ, r"xid 79", time.monotonic())
    rx = re.compile(
        r"^gpu-cluster repair: isolated \(failed again within 1440 min of replacing \S+ \(gpu-cluster health: xid 79"
    )
    assert _wait(lambda: rx.search(_nodes(cluster)[succ][1]), 60, 1), _nodes(cluster)
    mine = [h["action"] for h in _history(cluster) if h["node"] == succ]
    assert mine[-2:] == ["drained", "isolated"] and "replaced" not in mine, mine
    # one termination in all, and the health program leaves the isolation alone
    calls = [r for r in _aws_requests(cluster) if r.get("action") == "TerminateInstanceInAutoScalingGroup"]
    assert len(calls) == 1, calls
    rec = _health_run(cluster, succ, fails=True)
    assert (
        rec["slurm"]["action"] == "none" and "by someone else: gpu-cluster repair: isolated" in rec["slurm"]["why"]
    ), rec
    assert rx.search(_nodes(cluster)[succ][1]) and "drain" in _nodes(cluster)[succ][0]
    assert succ in cluster.c.nodes and len(cluster.c.nodes) == NODES
