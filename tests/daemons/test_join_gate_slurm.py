"""The join gate against a real slurmctld: a node that registers into a running cluster
is drained from its first moment, gated (the gate's work stubbed by a job that records
a pass or a fail through validation_report.py) and resumed only when it passes. A run
whose newcomer is gone (its slurmd killed as a terminated instance's would be) ends at
the next tick; the node is then deleted by the reaper, and a later newcomer is gated."""

from __future__ import annotations

import contextlib
import json
import os
import signal
from pathlib import Path

import pytest

from tests.support.join_gate import agent_env, history, make_home, run_agent
from tests.support.node_shell import fill_placeholders
from tests.support.slurm_harness import (
    SlurmLayout,
    SlurmTestCluster,
    host_profile_spec,
    host_short_name,
    missing_prerequisites,
    start_host_controller,
    wait_for,
)
from userdata import slurm_conf as sc

_why = missing_prerequisites()
pytestmark = [pytest.mark.slurm, pytest.mark.skipif(_why is not None, reason=_why or "")]

# The gate's work, stubbed: the pmix check reads a log that says pass or fail, then the
# real report is built (join verdict, drain reason, latest-join).
STUB_JOB = """#!/usr/bin/env bash
#SBATCH --output={fsx}/validation/slurm-%j.out
set -euo pipefail
# hold: the gate's work takes long (the test kills the node meanwhile); the pid lets the
# test end it, since a killed slurmd leaves its job's processes behind.
if [[ -e {fsx}/hold ]]; then sleep 120 & echo $! >{fsx}/hold.pid; wait; fi
rep() {{ python3 {report} --config {config} --run "$run" "$@"; }}
run={fsx}/validation/$(date -u +%Y%m%dT%H%M%SZ)-$SLURM_JOB_ID
rep start --nodes "$VALIDATION_NEWCOMERS" --newcomers "$VALIDATION_NEWCOMERS" --partner "$VALIDATION_PARTNER"
printf '%b' "{pmix_log}" >"$run/pmix.log"
rep check --step pmix --nodes "$VALIDATION_NEWCOMERS" --log "$run/pmix.log" || true
rep build --drain || true
"""


@pytest.fixture
def cluster(tmp_path, request):
    def fast_timeout(conf: str) -> str:
        # A silent slurmd is marked DOWN within seconds instead of SlurmdTimeout's 300 s.
        assert "\nSlurmdTimeout=300\n" in conf
        return conf.replace("\nSlurmdTimeout=300\n", "\nSlurmdTimeout=10\nMessageTimeout=3\n")

    edit = fast_timeout if getattr(request, "param", None) == "fast_timeout" else None
    c = start_host_controller(SlurmLayout(tmp_path / "slurm"), "joingate", conf_edit=edit)
    spec = host_profile_spec()
    yield c, spec
    c.run("scancel", "--user=root", check=False)
    c.stop()
    hold = tmp_path / "fsx" / "hold.pid"
    if hold.exists():
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(hold.read_text()), signal.SIGTERM)


def _agent(c: SlurmTestCluster, tmp_path: Path, script: str, now: int) -> str:
    """join-gate.sh functions as the controller's agent loop runs them (clock passed in)."""
    return run_agent(script, {**c.env, **agent_env(tmp_path, timeout_minutes=5)}, now)


def _node(c: SlurmTestCluster) -> tuple[str, str]:
    out = c.run("sinfo", "-h", "-N", "-n", host_short_name(), "-o", "%T|%E").stdout.splitlines()[0]
    state, reason = out.split("|", 1)
    return state, reason


def _setup(tmp_path: Path, mpi: str) -> None:
    fsx, home = tmp_path / "fsx", make_home(tmp_path)
    config = home / "validation" / "config.json"
    # What the gate's pmix step logs (gate.sh run_step): nothing on success; on failure
    # Slurm's own error and the exit status line run_step appends.
    pmix_log = (
        ""
        if mpi == "pmix"
        else ("srun: error: MPI: Unable to load any plugin\\ngate: command exit status 1 (124: killed after 60s)\\n")
    )
    job = STUB_JOB.format(fsx=fsx, report=home / "lib" / "validation_report.py", config=config, pmix_log=pmix_log)
    (home / "validation" / "first-boot.sbatch").write_text(job)


