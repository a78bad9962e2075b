"""A node whose boot failed for good shows in Slurm with the reason (issue 9).

Against a real slurmctld and dynamic slurmd (Debian's Slurm): the controller's agent
reads the status markers on /fsx; a failed node Slurm knows is drained with
"boot failed at STEP: reason; log PATH", one it never knew is listed down with that
reason (slurmctld creates nodes only as FUTURE, which sinfo hides); the node's own
next boot undoes both. Before this, such a node was simply missing from sinfo.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.support.slurm_harness import (
    SlurmLayout,
    SlurmTestCluster,
    host_short_name,
    missing_prerequisites,
    start_host_cluster,
    wait_for,
)

_why = missing_prerequisites()
pytestmark = [pytest.mark.slurm, pytest.mark.skipif(_why is not None, reason=_why or "")]

LIB = Path(__file__).resolve().parents[2] / "nodeside/lib/boot-failures.sh"
LOG = "/var/log/gpu-cluster/boot.log"


@pytest.fixture
def cluster(tmp_path):
    layout = SlurmLayout(tmp_path / "slurm")
    c = start_host_cluster(layout, "bootfail")
    yield c
    c.stop()


def _marker(status: Path, node: str, state: str, step: str, reason: str, updated: str = "2026-12-01T07:00:00Z"):
    status.mkdir(parents=True, exist_ok=True)
    (status / f"{node}.json").write_text(
        json.dumps(
            {
                "node": node,
                "instance_id": "i-0" + node[-2:],
                "role": "worker",
                "step": step,
                "state": state,
                "reason": reason,
                "log": LOG,
                "skipped": "",
                "validation_job": "",
                "marker": "",
                "updated": updated,
            }
        )
        + "\n"
    )


def _agent(cluster: SlurmTestCluster, tmp_path: Path, call: str) -> str:
    script = f'set -euo pipefail; . "{LIB}"; {call}'
    r = subprocess.run(["bash", "-c", script], env=cluster.env, capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


def _idle(cluster: SlurmTestCluster, node: str) -> str:
    """Wait until sinfo shows node idle (a resumed node is pinged first: "idle*")."""
    return wait_for(lambda: _sinfo(cluster).get(node, ("", ""))[0] == "idle", 60, f"{node} to be idle")


def _sinfo(cluster: SlurmTestCluster) -> dict[str, tuple[str, str]]:
    out = cluster.run("sinfo", "-h", "-N", "-o", "%N|%T|%E", timeout=60).stdout
    return {n: (s, e) for n, s, e in (line.split("|", 2) for line in out.splitlines())}


def test_failed_boots_show_in_sinfo_with_the_reason_and_clear_on_the_next_boot(cluster, tmp_path):
    me, ghost = host_short_name(), "ip-10-0-0-42"
    status, records = tmp_path / "status", tmp_path / "records"
    # Registered, failed late (e.g. Pyxis); never registered, failed at munge; still
    # retrying; fine. Only the first two are failures.
    _marker(
        status,
        me,
        "failed",
        "70-pyxis",
        f"srun --help does not show --container-image (see {LOG}); gave up after 4 attempts",
    )
    _marker(
        status,
        ghost,
        "failed",
        "40-munge",
        f"timed out after 1800s waiting for the munge key (see {LOG}); gave up after 4 attempts",
    )
    _marker(status, "ip-10-0-0-43", "retrying", "30-fsx", "not mounted; attempt 1 of 4 failed")
    _marker(status, "ip-10-0-0-44", "ok", "95-handoff", "all 9 step(s) ok")
    (status / "ip-10-0-0-45.json").write_text('{"node": "ip-10-0-0-45", "sta')  # half-written

    out = _agent(cluster, tmp_path, f'report_boot_failures "{status}" "{records}"')
    want_me = (
        f"boot failed at 70-pyxis: srun --help does not show --container-image; gave up after 4 attempts; log {LOG}"
    )
    want_ghost = (
        f"boot failed at 40-munge: timed out after 1800s waiting for the munge key; gave up after 4 attempts; log {LOG}"
    )
    assert out.splitlines() == [
        f"listed {ghost} as down (it never registered): {want_ghost}",
        f"drained {me}: {want_me}",
    ]
    nodes = _sinfo(cluster)
    assert set(nodes) == {me, ghost}  # retrying / ok / unreadable markers: not listed
    assert nodes[me][0] in ("drained", "draining") and nodes[me][1] == want_me
    assert nodes[ghost][0].startswith("down") and nodes[ghost][1] == want_ghost
    assert ghost in cluster.run("sinfo", "-h", "-t", "down", "-o", "%N").stdout

    # Once per marker: an operator's resume is not undone by the next pass.
    cluster.run("scontrol", "update", f"nodename={me}", "state=resume")
    assert _agent(cluster, tmp_path, f'report_boot_failures "{status}" "{records}"') == ""
    _idle(cluster, me)
    # A new failure (new marker time) is reported again.
    _marker(status, me, "failed", "95-handoff", f"sbatch failed (see {LOG})", updated="2026-12-01T08:00:00Z")
    out = _agent(cluster, tmp_path, f'report_boot_failures "{status}" "{records}"')
    assert out == f"drained {me}: boot failed at 95-handoff: sbatch failed; log {LOG}\n"

    # The node's marker says ok again (e.g. a step re-run by hand): the agent resumes it, once.
    _marker(status, me, "ok", "95-handoff", "all 1 step(s) ok", updated="2026-12-01T08:10:00Z")
    out = _agent(cluster, tmp_path, f'report_boot_failures "{status}" "{records}"')
    assert out == f"resumed {me} (drained for an earlier failed boot)\n"
    _idle(cluster, me)
    assert _agent(cluster, tmp_path, f'report_boot_failures "{status}" "{records}"') == ""
    _marker(status, me, "failed", "95-handoff", f"sbatch failed (see {LOG})", updated="2026-12-01T08:20:00Z")
    assert _agent(cluster, tmp_path, f'report_boot_failures "{status}" "{records}"').startswith(f"drained {me}")

    # The nodes' next boots (step 50) undo it: resumed, placeholder deleted.
    assert (
        _agent(cluster, tmp_path, f"clear_boot_failure {me}") == f"resumed {me} (drained for an earlier failed boot)\n"
    )
    assert (
        _agent(cluster, tmp_path, f"clear_boot_failure {ghost}")
        == f"deleted the placeholder of {ghost} (listed down for an earlier failed boot)\n"
    )
    _idle(cluster, me)
    assert set(_sinfo(cluster)) == {me}
    # A drain that is not ours stays.
    cluster.run("scontrol", "update", f"nodename={me}", "state=drain", "reason=validation: NO-GO all_reduce")
    assert _agent(cluster, tmp_path, f"clear_boot_failure {me}") == ""
    assert _sinfo(cluster)[me] == ("drained", "validation: NO-GO all_reduce")
