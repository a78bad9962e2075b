"""The controller's stale-node clean-up against a real slurmctld and dynamic slurmd.

A replaced node registers under a new hostname; the entry of the node it replaced must
go once it has been down and not responding past the grace period, and nothing else.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.support.slurm_harness import (
    SlurmLayout,
    SlurmTestCluster,
    host_short_name,
    missing_prerequisites,
    start_host_cluster,
)

_why = missing_prerequisites()
pytestmark = [pytest.mark.slurm, pytest.mark.skipif(_why is not None, reason=_why or "")]

REAPER = Path(__file__).resolve().parents[2] / "nodeside/lib/node-reaper.sh"


def _reap(cluster: SlurmTestCluster, grace: int) -> str:
    script = f'. "{REAPER}"; reap_stale_nodes {grace}'
    return subprocess.run(
        ["bash", "-c", script], env=cluster.env, capture_output=True, text=True, check=True, timeout=30
    ).stdout


def _nodes(cluster: SlurmTestCluster) -> set[str]:
    out = cluster.run("sinfo", "-h", "-N", "-o", "%N").stdout
    return set(out.split())


@pytest.fixture
def cluster(tmp_path):
    layout = SlurmLayout(tmp_path)
    c = start_host_cluster(layout, "reaper")
    yield c
    c.stop()


def test_deletes_only_nodes_down_and_not_responding_past_grace(cluster):
    me = host_short_name()
    # A second dynamic node that is gone (its instance was terminated): created the way
    # slurmd -Z creates it, then marked as slurmctld marks a silent node.
    cluster.run("scontrol", "create", "nodename=ip-10-0-0-99", "NodeAddr=127.0.0.2", "CPUs=1", "State=FUTURE")
    cluster.run("scontrol", "update", "nodename=ip-10-0-0-99", "state=down", "reason=Not responding")
    # A node an operator took down on purpose keeps its entry.
    cluster.run("scontrol", "create", "nodename=ip-10-0-0-98", "NodeAddr=127.0.0.3", "CPUs=1", "State=FUTURE")
    cluster.run("scontrol", "update", "nodename=ip-10-0-0-98", "state=down", "reason=maintenance window")
    assert {me, "ip-10-0-0-99", "ip-10-0-0-98"} <= _nodes(cluster)

    # Within the grace period nothing goes: a rebooting node keeps its entry.
    assert _reap(cluster, 3600) == ""
    assert "ip-10-0-0-99" in _nodes(cluster)

    out = _reap(cluster, 0)
    assert out.startswith("deleted stale node ip-10-0-0-99 (down, not responding since ")
    assert _nodes(cluster) == {me, "ip-10-0-0-98"}
    # Idempotent: a second pass has nothing to do.
    assert _reap(cluster, 0) == ""
