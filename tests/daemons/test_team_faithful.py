"""A cluster a team shares, on the faithful lane (bookworm machines: systemd + cloud-init).

One scenario, one cluster, tests in file order (the lane's cost is the bring-ups, so
everything is checked on the same machines):
- the stack has accounting, two users (alice in `physics`; bob in `vision`, a Slurm
  administrator with default QOS `interactive`), one login node and a dedicated
  controller; the database is a real MariaDB in its own namespace (localcluster/team.py),
  the controller reads its login from a secret file (the lane's documented swap for
  Secrets Manager) and the shipped boot writes slurmdbd.conf, starts slurmdbd and
  registers the cluster, accounts and users with sacctmgr;
- both users submit from the login machine (which runs no slurmd); `sacct` shows both
  users' jobs with their accounts, `sshare` their fair-share rows; a user the stack
  does not list is refused by the association enforcement;
- the controller machine is destroyed and a new one boots from the same user data:
  `sacct` still shows the earlier jobs, and a new job is recorded;
- every machine is destroyed and a new cluster boots against the same /fsx and
  database: `sacct` still shows every earlier job.
"""

from __future__ import annotations

import re
import time

import pytest

from localcluster.team import SECRET_ON_CONTROLLER, USERS
from tests.support.localcluster_probe import faithful_lane_unavailable
from userdata import layout

NAME, SUBNET, WORKERS = "tmtest", 12, 2

pytestmark = pytest.mark.faithful

# What this module proves of a replaced controller and a relaunched cluster is the
# accounting history; the munge key's recovery on the way there (a new controller joins
# through a worker's responder, which answers requests older than MUNGE_WORKER_MIN_AGE,
# 90 s; a relaunched controller waits MUNGE_KEY_RECOVERY_WAIT, 180 s, before it rotates
# the key) is proven at the product's values elsewhere (tests/daemons/test_localcluster.py:
# the replaced controller; tests/daemons/test_lifecycle_faithful.py: the relaunch). Here
# the same bounds, shortened and in the same relation (recovery wait > min age + the
# workers' interval), are overrides.env lines (docs/node-contract.md): about 4 idle
# minutes less.
_WORKER_MUNGE = {"MUNGE_WORKER_MIN_AGE": "10", "MUNGE_WORKER_INTERVAL": "5"}
MUNGE_WAITS = {"controller": {"MUNGE_KEY_RECOVERY_WAIT": "30"}, "worker": _WORKER_MUNGE, "login": _WORKER_MUNGE}


@pytest.fixture(scope="module")
def cluster():
    why = faithful_lane_unavailable()
    if why:
        pytest.skip(why)
    from localcluster.cluster import LocalCluster

    lines: list[str] = []
    LocalCluster(NAME, SUBNET, out=lines.append).c.down()  # leftovers of an aborted run
    lc = LocalCluster(
        NAME, SUBNET, out=lines.append, lane="bookworm", placement="dedicated", team=True, swaps=MUNGE_WAITS
    )
    t0 = time.monotonic()
    try:
        lc.up(WORKERS, timeout=600)
        assert lc.validation_job(timeout=420) is not None, "first-boot validation job did not finish"
        lc.jobs = {}
        yield lc
    except BaseException:
        print("\n".join(lines))
        raise
    finally:
        print(f"\nteam lane: {time.monotonic() - t0:.0f}s from bring-up to the last test's end")
        lc.c.down()
        assert not lc.c.root.exists(), f"{lc.c.root} left behind"


def _login(lc):
    (node,) = [n for n in lc.c.nodes.values() if n.role == "login"]
    return node


def _as(lc, user: str, *argv: str, timeout: float = 120):
    """A command as `user` on the login machine (a login shell's environment)."""
    return lc.c.run(_login(lc), ["runuser", "-u", user, "--", *argv], timeout=timeout)


def _sacct(lc, want: set[str] = frozenset(), timeout: float = 60) -> dict[str, tuple[str, str, str]]:
    """job id -> (user, account, state), from the login machine, all users; waits (bounded)
    until the jobs in `want` are listed (slurmctld sends job records to slurmdbd on its own)."""
    deadline = time.monotonic() + timeout
    while True:
        r = lc.c.run(
            _login(lc), ["sacct", "-a", "-X", "-n", "-P", "-S", "2000-01-01", "-o", "JobID,User,Account,State"]
        )
        assert r.returncode == 0, r.stderr
        rows = [line.split("|") for line in r.stdout.splitlines() if line]
        jobs = {row[0]: (row[1], row[2], row[3]) for row in rows if len(row) == 4}
        if set(want) <= set(jobs) or time.monotonic() > deadline:
            assert set(want) <= set(jobs), (sorted(want), r.stdout, r.stderr)
            return jobs
        time.sleep(2)


