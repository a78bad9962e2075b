"""No job crosses a Capacity Block's end: the parts that need root or a real slurmctld (the fast part is tests/nodeside/test_block_end.py)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import threading
import time
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.support.block_end import BLOCK_END, _iso, _sh, block_end_tick, publish_block_end, reservation_fields
from tests.support.boot_sandbox import IDENTITY, Sandbox, _identity_boot, _Imds, needs_root
from tests.support.slurm_harness import (
    SlurmLayout,
    SlurmTestCluster,
    host_short_name,
    missing_prerequisites,
    start_host_cluster,
    wait_for,
)

CR = "cr-0123456789abcdef0"
_why = missing_prerequisites()


needs_slurm = pytest.mark.skipif(_why is not None, reason=_why or "")


@pytest.fixture
def imds():
    """The metadata stand-in of the boot tests (IMDSv2 token, 404 for an absent tag)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Imds)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()


@pytest.fixture
def box(tmp_path: Path) -> Sandbox:
    b = Sandbox(tmp_path)
    shutil.copy(BLOCK_END, b.home / "lib" / "block-end.sh")
    return b


def _identity(box: Sandbox, imds: str, monkeypatch, **tags: str | None) -> subprocess.CompletedProcess:
    data = dict(IDENTITY)
    for key, value in tags.items():
        path = f"/latest/meta-data/tags/instance/{key}"
        if value is None:
            data.pop(path, None)
        else:
            data[path] = value
    monkeypatch.setattr(_Imds, "DATA", data)
    return _identity_boot(box, imds)


@needs_root
@pytest.mark.parametrize(
    "block,tag,expected",
    [
        ("a", "2026-12-08T12:30:00+01:00", "2026-12-08T11:30:00Z"),
        ("a", None, ""),
        ("on-demand", "2026-12-08T11:30:00Z", ""),
    ],
)
def test_identity_records_the_block_end(box, imds, monkeypatch, block, tag, expected):
    r = _identity(box, imds, monkeypatch, GpuClusterBlock=block, GpuClusterBlockEnd=tag)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"NODE_BLOCK_END='{expected}'" in (box.state / "identity.env").read_text().splitlines()


@needs_root
def test_identity_refuses_a_block_end_that_is_not_a_time(box, imds, monkeypatch):
    r = _identity(box, imds, monkeypatch, GpuClusterBlockEnd="next Tuesday")
    assert r.returncode == 1
    assert box.status()["reason"].startswith(
        "GpuClusterBlockEnd tag 'next Tuesday' is not an ISO-8601 time with a zone, e.g. 2026-12-08T11:30:00Z (see "
    )


@pytest.fixture
def cluster(tmp_path):
    layout = SlurmLayout(tmp_path / "slurm")

    def fast_timeout(conf: str) -> str:
        # A silent node is marked not responding within seconds instead of minutes.
        assert "\nSlurmdTimeout=300\n" in conf
        return conf.replace("\nSlurmdTimeout=300\n", "\nSlurmdTimeout=10\n")

    c = start_host_cluster(layout, "blockend", conf_edit=fast_timeout)
    yield c
    c.run("scancel", "--user=root", check=False)
    c.stop()


_tick, _publish, _reservation = block_end_tick, publish_block_end, reservation_fields


def _slurm_epoch(cluster: SlurmTestCluster, value: str) -> int:
    """A time `cluster.run("scontrol", ...)` printed (its local time; the hook ran in another zone)."""
    return int(
        subprocess.run(["date", "-d", value, "+%s"], env=cluster.env, capture_output=True, text=True, check=True).stdout
    )


def _sbatch(cluster: SlurmTestCluster, *args: str) -> str:
    return cluster.run("sbatch", "--parsable", "--output=/dev/null", *args, "--wrap", "sleep 600").stdout.strip()


def _job(cluster: SlurmTestCluster, job: str) -> tuple[str, str]:
    out = cluster.run("squeue", "-h", "-j", job, "-o", "%T|%r").stdout.strip()
    state, reason = out.split("|", 1)
    return state, reason


