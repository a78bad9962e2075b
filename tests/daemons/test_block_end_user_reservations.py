"""Users' own Slurm reservations on a block's nodes coexist with the block-end reservation.

AWS ParallelCluster's Capacity Block handling loops (kills and relaunches nodes) when a
user adds a maintenance reservation on block nodes [PC-7465]. Ours, against a real
slurmctld: with a user's MAINT reservation (a maintenance window) and an ordinary
reservation on the same node, the controller's pass (block_end_tick) still creates
`block-<block>-end`, moves it when the block is extended, and leaves it to Slurm to drop
at the end; the users' reservations come out byte-for-byte as they went in, and repeated
passes change nothing (no loop).
"""

from __future__ import annotations

import time

import pytest

from tests.support.block_end import _iso, block_end_tick, publish_block_end, reservation_fields
from tests.support.slurm_harness import (
    SlurmLayout,
    SlurmTestCluster,
    host_short_name,
    missing_prerequisites,
    start_host_cluster,
    wait_for,
)

_why = missing_prerequisites()
needs_slurm = pytest.mark.skipif(_why is not None, reason=_why or "")
MARGIN = "31"  # AWS: scale in more than 30 minutes before the end [ASG-CB]


@pytest.fixture
def cluster(tmp_path):
    c = start_host_cluster(SlurmLayout(tmp_path / "slurm"), "userresv")
    yield c
    c.stop()


def _slurm_time(cluster: SlurmTestCluster, epoch: int) -> str:
    """EPOCH as scontrol reads it here (the harness's local time)."""
    return cluster.run("date", "-d", f"@{epoch}", "+%Y-%m-%dT%H:%M:%S").stdout.strip()


def _user_reservation(cluster: SlurmTestCluster, name: str, node: str, start: int, end: int, flags: str) -> str:
    """A reservation as an operator makes one; returns its `scontrol -o show` line."""
    args = [f"ReservationName={name}", f"StartTime={_slurm_time(cluster, start)}"]
    args += [f"EndTime={_slurm_time(cluster, end)}", "Users=root", f"Nodes={node}"]
    cluster.run("scontrol", "create", "reservation", *args, *([f"Flags={flags}"] if flags else []))
    return _show(cluster, name)


def _show(cluster: SlurmTestCluster, name: str) -> str:
    return cluster.run("scontrol", "-o", "show", "reservation", name).stdout.strip()


def _names(cluster: SlurmTestCluster) -> list[str]:
    out = cluster.run("scontrol", "-o", "show", "reservation").stdout
    return sorted(tok.split("=", 1)[1] for tok in out.split() if tok.startswith("ReservationName="))


def _slurm_epoch(cluster: SlurmTestCluster, value: str) -> int:
    return int(cluster.run("date", "-d", value, "+%s").stdout)


@pytest.mark.slurm
@needs_slurm
def test_users_reservations_overlapping_the_block_end_window_are_left_alone(cluster, tmp_path):
    me, fsx_root = host_short_name(), tmp_path / "fsx"
    now = int(time.time())
    end = now + 2 * 3600
    start = end - 31 * 60
    # A maintenance window that overlaps the start of ours, and a team's ordinary
    # reservation that overlaps its end; both made before the controller's pass runs.
    theirs = {
        "maint-window": _user_reservation(cluster, "maint-window", me, start - 600, start + 600, "MAINT"),
        "team-x": _user_reservation(cluster, "team-x", me, start + 900, end + 3600, ""),
    }
    publish_block_end(fsx_root, "a", end)

    said = block_end_tick(cluster, fsx_root, MARGIN)
    assert said == [
        f"created reservation block-a-end on {me} from {_iso(start)} to {_iso(end)} "
        f"(capacity block a ends {_iso(end)}, margin 31 min)"
    ]
    ours = reservation_fields(cluster, "block-a-end")
    assert (_slurm_epoch(cluster, ours["StartTime"]), _slurm_epoch(cluster, ours["EndTime"])) == (start, end)
    assert ours["Nodes"] == me
    # No loop: further passes do nothing; one reservation of ours, theirs unchanged.
    for _ in range(3):
        assert block_end_tick(cluster, fsx_root, MARGIN) == []
    assert _names(cluster) == ["block-a-end", "maint-window", "team-x"]
    assert {name: _show(cluster, name) for name in theirs} == theirs

    # The block is extended by a day: ours moves, theirs stay where the users put them.
    later = end + 86400
    publish_block_end(fsx_root, "a", later)
    assert block_end_tick(cluster, fsx_root, MARGIN) == [
        f"reservation block-a-end: window moved to {_iso(later - 31 * 60)} .. {_iso(later)}"
    ]
    assert block_end_tick(cluster, fsx_root, MARGIN) == []
    assert _names(cluster) == ["block-a-end", "maint-window", "team-x"]
    assert {name: _show(cluster, name) for name in theirs} == theirs


@pytest.mark.slurm
@needs_slurm
def test_block_end_inside_a_users_active_maintenance_reservation(cluster, tmp_path):
    """The user's MAINT reservation is active on the node when the window starts: ours is
    still created over it, the node drained with our reason, and when the block ends
    Slurm drops ours while theirs stays; later passes recreate nothing."""
    me, fsx_root = host_short_name(), tmp_path / "fsx"
    now = int(time.time())
    theirs = _user_reservation(cluster, "maint-now", me, now, now + 3 * 3600, "MAINT")
    end = now + 75  # inside the margin already: the window has started
    publish_block_end(fsx_root, "a", end)
    reason = f"capacity block a ends {_iso(end)} (EC2 terminates at {_iso(end - 30 * 60)})"

    said = block_end_tick(cluster, fsx_root, MARGIN)
    assert len(said) == 2 and said[0].startswith(f"created reservation block-a-end on {me} from "), said
    assert said[1] == f"drained {me}: {reason}"
    assert reservation_fields(cluster, "block-a-end")["State"] == "ACTIVE"
    assert block_end_tick(cluster, fsx_root, MARGIN) == []
    assert _names(cluster) == ["block-a-end", "maint-now"]

    # At the end Slurm removes ours (its EndTime); the controller's pass adds nothing back.
    wait_for(lambda: "block-a-end" not in _names(cluster), 120, "Slurm to drop block-a-end at its end", interval=2)
    for _ in range(3):
        assert block_end_tick(cluster, fsx_root, MARGIN) == []
    assert _names(cluster) == ["maint-now"]
    assert _show(cluster, "maint-now") == theirs