def _wait_done(lc, job: str, timeout: float = 180) -> str:
    deadline = time.monotonic() + timeout
    state = ""
    while time.monotonic() < deadline:
        state = lc.ctl("sacct", "-X", "-n", "-P", "-j", job, "-o", "State").stdout.strip()
        if state in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL"):
            return state
        time.sleep(1)
    return state


def _submit(lc, user: str, tag: str) -> str:
    out = f"{layout.FSX_MOUNTPOINT}/home/{user}/{tag}-%j.out"
    r = _as(lc, user, "sbatch", "--parsable", "-N1", "--time=1", "-o", out, "--wrap", "id -un; hostname")
    assert r.returncode == 0, (user, r.stdout, r.stderr)
    job = r.stdout.strip().split(";")[0]
    assert job.isdigit(), r.stdout
    assert _wait_done(lc, job) == "COMPLETED", lc.ctl("scontrol", "show", "job", job).stdout
    lc.jobs[job] = user
    return job


def test_slurmdbd_runs_on_mariadb_and_the_boot_registered_cluster_accounts_and_users(cluster):
    ctl = cluster.c.controller()
    st = cluster.machine_state(ctl)
    assert st["units"] == {u: "active" for u in cluster.units(ctl)} and "slurmdbd" in st["units"], st
    conf = ctl.upper(layout.SLURMDBD_CONF)
    assert oct(conf.stat().st_mode & 0o777) == "0o600"
    secret = cluster.database.secret_file.read_text()
    password = re.search(r'"password": "([^"]+)"', secret).group(1).encode().decode("unicode_escape")
    assert "#" in password and "\\" in password  # Slurm's parser needs both escaped
    assert f"StorageHost={cluster.database.ip}" in conf.read_text()
    # the password is in the 0600 file alone: not in the user data, boot log or template
    for p in (cluster.user_data_file, ctl.upper(layout.BOOT_LOG), ctl.upper(layout.SLURMDBD_CONF_TEMPLATE)):
        assert password not in p.read_text(errors="replace"), p
    assert ctl.upper(SECRET_ON_CONTROLLER).exists()
    # slurmdbd created its tables in MariaDB, for this cluster
    assert f"{NAME}_job_table" in cluster.database.tables()
    assoc = cluster.ctl("sacctmgr", "-nP", "list", "assoc", "format=cluster,account,user,defaultqos").stdout
    assert f"{NAME}|physics|alice|" in assoc and f"{NAME}|vision|bob|interactive" in assoc, assoc
    users = cluster.ctl("sacctmgr", "-nP", "list", "user", "format=user,defaultaccount,adminlevel").stdout
    assert "alice|physics|None" in users and "bob|vision|Administrator" in users, users
    # the same accounts on every machine, homes on /fsx
    for node in cluster.c.nodes.values():
        for u in USERS:
            r = cluster.c.run(node, ["id", "-u", u["name"]])
            assert r.stdout.strip() == str(u["uid"]), (node.hostname, u, r.stderr)
    home = cluster.c.fsx_dir / "home" / "alice"
    assert (home.stat().st_uid, oct(home.stat().st_mode & 0o777)) == (2001, "0o700")
    # the login machine: Slurm client and munge, no slurmd (not a Slurm node)
    login = _login(cluster)
    assert cluster.machine_state(login)["units"] == {"munge": "active", "gpu-cluster-munge-responder": "active"}
    assert login.hostname not in cluster.node_states()
    # a second sync changes nothing (the boot is idempotent)
    r = cluster.ctl("env", f"CLUSTER_NAME={NAME}", f"USERS_CONF={layout.USERS_CONF}", layout.ACCOUNTING_SYNC)
    assert (r.returncode, r.stdout) == (0, ""), r.stdout + r.stderr