def _node(cluster: SlurmTestCluster, node: str) -> tuple[str, str]:
    out = cluster.run("sinfo", "-h", "-N", "-n", node, "-o", "%T|%E").stdout.splitlines()[0]
    state, reason = out.split("|", 1)
    return state, reason


def _dead_node(cluster: SlurmTestCluster, name: str, features: str, addr: str, reason: str) -> None:
    """A dynamic node whose instance is gone (an address nothing answers on)."""
    cluster.run(
        "scontrol", "create", f"nodename={name}", f"NodeAddr={addr}", "CPUs=1", f"Features={features}", "State=FUTURE"
    )
    cluster.run("scontrol", "update", f"nodename={name}", "state=down", "reason=Not responding")
    if reason != "Not responding":
        cluster.run("scontrol", "update", f"nodename={name}", "state=drain", f"reason={reason}")


@pytest.mark.slurm
@needs_slurm
def test_reservation_lets_a_fitting_job_run_and_keeps_a_crossing_one_waiting(cluster, tmp_path):
    me, fsx_root = host_short_name(), tmp_path / "fsx"
    now = int(time.time())
    end = now + 31 * 60 + 4 * 60  # window starts in 4 minutes
    start = end - 31 * 60
    _publish(fsx_root, "a", end)

    said = _tick(cluster, fsx_root, "31")
    assert len(said) == 1 and re.fullmatch(
        rf"created reservation block-a-end on {me} from {_iso(start)} to {_iso(end)} "
        rf"\(capacity block a ends {_iso(end)}, margin 31 min\)",
        said[0],
    ), said
    res = _reservation(cluster, "block-a-end")
    assert set(res["Flags"].split(",")) == {"MAINT", "IGNORE_JOBS", "SPEC_NODES"}
    assert (res["Nodes"], res["Users"], res["State"]) == (me, "root", "INACTIVE")
    assert (_slurm_epoch(cluster, res["StartTime"]), _slurm_epoch(cluster, res["EndTime"])) == (start, end)
    assert _tick(cluster, fsx_root, "31") == []  # idempotent
    # Drained by us for an earlier end, still alive: the block was extended.
    earlier = end - 3600
    cluster.run(
        "scontrol",
        "update",
        f"nodename={me}",
        "state=drain",
        f"reason=capacity block a ends {_iso(earlier)} (EC2 terminates at {_iso(earlier - 1800)})",
    )
    assert _tick(cluster, fsx_root, "31") == [f"resumed {me}: capacity block a now ends {_iso(end)}"]
    # (Slurm flags a resumed node "not responding" until its next ping.)
    wait_for(lambda: _node(cluster, me) == ("idle", "none"), 30, f"{me} to be idle again", interval=1)

    fits = _sbatch(cluster, "--time=2")  # ends before the window starts
    crosses = _sbatch(cluster, "--time=10")  # would still run at end - margin
    unlimited = _sbatch(cluster)  # partition MaxTime=INFINITE: crosses any end
    wait_for(lambda: _job(cluster, fits)[0] == "RUNNING", 20, "the fitting job to start")
    for job in (crosses, unlimited):
        state, reason = wait_for(
            lambda j=job: (s := _job(cluster, j))[1].startswith("ReqNodeNotAvail") and s,
            20,
            f"job {job} to be held back by the reservation",
        )
        assert state == "PENDING", (job, state, reason)
    assert _node(cluster, me)[1] == "none"  # not drained before the window

    # A node joining the block goes into the reservation; a margin change moves the window.
    _dead_node(cluster, "ip-10-0-0-99", "block-a,local-test", "192.0.2.1", "Not responding")
    said = _tick(cluster, fsx_root, "32")
    want = ",".join(sorted([me, "ip-10-0-0-99"]))
    assert said == [
        f"reservation block-a-end: nodes {me} -> {want}",
        f"reservation block-a-end: window moved to {_iso(end - 32 * 60)} .. {_iso(end)}",
    ]
    res = _reservation(cluster, "block-a-end")
    assert _slurm_epoch(cluster, res["StartTime"]) == end - 32 * 60
    assert sorted(cluster.run("scontrol", "show", "hostnames", res["Nodes"]).stdout.split()) == want.split(",")

    # Control: without the reservation the crossing job starts at once.
    assert _job(cluster, crosses)[0] == "PENDING"
    cluster.run("scontrol", "delete", "reservation=block-a-end")
    wait_for(lambda: _job(cluster, crosses)[0] == "RUNNING", 20, "the crossing job to start without the reservation")