@pytest.mark.parametrize("passes", [True, False])
def test_a_newcomer_is_drained_gated_and_resumed_only_when_it_passes(cluster, tmp_path, passes):
    c, spec = cluster
    _setup(tmp_path, "pmix" if passes else "none")
    # the controller handed the cluster to its first-boot gate: later nodes are newcomers
    _agent(c, tmp_path, "join_gate_open", 1000)
    state_arg = _agent(c, tmp_path, "join_state_arg", 1000).strip()
    assert state_arg == "State=DRAIN"
    line = fill_placeholders(sc.slurmd_conf_arg(spec), {"NODE_ADDR": "127.0.0.1", "NODE_BLOCK": "b"})
    c.start_slurmd(f"{line} {state_arg}")
    fields = c.wait_node_state(host_short_name(), states=("IDLE",))
    # drained from its first appearance: no moment in which a job could start on it
    assert "DRAIN" in fields["State"], fields
    user_job = c.run("sbatch", "--parsable", "-p", "train", "--output=/dev/null", "--wrap", "true").stdout.strip()
    out = _agent(c, tmp_path, "join_gate_tick", 1000)
    assert "newcomer(s) " + host_short_name() + " drained" in out
    assert _node(c) == ("drained", "gpu-cluster join gate: pending (registered into a running cluster)")
    out = _agent(c, tmp_path, "join_gate_tick", 1001)
    assert "against no partner (every node is new), bound 5 min" in out, out
    job = json.dumps(c.run("squeue", "-h", "-o", "%i %j %T").stdout)
    gate_job = (tmp_path / "fsx/validation/join/run.env").read_text().split("JOIN_JOB='")[1].split("'")[0]

    def gate_done():
        return not c.run("squeue", "-h", "-j", gate_job, check=False).stdout.strip()

    wait_for(gate_done, 60, f"the join gate job {gate_job} to end ({job})")
    out = _agent(c, tmp_path, "join_gate_tick", 1010)
    assert not c.run("scontrol", "show", "reservation", check=False).stdout.count("gpu-cluster-join-")
    history = (tmp_path / "fsx/validation/join/history").read_text()
    if passes:
        assert f"{host_short_name()} passed (job {gate_job}); it takes jobs" in history
        wait_for(lambda: _node(c)[0] in ("idle", "allocated", "mixed"), 20, "the node to take jobs")
        wait_for(
            lambda: not c.run("squeue", "-h", "-j", user_job, check=False).stdout.strip(), 30, "the user job to run"
        )
    else:
        state, reason = _node(c)
        assert state == "drained"
        assert reason.startswith("gpu-cluster join gate: pmix NO-GO on " + host_short_name()), reason
        assert "; log " in reason and reason.endswith("pmix.log")
        assert c.run("squeue", "-h", "-j", user_job, "-o", "%T").stdout.strip() == "PENDING"


def _register(c: SlurmTestCluster, spec, tmp_path: Path) -> None:
    """This host's slurmd joins the running cluster as a newcomer would (State=DRAIN)."""
    state_arg = _agent(c, tmp_path, "join_state_arg", 1000).strip()
    assert state_arg == "State=DRAIN"
    line = fill_placeholders(sc.slurmd_conf_arg(spec), {"NODE_ADDR": "127.0.0.1", "NODE_BLOCK": "b"})
    c.start_slurmd(f"{line} {state_arg}")
    c.wait_node_state(host_short_name(), states=("IDLE",))


@pytest.mark.parametrize("cluster", ["fast_timeout"], indirect=True)
def test_a_newcomer_gone_mid_run_ends_the_run_at_the_next_tick_and_a_later_one_is_gated(cluster, tmp_path):
    c, spec = cluster
    me = host_short_name()
    _setup(tmp_path, "pmix")
    fsx = tmp_path / "fsx"
    (fsx / "hold").touch()
    _agent(c, tmp_path, "join_gate_open", 1000)
    _register(c, spec, tmp_path)
    _agent(c, tmp_path, "join_gate_tick", 1000)
    _agent(c, tmp_path, "join_gate_tick", 1001)
    run = (fsx / "validation/join/run.env").read_text()
    job, resv = (run.split(f"{k}='")[1].split("'")[0] for k in ("JOIN_JOB", "JOIN_RESV"))
    wait_for(lambda: (fsx / "hold.pid").exists(), 30, f"the join gate job {job} to start")

    # The instance is terminated: its slurmd dies without a word; slurmctld marks the
    # node DOWN after SlurmdTimeout.
    c.procs["slurmd"].kill()
    c.procs["slurmd"].wait()
    wait_for(lambda: "State=DOWN" in c.run("scontrol", "-o", "show", "node", me).stdout, 60, f"{me} to go DOWN")
    # The reaper cannot delete a reserved node: this is what held the run before.
    assert f"could not delete stale node {me}" in _agent(c, tmp_path, 'reap_stale_nodes 0 "$JOIN_PENDING_PREFIX"', 1010)
    # One tick (a minute before the run's 5-minute bound) ends the run.
    _agent(c, tmp_path, "join_gate_tick", 1030)
    assert history(tmp_path)[-1] == (
        f"join gate: {me} is gone (down: Not responding); run {resv} ended, job {job} cancelled; drained, so it "
        "is gated again if it answers"
    )
    assert not (fsx / "validation/join/run.env").exists()
    assert resv not in c.run("scontrol", "show", "reservation", check=False).stdout
    assert not c.run("squeue", "-h", "-j", job, check=False).stdout.strip()
    assert _node(c) == ("drained*", "gpu-cluster join gate: pending (down during its join run: Not responding)")
    # Unreserved, the silent node goes (grace 0 here; NODE_REAP_GRACE on a cluster).
    out = _agent(c, tmp_path, 'reap_stale_nodes 0 "$JOIN_PENDING_PREFIX"', 1040)
    assert out.startswith(f"deleted stale node {me} (down, not responding since ")
    assert me not in c.run("sinfo", "-h", "-N", "-o", "%N").stdout.split()

    # A later newcomer (this host's slurmd registering anew) gets its own run and passes.
    (fsx / "hold").unlink()
    _register(c, spec, tmp_path)
    assert _node(c) == ("drained", "none")
    _agent(c, tmp_path, "join_gate_tick", 1100)
    _agent(c, tmp_path, "join_gate_tick", 1101)
    run = (fsx / "validation/join/run.env").read_text()
    job2 = run.split("JOIN_JOB='")[1].split("'")[0]
    assert job2 != job
    wait_for(lambda: not c.run("squeue", "-h", "-j", job2, check=False).stdout.strip(), 60, f"gate job {job2} to end")
    _agent(c, tmp_path, "join_gate_tick", 1110)
    assert history(tmp_path)[-1] == f"join gate: {me} passed (job {job2}); it takes jobs"
    wait_for(lambda: _node(c)[0] == "idle", 20, f"{me} to take jobs")