def test_two_users_submit_from_the_login_machine_and_sacct_and_sshare_show_them(cluster):
    a = _submit(cluster, "alice", "first")
    b = _submit(cluster, "bob", "first")
    assert (cluster.c.fsx_dir / "home" / "alice" / f"first-{a}.out").read_text().split()[0] == "alice"
    jobs = _sacct(cluster, {a, b})
    assert (jobs[a], jobs[b]) == (("alice", "physics", "COMPLETED"), ("bob", "vision", "COMPLETED")), jobs
    share = _as(cluster, "alice", "sshare", "-a", "-n", "-P", "-o", "Account,User,RawShares,FairShare").stdout
    rows = {tuple(r.split("|")[:2]) for r in share.splitlines()}
    assert {("physics", "alice"), ("vision", "bob")} <= {(acct.strip(), user) for acct, user in rows}, share
    # the multifactor plugin is the one in force
    assert "priority/multifactor" in cluster.ctl("scontrol", "show", "config").stdout
    # a login the stack does not list has no association: refused at submission
    r = _as(cluster, "ubuntu", "sbatch", "--time=1", "--wrap", "true")
    assert r.returncode != 0 and re.search(r"[Ii]nvalid account|association", r.stderr), r.stderr


def _wait_state_saved(lc, settle: float = 8) -> None:
    """Until slurmctld's job state on /fsx was written after the last job ended.

    slurmctld writes its state at most every 5 s (SAVE_MAX_WAIT in its state_save.c), so
    a plug pulled within 5 s of a job's end hands the replacement an older queue: it runs
    a finished job again (on a worker that still follows the dead controller), or gives a
    new job a finished one's id. That window is Slurm's whatever the product does; this
    scenario is about accounting history. The end time has whole seconds: a write in the
    same second may precede the end, and then the end's own write follows within 5 s."""
    last = max(lc.jobs, key=int)
    r = lc.ctl("env", "SLURM_TIME_FORMAT=%s", "sacct", "-X", "-n", "-P", "-j", last, "-o", "End")
    end = int(r.stdout.strip())
    state = lc.c.fsx_dir / ".gpu-cluster" / NAME / "slurmctld" / "job_state"
    deadline = time.monotonic() + settle
    while state.stat().st_mtime < end + 1 and time.monotonic() < deadline:
        time.sleep(0.5)
    assert state.stat().st_mtime >= end, f"{state} not written since job {last} ended"


def _follow_the_controller(lc, timeout: float = 300) -> None:
    """Every machine runs with the published controller (the munge responder re-runs
    step 50 on workers and login nodes when it changes: AccountingStorageHost moves too)."""
    published = lc.c.fsx_dir / ".gpu-cluster" / NAME / "controller.env"
    used = f"{layout.STATE_DIR}/controller.env"
    deadline = time.monotonic() + timeout
    while True:
        want = published.read_text()
        stale = [n for n in lc.c.nodes.values() if n.role != "controller" and _text(n.upper(used)) != want]
        if not stale:
            return
        assert time.monotonic() < deadline, f"still on the old controller: {[n.hostname for n in stale]}\n" + "\n".join(
            _why_stale(lc, n) for n in stale
        )
        time.sleep(2)


def _why_stale(lc, node) -> str:
    """What a node that did not follow says: its boot log and its agent loop's journal."""
    journal = lc.c.run(node, ["journalctl", "--no-pager", "-n", "40", "-u", "gpu-cluster-munge-responder"]).stdout
    runs = lc.c.run(node, ["bash", "-c", "journalctl --no-pager -n 60 -u 'gpu-cluster-boot-*'"]).stdout
    return "\n".join(
        [f"== {node.hostname} boot.log", *lc.log_tail(node, 60), "== responder", journal, "== re-runs", runs]
    )


def _text(p) -> str:
    return p.read_text() if p.exists() else ""


def test_history_survives_a_controller_replacement(cluster):
    _wait_state_saved(cluster)
    old = cluster.c.controller()
    w = cluster.replace(old.hostname, timeout=600)
    assert w.rc == 0, cluster.log_tail(w.node, 30)
    new = cluster.c.controller()
    assert new.hostname != old.hostname
    _follow_the_controller(cluster)
    cluster.wait_idle(WORKERS, timeout=300)
    jobs = _sacct(cluster, set(cluster.jobs))
    assert {jobs[j][0] for j in cluster.jobs} == {"alice", "bob"}, jobs
    c = _submit(cluster, "alice", "after-replace")
    assert _sacct(cluster, {c})[c][:2] == ("alice", "physics")


def test_history_survives_a_whole_cluster_relaunch(cluster):
    _wait_state_saved(cluster)  # the same window as before a replacement: Slurm's, not ours
    before = set(cluster.c.nodes)
    cluster.relaunch(timeout=600)
    assert not before & set(cluster.c.nodes)
    jobs = _sacct(cluster, set(cluster.jobs))
    assert {jobs[j][0] for j in cluster.jobs} == {"alice", "bob"}, jobs
    d = _submit(cluster, "bob", "after-relaunch")
    assert _sacct(cluster, {d})[d][:2] == ("bob", "vision")