@pytest.mark.slurm
@needs_slurm
def test_window_started_drains_the_block_and_spares_running_jobs(cluster, tmp_path):
    me, fsx_root = host_short_name(), tmp_path / "fsx"
    running = _sbatch(cluster, "--time=60")  # started before anyone knew: crosses the end
    wait_for(lambda: _job(cluster, running)[0] == "RUNNING", 20, "the long job to start")
    end = int(time.time()) + 29 * 60  # end - 30 min has passed
    _publish(fsx_root, "a", end)
    reason = f"capacity block a ends {_iso(end)} (EC2 terminates at {_iso(end - 30 * 60)})"

    said = _tick(cluster, fsx_root, "31")
    assert len(said) == 2, said
    assert re.fullmatch(rf"created reservation block-a-end on {me} from \S+ to {_iso(end)} .*", said[0]), said
    assert said[1] == f"drained {me}: {reason}"
    # IGNORE_JOBS: created over the running job, which keeps running (EC2, not Slurm, ends it).
    res = _reservation(cluster, "block-a-end")
    assert res["State"] == "ACTIVE" and abs(_slurm_epoch(cluster, res["StartTime"]) - (end - 30 * 60)) <= 65
    assert _node(cluster, me) == ("draining", reason)
    assert cluster.run("scontrol", "-o", "show", "node", me).stdout.split("Reason=", 1)[1].startswith(reason)
    assert _job(cluster, running)[0] == "RUNNING"
    late = _sbatch(cluster, "--time=1")
    time.sleep(3)
    assert _job(cluster, late)[0] == "PENDING"
    assert _tick(cluster, fsx_root, "31") == []  # idempotent: no second drain, no new reservation


@pytest.mark.slurm
@needs_slurm
def test_after_the_end_the_blocks_silent_nodes_are_deleted(cluster, tmp_path):
    me, fsx_root = host_short_name(), tmp_path / "fsx"
    past = int(time.time()) - 60
    _publish(fsx_root, "a", past)
    old = f"capacity block a ends {_iso(past)} (EC2 terminates at {_iso(past - 30 * 60)})"
    # Terminated at the end of block a: drained by us, then silent.
    _dead_node(cluster, "ip-10-0-0-97", "block-a", "192.0.2.7", old)
    # Left to the stale-node reaper (its own grace period): down for another reason.
    _dead_node(cluster, "ip-10-0-0-96", "block-a", "192.0.2.6", "Not responding")
    # Silent, drained for a later end (a later block under the same name).
    later = past + 7 * 86400
    _dead_node(
        cluster,
        "ip-10-0-0-95",
        "block-a",
        "192.0.2.5",
        f"capacity block a ends {_iso(later)} (EC2 terminates at {_iso(later - 30 * 60)})",
    )
    # Another block's silent node with a's reason text is not a's.
    _dead_node(cluster, "ip-10-0-0-94", "block-c", "192.0.2.4", old)
    # A node that still responds is never deleted, whatever its reason says.
    cluster.run("scontrol", "update", f"nodename={me}", "state=drain", f"reason={old}")
    silent = {"ip-10-0-0-97", "ip-10-0-0-96", "ip-10-0-0-95", "ip-10-0-0-94"}

    def all_silent() -> bool:
        out = cluster.run("sinfo", "-h", "-N", "-o", "%N|%T").stdout.split()
        return {ln.split("|")[0] for ln in out if ln.endswith("*")} == silent

    wait_for(all_silent, 60, "slurmctld to mark the gone nodes as not responding", interval=1)
    assert _tick(cluster, fsx_root, "31") == ["capacity block a is over: deleted its terminated nodes ip-10-0-0-97"]
    nodes = set(cluster.run("sinfo", "-h", "-N", "-o", "%N").stdout.split())
    assert nodes == {me} | silent - {"ip-10-0-0-97"}
    assert _node(cluster, me) == ("drained", old)
    assert cluster.run("scontrol", "show", "reservation", check=False).stdout.strip() == "No reservations in the system"
    assert _tick(cluster, fsx_root, "31") == []


