"""gpu-cluster-boot and its shell helpers, run for real against fakes.

- the entry point against fake steps: order, stop at the first failure, the status
  marker (local, and on a bind-mounted "/fsx" inside a private mount namespace),
  reruns, --only/--from, the environment > overrides.env > cluster.env precedence;
- the IMDSv2 helper against a tiny metadata stand-in on 127.0.0.1 that insists on a token;
- the munge key hand-over with real openssl in temp directories.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.support.boot_sandbox import (
    COMMON,
    MUNGE_JOIN,
    Sandbox,
    _Imds,
    _mode,
)


@pytest.fixture
def box(tmp_path: Path) -> Sandbox:
    return Sandbox(tmp_path)


def test_steps_run_in_sorted_order_with_dotted_names(box):
    # run-parts would skip "25-x.y.sh" (a dot in the name); the sorted glob does not.
    for name in ("30-c", "10-a", "25-x.y", "20-b"):
        box.step(name, "true")
    r = box.boot()
    assert r.returncode == 0, r.stderr + r.stdout
    assert box.trace() == ["10-a", "20-b", "25-x.y", "30-c"]
    log = (box.log_dir / "boot.log").read_text()
    for name in ("10-a", "20-b", "25-x.y", "30-c"):
        assert f"start {name}" in log and f"end {name} ok after" in log
    st = box.status()
    assert st["state"] == "ok" and st["step"] == "30-c"
    assert st["marker"] == "local only (/fsx not mounted yet)"
    assert "status kept locally only" in r.stdout


def test_stops_at_first_failure_with_reason(box):
    box.step("10-a", "true")
    box.step("20-b", 'die "the widget is missing"')
    box.step("30-c", "true")
    r = box.boot()
    assert r.returncode == 1
    assert box.trace() == ["10-a", "20-b"]
    st = box.status()
    assert (st["step"], st["state"]) == ("20-b", "failed")
    assert st["reason"].startswith("the widget is missing (see ")
    assert st["log"].endswith("/boot.log")
    assert "FAILED 20-b" in (box.log_dir / "boot.log").read_text()


def test_a_reason_with_control_characters_quotes_and_utf8_is_valid_json(box):
    # The status is JSON written by bash: newlines and tabs become spaces, other control
    # characters go, quotes and backslashes are escaped, UTF-8 stays.
    raw = box.root / "reason.txt"
    raw.write_text('line one\nline\ttwo \x1b[31mred\x1b[0m \x01x "q" a\\b \x7f é 日本', encoding="utf-8")
    box.step("10-a", f'die "$(cat {raw})"')
    r = box.boot()
    assert r.returncode == 1
    reason = box.status()["reason"]
    assert reason.startswith('line one line two [31mred[0m x "q" a\\b \x7f é 日本 (see '), reason


def test_failure_without_die_reports_exit_status(box):
    box.step("10-a", "exit 3")
    r = box.boot()
    assert r.returncode == 1
    assert box.status()["reason"].startswith("exited with status 3")


def test_env_beats_overrides_beats_cluster_env(box):
    box.step(
        "10-a", 'echo "$GPU_CLUSTER_PACKAGES $GPU_CLUSTER_SERVICE_MANAGER $FROM_CLUSTER_ENV" >"$GPU_CLUSTER_STATE/seen"'
    )
    (box.etc / "overrides.env").write_text("GPU_CLUSTER_PACKAGES=preinstalled\nGPU_CLUSTER_SERVICE_MANAGER=direct\n")
    assert box.boot().returncode == 0
    assert (box.state / "seen").read_text() == "preinstalled direct cluster\n"
    assert box.boot(GPU_CLUSTER_SERVICE_MANAGER="systemd").returncode == 0
    assert (box.state / "seen").read_text() == "preinstalled systemd cluster\n"
    r = box.boot(GPU_CLUSTER_PACKAGES="maybe")
    assert r.returncode == 2 and "install or preinstalled" in r.stderr


def test_wait_for_is_bounded_and_names_what(box):
    # A fake clock: the step's own now_ms and sleep (shell functions win over the
    # builtin variable's reader and the command), so the bound is reached without waiting.
    sleeps = box.root / "sleeps"
    box.step(
        "10-a",
        "FAKE_MS=0\n"
        "now_ms() { NOW_MS=$FAKE_MS; }\n"
        f'sleep() {{ FAKE_MS=$((FAKE_MS + $(ms_of "$1"))); echo "$1" >>"{sleeps}"; }}\n'
        'GC_WAIT_INTERVAL=0.2 wait_for 1 "the unicorn to appear" test -e /nonexistent/unicorn',
    )
    r = box.boot()
    assert r.returncode == 1
    assert box.status()["reason"].startswith("timed out after 1s waiting for the unicorn to appear")
    # 0.1 s first, then 1.5x each time, capped at GC_WAIT_INTERVAL, the last one cut to the bound
    assert sleeps.read_text().split() == ["0.100", "0.151", "0.200", "0.200", "0.200", "0.149"]


def test_skip_notes_reach_the_status(box):
    box.step("20-packages", 'skip "Enroot check (preinstalled)"')
    assert box.boot().returncode == 0
    st = box.status()
    assert st["skipped"] == "20-packages: skipped: Enroot check (preinstalled)"
    assert st["reason"] == "all 1 step(s) ok"


def test_daemons_started_by_steps_do_not_hold_the_lock(box):
    # A step that leaves a long-running process behind (as munged/slurmd in direct mode).
    box.step("10-a", 'setsid sleep 30 >/dev/null 2>&1 </dev/null & echo $! >"$GPU_CLUSTER_STATE/daemon.pid"')
    try:
        assert box.boot().returncode == 0
        r = box.boot()  # would wait 600 s for the lock if the daemon inherited it
        assert r.returncode == 0, r.stdout + r.stderr
    finally:
        for pid in (box.state / "daemon.pid").read_text().split():
            subprocess.run(["kill", pid], check=False)


# --- IMDSv2 helper ------------------------------------------------------------------


@pytest.fixture(scope="module")
def imds():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Imds)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()


def _imds_get(endpoint: str, path: str, **env: str) -> subprocess.CompletedProcess:
    script = f'. "{COMMON}"; imds_get "$1"'
    return subprocess.run(
        ["bash", "-c", script, "x", path],
        capture_output=True,
        text=True,
        timeout=30,
        env={
            **os.environ,
            "AWS_EC2_METADATA_SERVICE_ENDPOINT": endpoint,
            "IMDS_TRIES": "2",
            "IMDS_RETRY_SLEEP": "0",
            **env,
        },
    )


def test_imds_get_uses_token_and_endpoint(imds):
    _Imds.seen.clear()
    r = _imds_get(imds, "meta-data/instance-id")
    assert (r.returncode, r.stdout) == (0, "i-0feed\n")
    assert _Imds.seen == ["PUT /latest/api/token", "GET /latest/meta-data/instance-id"]
    r = _imds_get(imds, "meta-data/tags/instance/GpuClusterRole")
    assert r.stdout == "worker\n"


def test_imds_session_token_is_reused_and_an_expired_one_replaced(imds):
    """10-identity takes one token for its eight reads; a token IMDS refuses (401, e.g.
    expired) is replaced at once, without the retry sleep."""
    _Imds.seen.clear()
    script = f'. "{COMMON}"; IMDS_TOKEN=$(imds_token); imds_get meta-data/instance-id; imds_get meta-data/instance-id'
    r = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=30,
                       env={**os.environ, "AWS_EC2_METADATA_SERVICE_ENDPOINT": imds, "IMDS_RETRY_SLEEP": "30"})  # fmt: skip
    assert (r.returncode, r.stdout) == (0, "i-0feed\ni-0feed\n"), r.stderr
    assert _Imds.seen == ["PUT /latest/api/token"] + ["GET /latest/meta-data/instance-id"] * 2
    _Imds.seen.clear()
    r = _imds_get(imds, "meta-data/instance-id", IMDS_TOKEN="expired", IMDS_RETRY_SLEEP="30")
    assert (r.returncode, r.stdout) == (0, "i-0feed\n"), r.stderr
    assert _Imds.seen == [
        "GET /latest/meta-data/instance-id",
        "PUT /latest/api/token",
        "GET /latest/meta-data/instance-id",
    ]


def test_imds_missing_path_is_404_at_once(imds):
    _Imds.seen.clear()
    r = _imds_get(imds, "meta-data/tags/instance/GpuClusterNodes")
    assert r.returncode == 4
    assert len(_Imds.seen) == 2  # no retries for "absent"


def test_imds_bounded_retries_when_unreachable():
    r = _imds_get("http://127.0.0.1:9", "meta-data/instance-id", IMDS_TRIES="3")
    assert r.returncode == 1
    assert "no answer for /latest/meta-data/instance-id" in r.stderr and "after 3 tries" in r.stderr


def test_imds_token_is_required(imds, monkeypatch):
    monkeypatch.setattr(_Imds, "TOKEN", "other")  # token PUT answers "other"; GET checks it
    r = _imds_get(imds, "meta-data/instance-id")
    assert r.returncode == 0  # consistent token: fine
    # Without the PUT (plain GET), the stand-in refuses: the helper must not do that.
    out = subprocess.run(
        ["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", imds + "latest/meta-data/instance-id"],
        capture_output=True,
        text=True,
    ).stdout
    assert out == "401"


# --- munge key hand-over --------------------------------------------------------------


def _mj(cwd: Path, script: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", "-c", f'set -euo pipefail; . "{MUNGE_JOIN}"; {script}'],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.fixture
def mj(tmp_path: Path) -> Path:
    for d in ("req", "resp"):
        (tmp_path / d).mkdir(mode=0o700)
    (tmp_path / "munge.key").write_bytes(os.urandom(1024))
    (tmp_path / "munge.key").chmod(0o400)
    return tmp_path


def test_munge_join_roundtrip(mj):
    me = f"{os.getuid()}:{os.getgid()}"
    r = _mj(mj, "mj_request priv req i-0aaa")
    assert r.returncode == 0, r.stderr
    assert _mode(mj / "req" / "i-0aaa.pem") == 0o600 and _mode(mj / "priv") == 0o700
    assert _mode(mj / "priv" / "join.key") == 0o600
    assert b"PRIVATE" not in (mj / "req" / "i-0aaa.pem").read_bytes()
    r = _mj(mj, "mj_answer munge.key req resp 0")
    assert r.stdout == "1\n", r.stderr
    resp = mj / "resp" / "i-0aaa.cms"
    key = (mj / "munge.key").read_bytes()
    assert _mode(resp) == 0o600
    body = resp.read_bytes()
    assert key not in body and key[:32] not in body  # never the plaintext key
    assert _mj(mj, "mj_answer munge.key req resp 0").stdout == "0\n"  # answered once
    r = _mj(mj, f"mj_collect priv req resp i-0aaa {mj}/installed.key {me}")
    assert r.returncode == 0, r.stderr
    assert (mj / "installed.key").read_bytes() == key
    assert _mode(mj / "installed.key") == 0o400
    # request, response and the one-time private key are gone
    assert not (mj / "req" / "i-0aaa.pem").exists() and not resp.exists() and not (mj / "priv").exists()
    assert list((mj / "resp").iterdir()) == []


def test_munge_join_respects_min_age_and_subject(mj):
    assert _mj(mj, "mj_request priv req i-0bbb").returncode == 0
    assert _mj(mj, "mj_answer munge.key req resp 3600").stdout == "0\n"  # too young for a worker
    # a cert published under another instance's name is not answered
    shutil.copy(mj / "req" / "i-0bbb.pem", mj / "req" / "i-0ccc.pem")
    assert _mj(mj, "mj_answer munge.key req resp 0").stdout == "1\n"
    assert (mj / "resp" / "i-0bbb.cms").exists() and not (mj / "resp" / "i-0ccc.cms").exists()


def test_join_key_is_ec_p256_and_pending_lists_only_unanswered_requests(mj):
    """The one-time key is P-256 (made in milliseconds); the controller's responder wakes
    early only for requests that have no response yet (mj_pending)."""
    assert _mj(mj, "mj_request priv req i-0aaa; mj_request priv2 req i-0bbb").returncode == 0
    key = subprocess.run(["openssl", "pkey", "-in", str(mj / "priv" / "join.key"), "-noout", "-text"],
                         capture_output=True, text=True)  # fmt: skip
    assert "ASN1 OID: prime256v1" in key.stdout, key.stdout + key.stderr
    said = _mj(mj, 'mj_pending req resp; echo "[$MJ_PENDING]"').stdout
    assert said == "[i-0aaa i-0bbb ]\n"
    assert _mj(mj, "mj_answer munge.key req resp 0").stdout == "2\n"
    assert _mj(mj, 'mj_pending req resp; echo "[$MJ_PENDING]"').stdout == "[]\n"


def test_stale_response_is_dropped_and_answered_again(mj):
    me = f"{os.getuid()}:{os.getgid()}"
    assert _mj(mj, "mj_request priv req i-0ddd").returncode == 0
    assert _mj(mj, "mj_answer munge.key req resp 0").stdout == "1\n"
    # The joiner lost its key pair (e.g. a crash) and asks again with a new one.
    shutil.rmtree(mj / "priv")
    assert _mj(mj, "mj_request priv req i-0ddd").returncode == 0
    r = _mj(mj, f"mj_collect priv req resp i-0ddd {mj}/k {me}")
    assert r.returncode == 1 and not (mj / "resp" / "i-0ddd.cms").exists()
    assert _mj(mj, "mj_answer munge.key req resp 0").stdout == "1\n"
    assert _mj(mj, f"mj_collect priv req resp i-0ddd {mj}/k {me}").returncode == 0
    assert (mj / "k").read_bytes() == (mj / "munge.key").read_bytes()


def test_two_responders_do_not_clobber(mj):
    assert _mj(mj, "mj_request priv req i-0eee").returncode == 0
    a = subprocess.Popen(
        ["bash", "-c", f'. "{MUNGE_JOIN}"; mj_answer munge.key req resp 0'], cwd=mj, stdout=subprocess.PIPE, text=True
    )
    b = subprocess.Popen(
        ["bash", "-c", f'. "{MUNGE_JOIN}"; mj_answer munge.key req resp 0'], cwd=mj, stdout=subprocess.PIPE, text=True
    )
    answered = int(a.communicate()[0]) + int(b.communicate()[0])
    assert answered == 1
    assert sorted(p.name for p in (mj / "resp").iterdir()) == ["i-0eee.cms"]  # no temp files left


# --- step 10-identity against the metadata stand-in, in private UTS/mount namespaces ---


# --- direct mode services (pid files under GPU_CLUSTER_RUN) -------------------------------


def _svc(box: Sandbox, script: str, **extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", "-c", f'set -euo pipefail; . "{COMMON}"; {script}'],
        capture_output=True,
        text=True,
        env=box.env(GPU_CLUSTER_SERVICE_MANAGER="direct", GC_WAIT_INTERVAL="1", **extra),
        timeout=60,
    )


def _quick_sleep(box: Sandbox) -> dict[str, str]:
    """A `sleep` first on PATH that waits 0.05 s whatever it is asked (direct_start's settle
    second, direct_stop's poll interval): the same calls, without the real seconds."""
    fakebin = box.root / "fakebin"
    fakebin.mkdir(exist_ok=True)
    (fakebin / "sleep").write_text(f"#!/bin/sh\nexec {shutil.which('sleep')} 0.05\n")
    (fakebin / "sleep").chmod(0o755)
    return {"PATH": f"{fakebin}:{os.environ['PATH']}"}


def test_direct_mode_start_active_restart_stop(box):
    fake = box.home / "lib" / "munge-responder.sh"
    fake.write_text("#!/bin/bash\nwhile true; do sleep 0.2; done\n")
    fake.chmod(0o755)
    name = "gpu-cluster-munge-responder"
    quick = _quick_sleep(box)
    try:
        assert _svc(box, f"svc start {name}", **quick).returncode == 0
        pid = (box.run_dir / f"{name}.pid").read_text().strip()
        assert _svc(box, f"svc active {name}").returncode == 0
        assert _svc(box, f"svc start {name}", **quick).returncode == 0  # already running: same process
        assert (box.run_dir / f"{name}.pid").read_text().strip() == pid
        assert _svc(box, f"svc restart {name}", **quick).returncode == 0
        assert (box.run_dir / f"{name}.pid").read_text().strip() != pid
        r = _svc(box, f"svc enable {name}")
        assert r.returncode == 0 and "SKIPPED: enable" in r.stdout
    finally:
        _svc(box, f"direct_stop {name}", **quick)
    assert _svc(box, f"svc active {name}").returncode != 0


def test_direct_mode_daemon_that_dies_fails_with_its_log(box):
    fake = box.home / "lib" / "munge-responder.sh"
    fake.write_text("#!/bin/bash\necho 'fatal: no key'\nexit 1\n")
    fake.chmod(0o755)
    r = _svc(box, "GC_REASON_FILE=/dev/stderr svc start gpu-cluster-munge-responder")
    assert r.returncode == 1
    assert "exited right after starting" in r.stderr and "fatal: no key" in r.stderr


def test_gc_drops_abandoned_requests_and_responses_only(mj):
    old, fresh = mj / "req" / "i-0old.pem", mj / "req" / "i-0new.pem"
    for p in (old, fresh, mj / "resp" / "i-0old.cms", mj / "resp" / ".i-0old.tmp"):
        p.write_text("x")
    for p in (old, mj / "resp" / "i-0old.cms", mj / "resp" / ".i-0old.tmp"):
        os.utime(p, (1, 1))  # long ago
    assert _mj(mj, "mj_gc req resp").returncode == 0
    assert sorted(p.name for p in (mj / "req").iterdir()) == ["i-0new.pem"]
    assert list((mj / "resp").iterdir()) == []


def test_systemd_mode_starts_without_blocking_and_waits_bounded(box):
    # A stand-in systemctl records its calls (and whether SysV hooks are skipped); is-active
    # says "active"; is-enabled says slurmctld is not enabled yet, munge is.
    bindir = box.root / "fakebin"
    bindir.mkdir()
    (bindir / "systemctl").write_text(
        f'#!/bin/bash\necho "${{SYSTEMCTL_SKIP_SYSV:+SKIP_SYSV }}$*" >>"{box.root}/systemctl.calls"\n'
        "[[ $1 == is-enabled && $3 == slurmctld ]] && exit 1\nexit 0\n"
    )
    (bindir / "systemctl").chmod(0o755)
    env = box.env(GPU_CLUSTER_SERVICE_MANAGER="systemd", PATH=f"{bindir}:{os.environ['PATH']}")
    r = subprocess.run(
        [
            "bash",
            "-c",
            f'set -euo pipefail; . "{COMMON}"; svc start slurmd; svc restart munge; '
            "svc enable munge slurmctld; svc active slurmd; svc_reload",
        ],
        env=env,
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr
    assert (box.root / "systemctl.calls").read_text().splitlines() == [
        "--no-block start slurmd",
        "is-active --quiet slurmd",
        "--no-block restart munge",
        "is-active --quiet munge",
        "SKIP_SYSV is-enabled --quiet munge",
        "SKIP_SYSV is-enabled --quiet slurmctld",
        "SKIP_SYSV enable --quiet --no-reload slurmctld",  # munge is enabled already
        "is-active --quiet slurmd",
        "daemon-reload",
    ]


# --- step 30-fsx: the shared directory layout, and the no-Lustre failure ----------------
