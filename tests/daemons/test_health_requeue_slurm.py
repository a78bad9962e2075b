"""The health program and requeue against a real slurmctld and slurmd (Debian's Slurm).

- slurmctld accepts the rendered HealthCheck lines and slurmd runs the program itself;
  the program drains its node with the check and the evidence, resumes its own drain when
  healthy again, and leaves an operator's drain alone (tools faked: tests/support/health_node.py,
  Slurm's own sinfo/scontrol real);
- a batch job submitted with --requeue is requeued by `scontrol requeue` (JobRequeue=1
  rendered explicitly), runs again with SLURM_RESTART_COUNT=1, and gpu-cluster-run hands it
  the checkpoint the first run wrote (TaskPlugin=task/cgroup,task/affinity as rendered).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from model.health import HealthConfig
from tests.support.health_node import HEALTH, make_node
from tests.support.slurm_harness import (
    SlurmLayout,
    host_short_name,
    missing_prerequisites,
    parse_node_line,
    start_host_cluster,
    wait_for,
)
from userdata import slurm_conf as sc

_why = missing_prerequisites()
pytestmark = [pytest.mark.slurm, pytest.mark.skipif(_why is not None, reason=_why or "")]
LAUNCHER = Path(__file__).resolve().parents[2] / "nodeside" / "run.py"


def _health_lines(program: Path):
    """The rendered HealthCheck lines, with the program path pointed at this test's wrapper."""

    def edit(conf: str) -> str:
        assert "HealthCheckProgram" not in conf
        lines = [f"{k}={v}" for k, v in sc.health_settings(HealthConfig(interval_seconds=30))]
        lines[0] = f"HealthCheckProgram={program}"
        return conf + "\n".join(lines) + "\n"

    return edit


def _node(c) -> dict[str, str]:
    out = c.run("scontrol", "-o", "show", "node", host_short_name()).stdout
    fields = parse_node_line(out)
    reason = out.split("Reason=", 1)[1] if "Reason=" in out else ""
    fields["Reason"] = reason.rsplit(" [", 1)[0].strip()
    return fields


@pytest.fixture
def health_cluster(tmp_path):
    node = make_node(tmp_path / "node")
    for real in ("sinfo", "scontrol"):  # Slurm's own clients answer here
        (node.root / "bin" / real).unlink()
    layout = SlurmLayout(tmp_path / "slurm")
    wrapper = tmp_path / "health-wrapper"
    env = {**node.env, "SLURM_CONF": str(layout.conf), "PATH": f"{node.root / 'bin'}:/usr/bin:/bin"}
    del env["SLURMD_NODENAME"]  # under slurmd: its own name for the node (or the hostname)
    wrapper.write_text(
        "#!/bin/sh\n"
        + "".join(f"export {k}='{v}'\n" for k, v in env.items())
        + f'exec {sys.executable} {HEALTH} "$@" >/dev/null\n'
    )
    wrapper.chmod(0o755)
    node.env = {**env, "SLURMD_NODENAME": host_short_name()}
    c = start_host_cluster(layout, "health", conf_edit=_health_lines(wrapper))
    yield c, node
    c.stop()
    node.stop()


def test_slurmd_runs_it_and_it_drains_and_resumes_its_own(health_cluster):
    c, node = health_cluster
    me = host_short_name()
    assert "HealthCheckProgram" in c.run("scontrol", "show", "config").stdout
    record = node.records / f"{me}.json"
    wait_for(record.exists, 45, "slurmd to run the health program (HealthCheckInterval=30)")

    node.set("gpus", "7")
    out = node.run()
    assert out["slurm"]["action"] == "drain" and out["slurm"]["ok"], out
    got = _node(c)
    assert "DRAIN" in got["State"]
    assert got["Reason"] == "gpu-cluster health: gpu count 7 of 8 (nvidia-smi -L)"

    node.set("gpus", "8")
    assert node.run()["slurm"]["action"] == "resume"
    wait_for(lambda: "DRAIN" not in _node(c)["State"], 10, "the node to be resumed")

    c.run("scontrol", "update", f"nodename={me}", "state=drain", "reason=maintenance by alice")
    assert node.run()["slurm"]["action"] == "none"
    got = _node(c)
    assert "DRAIN" in got["State"] and got["Reason"] == "maintenance by alice"


def test_requeued_job_resumes_from_the_first_runs_checkpoint(tmp_path):
    layout = SlurmLayout(tmp_path / "slurm")
    c = start_host_cluster(layout, "requeue")
    try:
        assert "JobRequeue              = 1" in c.run("scontrol", "show", "config").stdout
        ckpt, log = tmp_path / "ckpt", tmp_path / "runs.log"
        ckpt.mkdir()
        train = (
            f'echo "restart=$GPU_CLUSTER_RESTART_COUNT ckpt=$GPU_CLUSTER_CHECKPOINT args=$*" >> {log}; '
            f'if [ -z "$GPU_CLUSTER_CHECKPOINT" ]; then mkdir -p {ckpt}/step-1 && touch {ckpt}/step-1/.complete; '
            "exec sleep 300; fi"
        )
        job = tmp_path / "job.sbatch"
        job.write_text(
            "#!/bin/bash\n#SBATCH --requeue\n#SBATCH --partition=train\n#SBATCH --time=10\n"
            f"#SBATCH --output={tmp_path}/slurm-%j.out\n"
            f"srun {sys.executable} {LAUNCHER} --checkpoint-dir {ckpt} --resume-flag=--resume -- "
            f"bash -c '{train}' train\n"
        )
        job_id = c.run("sbatch", "--parsable", str(job)).stdout.strip().split(";")[0]
        wait_for((ckpt / "step-1" / ".complete").exists, 60, "the first run to write its checkpoint")
        c.run("scontrol", "requeue", job_id)

        def state() -> str:
            fields = parse_node_line(c.run("scontrol", "-o", "show", "job", job_id).stdout)
            if fields.get("JobState") == "PENDING" and fields.get("Reason") == "BeginTime":
                # Slurm holds a requeued job back briefly; the test does not wait that out.
                c.run("scontrol", "update", f"jobid={job_id}", "StartTime=now", check=False)
            return fields.get("JobState", "") if fields.get("JobState") in ("COMPLETED", "FAILED") else ""

        assert wait_for(state, 120, f"job {job_id} to run again and finish") == "COMPLETED"
        runs = log.read_text().splitlines()
        assert runs == [
            "restart=0 ckpt= args=",
            f"restart=1 ckpt={ckpt}/step-1 args=--resume {ckpt}/step-1",
        ], (tmp_path / f"slurm-{job_id}.out").read_text()
    finally:
        c.run("scancel", "--user=root", check=False)
        c.stop()