@pytest.mark.localcluster
def test_local_cluster_nodes_of_a_block_get_the_end_reservation(monkeypatch):
    """Nodes booted from the shipped user data with GpuClusterBlock=a and a
    GpuClusterBlockEnd tag: step 10 reads it, step 50 publishes it on /fsx, the
    controller's agent loop reserves both nodes; a fitting job runs, a crossing one waits."""
    from model import tags as node_tags
    from tests.support.localcluster_probe import _can_run_cluster

    why = _can_run_cluster()
    if why:
        pytest.skip(why)
    from localcluster.cluster import LocalCluster

    # Window start 75 min ahead: the first-boot validation job (60 min limit) still fits.
    end = int(time.time()) + (40 + 75) * 60
    real = node_tags.identity_tags
    monkeypatch.setattr(
        node_tags,
        "identity_tags",
        lambda cluster, role, nodes, block, block_end=None: real(cluster, role, nodes, "a", _iso(end)),
    )
    lines: list[str] = []
    LocalCluster("lcblk", 6, out=lines.append).c.down()
    lc = LocalCluster("lcblk", 6, out=lines.append)
    try:
        lc.up(2, timeout=240)
        nodes = sorted(lc.node_states())
        assert len(nodes) == 2

        def reserved() -> dict[str, str] | None:
            r = lc.ctl("scontrol", "-o", "show", "reservation", "block-a-end")
            return dict(t.split("=", 1) for t in r.stdout.split() if "=" in t) if r.returncode == 0 else None

        # The agent loop passes once a minute; the first pass may come before slurmctld runs.
        res = wait_for(reserved, 150, "the controller to create reservation block-a-end", interval=2)
        assert sorted(lc.ctl("scontrol", "show", "hostnames", res["Nodes"]).stdout.split()) == nodes
        assert set(res["Flags"].split(",")) == {"MAINT", "IGNORE_JOBS", "SPEC_NODES"}
        start = int(lc.ctl("date", "-d", res["StartTime"], "+%s").stdout)
        assert start == end - 40 * 60  # BLOCK_END_MARGIN_MINUTES default
        published = lc.ctl("bash", "-c", '. /etc/gpu-cluster/cluster.env; cat "$FSX_ROOT/blocks/a.end"').stdout
        assert published == _iso(end) + "\n"

        def submit(*args: str) -> str:
            r = lc.ctl("sbatch", "--parsable", "-o", "/dev/null", *args, "--wrap", "sleep 600")
            assert r.returncode == 0, r.stderr
            return r.stdout.strip()

        def job(j: str) -> tuple[str, str]:
            state, _, reason = lc.ctl("squeue", "-h", "-j", j, "-o", "%T|%r").stdout.strip().partition("|")
            return state, reason

        fits, crosses = submit("-N2", "--time=30"), submit("-N1", "--time=120")
        wait_for(lambda: job(fits)[0] == "RUNNING", 120, "the fitting 2-node job to run", interval=1)
        state, reason = wait_for(
            lambda: (s := job(crosses))[1].startswith("ReqNodeNotAvail") and s,
            60,
            "the crossing job to be held back by the reservation",
            interval=1,
        )
        assert state == "PENDING"
        # The agent loop logs to the journal (systemd) or to its log file (direct mode).
        log = lc.ctl(
            "bash",
            "-c",
            "journalctl -u gpu-cluster-munge-responder --no-pager 2>/dev/null; "
            "cat /var/log/gpu-cluster/gpu-cluster-munge-responder.log 2>/dev/null; true",
        ).stdout
        assert f"created reservation block-a-end on {','.join(nodes)} from {_iso(end - 2400)} to {_iso(end)}" in log
        lc.ctl("scancel", fits, crosses)
    except BaseException:
        print("\n".join(lines))
        raise
    finally:
        lc.c.down()


