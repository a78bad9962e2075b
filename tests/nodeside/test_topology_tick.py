"""The controller's topology tick (nodeside/lib/topology.sh) as the agent loop runs it:
when it runs the refresh, how often it retries, and what it logs, with a fake `sinfo`
and a fake refresh program (the clock is bash's SECONDS, set by the test)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from userdata import layout
from userdata.render import boot_files

PROGRAM = """#!/bin/bash
echo "$*" >>"$CALLS"
cat "$ANSWER"
exit "$(cat "$ANSWER_RC" 2>/dev/null || echo 0)"
"""


def run_ticks(tmp_path: Path, script: str) -> tuple[str, list[str]]:
    files = boot_files()
    for name in ("common.sh", "boot-failures.sh", "topology.sh"):
        (tmp_path / name).write_text(files[f"{layout.LIB}/{name}"])
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    # no $NODES file: slurmctld does not answer yet (the loop starts at step 40)
    (bin_dir / "sinfo").write_text(
        '#!/bin/sh\ncat "$NODES" 2>/dev/null || { echo "sinfo: error: Unable to contact slurm controller" >&2; exit 1; }\n'
    )
    # `scontrol show node X`: known when X is listed in $KNOWN
    (bin_dir / "scontrol").write_text('#!/bin/sh\ngrep -qx "$3" "$KNOWN" 2>/dev/null\n')
    (bin_dir / "python").write_text(PROGRAM)
    for f in ("sinfo", "scontrol", "python"):
        (bin_dir / f).chmod(0o755)
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "GPU_CLUSTER_STATE": str(tmp_path),
        "GPU_CLUSTER_RUN": str(tmp_path),
        "GPU_CLUSTER_HOME": str(tmp_path),
        "GPU_CLUSTER_AWS_PYTHON": str(bin_dir / "python"),
        "FSX_ROOT": str(tmp_path / "fsx"),
        "TOPOLOGY_PLUGIN": "tree",
        "TOPOLOGY_RETRY": "60",
        "TOPOLOGY_INTERVAL": "1800",
        "GC_STEP": "munge-responder",
        "NODES": str(tmp_path / "nodes"),
        "CALLS": str(tmp_path / "calls"),
        "KNOWN": str(tmp_path / "known"),
        "ANSWER": str(tmp_path / "answer"),
        "ANSWER_RC": str(tmp_path / "rc"),
    }
    r = subprocess.run(
        ["bash", "-c", f'set -euo pipefail; . {tmp_path}/common.sh; . {tmp_path}/boot-failures.sh; . {tmp_path}/topology.sh\n{script}'],
        capture_output=True, text=True, env=env, check=True,
    )  # fmt: skip
    calls = (tmp_path / "calls").read_text().splitlines() if (tmp_path / "calls").exists() else []
    return r.stdout, calls


def test_refresh_on_a_node_set_change_then_retry_while_flat_then_the_interval(tmp_path):
    (tmp_path / "nodes").write_text("n1\nn2\n")
    (tmp_path / "answer").write_text(
        "topology: n2 stays in the flat layout for now: no network nodes\n"
        "topology: applied /etc/slurm/topology.conf (1 placed, 1 flat); scontrol reconfigure ok\n"
    )
    out, calls = run_ticks(tmp_path, """
