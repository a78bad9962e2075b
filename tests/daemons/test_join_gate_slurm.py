"""The join gate against a real slurmctld: a node that registers into a running cluster
is drained from its first moment, gated (the gate's work stubbed by a job that records
a pass or a fail through validation_report.py) and resumed only when it passes."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.support.block_end import COMMON, LIB
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
    wait_for,
)
from userdata import layout as node_layout
from userdata import slurm_conf as sc

_why = missing_prerequisites()
pytestmark = [pytest.mark.slurm, pytest.mark.skipif(_why is not None, reason=_why or "")]
REPORT = Path(__file__).resolve().parents[2] / "nodeside/validation_report.py"

# The gate's work, stubbed: the pmix check reads a log that says pass or fail, then the
# real report is built (join verdict, drain reason, latest-join).
STUB_JOB = """#!/usr/bin/env bash
#SBATCH --output={fsx}/validation/slurm-%j.out
set -euo pipefail
rep() {{ python3 {report} --config {config} --run "$run" "$@"; }}
run={fsx}/validation/$(date -u +%Y%m%dT%H%M%SZ)-$SLURM_JOB_ID
rep start --nodes "$VALIDATION_NEWCOMERS" --newcomers "$VALIDATION_NEWCOMERS" --partner "$VALIDATION_PARTNER"
printf '%b' "{pmix_log}" >"$run/pmix.log"
rep check --step pmix --nodes "$VALIDATION_NEWCOMERS" --log "$run/pmix.log" || true
rep build --drain || true
"""


@pytest.fixture
def cluster(tmp_path):
    layout = SlurmLayout(tmp_path / "slurm")
    spec = host_profile_spec()
    files = sc.render_slurm_files("joingate", "train", spec, cgroup_plugin=host_cgroup_plugin())
    conf = fill_placeholders(
        files[node_layout.SLURM_CONF_TEMPLATE],
        {"CONTROLLER_HOST": host_short_name(), "CONTROLLER_ADDR": "127.0.0.1", "MAX_NODES": 8},
    )
    c = SlurmTestCluster(layout)
    c.write_configs(
        {
            "slurm.conf": localize_slurm_conf(conf, layout, ctld_port=free_port(), slurmd_port=free_port()),
            "cgroup.conf": files["/etc/slurm/cgroup.conf"],
            "gres.conf": files["/etc/slurm/gres.conf"],
            "plugstack.conf": localize_plugstack_conf(files[node_layout.PLUGSTACK_CONF], layout),
        }
    )
    c.start_munged()
    c.start_slurmctld()
    yield c, spec
    c.run("scancel", "--user=root", check=False)
    c.stop()


def _agent(c: SlurmTestCluster, tmp_path: Path, script: str, now: int) -> str:
    """join-gate.sh functions as the controller's agent loop runs them (clock passed in)."""
    home = tmp_path / "home"
    env = {
        **c.env,
        "PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
        "FSX_ROOT": str(tmp_path / "fsx"),
        "GPU_CLUSTER_HOME": str(home),
        "GPU_CLUSTER_STATE": str(tmp_path / "state"),
        "SLURM_PARTITION": "train",
        "VALIDATION_ENABLED": "1",
        "VALIDATION_JOB": str(home / "validation" / "first-boot.sbatch"),
        "VALIDATION_JOIN_TIMEOUT_MINUTES": "5",
        "JOIN_SETTLE": "0",
        "JOIN_GATE_INTERVAL": "0",
        "JOIN_GATE_NOW": str(now),
        "GC_STEP": "agent",
    }
    full = f'set -euo pipefail; . "{COMMON}"; . "{LIB / "join-gate.sh"}"; {script}'
    r = subprocess.run(["bash", "-c", full], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


def _node(c: SlurmTestCluster) -> tuple[str, str]:
    out = c.run("sinfo", "-h", "-N", "-n", host_short_name(), "-o", "%T|%E").stdout.splitlines()[0]
    state, reason = out.split("|", 1)
    return state, reason


def _setup(tmp_path: Path, mpi: str) -> None:
    fsx, home = tmp_path / "fsx", tmp_path / "home"
    (fsx / "validation").mkdir(parents=True)
    (home / "validation").mkdir(parents=True)
    (home / "lib").mkdir()
    (home / "lib" / "validation_report.py").symlink_to(REPORT)
    (home / "lib" / "verdict.py").symlink_to(REPORT.parent / "verdict.py")
    config = home / "validation" / "config.json"
    config.write_text(
        json.dumps(
            {"fsx_root": str(fsx), "cluster_name": "joingate", "instance_type": "local", "gpus": 0, "thresholds": {}}
        )
    )
    # What the gate's pmix step logs (gate.sh run_step): nothing on success; on failure
    # Slurm's own error and the exit status line run_step appends.
    pmix_log = (
        ""
        if mpi == "pmix"
        else ("srun: error: MPI: Unable to load any plugin\\ngate: command exit status 1 (124: killed after 60s)\\n")
    )
    job = STUB_JOB.format(fsx=fsx, report=home / "lib" / "validation_report.py", config=config, pmix_log=pmix_log)
    (home / "validation" / "first-boot.sbatch").write_text(job)
    (tmp_path / "state").mkdir()


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