@pytest.mark.slurm
@needs_slurm
def test_an_extension_published_by_the_program_moves_the_started_window_and_resumes(cluster, tmp_path):
    """D3: the block's window has started (nodes drained for the old end); `pulumi up`
    publishes the extended end in the block-ends object; the next tick reads it, replaces
    the reservation by the new window and resumes the node. Nothing is restarted."""
    me, fsx_root = host_short_name(), tmp_path / "fsx"
    old = int(time.time()) + 29 * 60  # the old end: its window (margin 31) has started
    _publish(fsx_root, "a", old)  # what the node's GpuClusterBlockEnd tag said at boot
    old_reason = f"capacity block a ends {_iso(old)} (EC2 terminates at {_iso(old - 30 * 60)})"
    said = _tick(cluster, fsx_root, "31")
    assert said[-1] == f"drained {me}: {old_reason}", said
    assert _reservation(cluster, "block-a-end")["State"] == "ACTIVE"
    assert _node(cluster, me)[1] == old_reason

    new = old + 7 * 86400  # extended by a week, same reservation id
    obj = tmp_path / "ends.json"
    doc = {"format": 1, "cluster": "blockend", "blocks": {"a": {"end": _iso(new), "reservation_id": CR}}}
    obj.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    env = {
        **cluster.env,
        "FSX_ROOT": str(fsx_root),
        "BLOCK_END_MARGIN_MINUTES": "31",
        "GC_STEP": "agent",
        "CLUSTER_NAME": "blockend",
        "BLOCK_ENDS_URI": f"file://{obj}",
    }
    out = _sh("block_end_tick", env=env, tz="Asia/Kolkata").stdout
    said = [re.sub(r"^\S+ \[agent\] ", "", ln) for ln in out.splitlines()]
    assert said == [
        f"reading the published block ends from file://{obj} (1 block(s))",
        f"capacity block a ({CR}) ends {_iso(new)}, not {_iso(old)}: from file://{obj}, written to {fsx_root}/blocks/a.end",
        f"reservation block-a-end: started window replaced by {_iso(new - 31 * 60)} .. {_iso(new)} "
        f"(the block's end moved to {_iso(new)})",
        f"resumed {me}: capacity block a now ends {_iso(new)}",
    ]
    res = _reservation(cluster, "block-a-end")
    assert res["State"] == "INACTIVE"
    assert (_slurm_epoch(cluster, res["StartTime"]), _slurm_epoch(cluster, res["EndTime"])) == (new - 31 * 60, new)
    assert set(res["Flags"].split(",")) == {"MAINT", "IGNORE_JOBS", "SPEC_NODES"} and res["Nodes"] == me
    wait_for(lambda: _node(cluster, me) == ("idle", "none"), 30, f"{me} to be idle again", interval=1)
    # The node takes work again: a job that ends well before the new window runs.
    job = _sbatch(cluster, "--time=10")
    wait_for(lambda: _job(cluster, job)[0] == "RUNNING", 20, "a job on the extended block to start")
    # Idempotent: an agent loop started again reads the object and has nothing to change.
    out = _sh("block_end_tick", env=env, tz="Asia/Kolkata").stdout
    assert [re.sub(r"^\S+ \[agent\] ", "", ln) for ln in out.splitlines()] == said[:1]