SECONDS=1000; topology_tick          # first look: the node set is new
SECONDS=1030; topology_tick          # nothing changed, 30 s later: nothing
SECONDS=1061; topology_tick          # a node is flat within 15 min of the change: retried after 60 s
printf 'topology: applied /etc/slurm/topology.conf (2 placed, 0 flat); scontrol reconfigure ok\\n' >"$ANSWER"
SECONDS=1122; topology_tick          # covered now
SECONDS=1200; topology_tick          # nothing flat: the interval
echo n3 >>"$NODES"
SECONDS=1201; topology_tick          # a node joined: at once
SECONDS=3100; topology_tick          # 30 min later: the periodic refresh
""")  # fmt: skip
    assert len(calls) == 5, out
    assert all(c.endswith("--plugin tree refresh") for c in calls)
    assert out.count("the set of Slurm nodes changed") == 2
    # the same answer twice is logged once
    assert out.count("n2 stays in the flat layout") == 1


def test_a_failing_refresh_is_said_once_and_retried(tmp_path):
    (tmp_path / "nodes").write_text("n1\n")
    (tmp_path / "answer").write_text(
        "topology: ec2:DescribeInstanceTopology: access denied (UnauthorizedOperation): ...\n"
    )
    (tmp_path / "rc").write_text("3")
    out, calls = run_ticks(tmp_path, "SECONDS=10; topology_tick; SECONDS=71; topology_tick; SECONDS=100; topology_tick")
    assert len(calls) == 2  # after 60 s, not at 29 s
    assert out.count("WARNING: topology refresh failed (status 3") == 1, out


def test_topology_current_refreshes_only_when_the_nodes_changed(tmp_path):
    (tmp_path / "nodes").write_text("n1\n")
    (tmp_path / "answer").write_text("topology: unchanged (1 placed, 0 flat)\n")
    _, calls = run_ticks(tmp_path, 'topology_current; topology_current; echo n2 >>"$NODES"; topology_current')
    assert len(calls) == 2


def test_failed_boot_placeholders_start_no_refresh_and_a_dropped_one_is_listed_again(tmp_path):
    """lib/boot-failures.sh lists a node whose boot failed as a down placeholder; slurmctld
    drops a never-registered node at `scontrol reconfigure` (seen on 23.11), so the refresh
    removes the reported record of each placeholder it dropped (the reaper lists it again)
    and a placeholder appearing is not a change of the node set."""
    (tmp_path / "nodes").write_text("n1|none\nn2|none\n")
    (tmp_path / "known").write_text("n1\nn2\nkept\n")
    reported = tmp_path / "fsx/status/reported"
    reported.mkdir(parents=True)
    for node in ("gone", "kept"):
        (reported / node).write_text("2026-12-02T10:00:00Z 40-munge\n")
    (tmp_path / "answer").write_text(
        "topology: applied /etc/slurm/topology.conf (2 placed, 0 flat); scontrol reconfigure ok\n"
    )
    out, calls = run_ticks(tmp_path, """
SECONDS=1000; topology_tick          # the node set is new: a refresh
printf 'gone|boot failed at 40-munge: munged did not start\\nkept|boot failed at 40-munge: x\\n' >>"$NODES"
SECONDS=1030; topology_tick          # placeholders listed: not a change
printf 'n3|none\\n' >>"$NODES"
SECONDS=1031; topology_tick          # a node joined: a refresh, which drops 'gone'
""")  # fmt: skip
    assert len(calls) == 2, out
    assert out.count("the set of Slurm nodes changed") == 2
    assert not (reported / "gone").exists() and (reported / "kept").exists()
    assert "the reconfigure dropped gone's boot-failure listing" in out and "dropped kept" not in out


def test_no_slurmctld_yet_ends_neither_the_tick_nor_the_loop(tmp_path):
    """The agent loop runs under `set -e` from step 40, before step 50 starts slurmctld:
    a tick while sinfo fails returns 0 and refreshes nothing; the first answer starts one."""
    (tmp_path / "answer").write_text(
        "topology: applied /etc/slurm/topology.conf (2 placed, 0 flat); scontrol reconfigure ok\n"
    )
    out, calls = run_ticks(tmp_path, """
SECONDS=1000; topology_current; topology_tick
printf 'n1|none\\nn2|none\\n' >"$NODES"
SECONDS=1002; topology_tick
echo "still here"
""")  # fmt: skip
    assert "still here" in out
    assert out.count("the set of Slurm nodes changed") == 1, out
