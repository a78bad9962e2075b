"""A failed boot step is retried from that step, bounded, with backoff (issue 9).

Before this, a first boot that failed stayed failed until someone rebooted the node:
/fsx appearing a little late, or one failed download, cost a node. The entry point now
re-runs from the failed step up to BOOT_ATTEMPTS times, waiting BOOT_RETRY_DELAY,
then twice that, ... between attempts; while it waits the status says `retrying`, and
only the last failure says `failed`. The retry lives in the entry point itself, so it
is the same under cloud-init + systemd and in direct mode.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from tests.support.boot_sandbox import Sandbox, _retry_settings

BOOT = Path(__file__).resolve().parents[2] / "nodeside"

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (mount namespace)")


@pytest.fixture
def box(tmp_path: Path) -> Sandbox:
    b = Sandbox(tmp_path)
    shutil.copy(BOOT / "bin" / "gpu-cluster-boot", b.home / "bin" / "gpu-cluster-boot")
    shutil.copy(BOOT / "lib" / "common.sh", b.home / "lib" / "common.sh")
    return b


def _fake_sleep(box: Sandbox, until: Path | None = None) -> tuple[dict[str, str], Path]:
    """A `sleep` on PATH that records what the entry point asked for and returns at once
    (or once `until` exists): the backoff is asserted from the requested waits, without
    spending them."""
    bindir, log = box.root / "fakebin", box.root / "sleeps"
    bindir.mkdir()
    wait = f'while [ ! -e "{until}" ]; do {shutil.which("sleep")} 0.05; done\n' if until else ""
    (bindir / "sleep").write_text(f'#!/bin/sh\necho "$*" >>"{log}"\n{wait}')
    (bindir / "sleep").chmod(0o755)
    return {"PATH": f"{bindir}:{os.environ['PATH']}"}, log


def _fails_first_time(box: Sandbox, what: str) -> str:
    """A step body that fails on its first run only (e.g. one failed download)."""
    flag = box.root / "failed-once"
    return f'if [ ! -e "{flag}" ]; then touch "{flag}"; die "{what}"; fi'


@pytest.mark.parametrize("manager", ["systemd", "direct"])
def test_transient_failure_is_retried_from_the_failed_step(box, manager):
    _retry_settings(box, attempts=3, delay=1)
    box.step("10-a", "true")
    box.step("20-b", _fails_first_time(box, "download of enroot.deb failed: HTTP 503"))
    box.step("30-c", "true")
    path, sleeps = _fake_sleep(box)
    r = box.boot(GPU_CLUSTER_SERVICE_MANAGER=manager, **path)
    assert r.returncode == 0, r.stdout + r.stderr
    # Re-run from the failed step: 10-a ran once, 20-b twice.
    assert box.trace() == ["10-a", "20-b", "20-b", "30-c"]
    assert sleeps.read_text().split() == ["1"]
    log = (box.log_dir / "boot.log").read_text()
    assert "FAILED 20-b" in log
    assert "attempt 1 of 3 failed at 20-b; retrying from 20-b in 1s" in log
    st = box.status()
    assert (st["step"], st["state"]) == ("30-c", "ok")


def test_permanent_failure_stops_after_bounded_attempts_with_backoff(box):
    _retry_settings(box, attempts=3, delay=1)
    box.step("10-a", "true")
    box.step("20-b", 'die "the widget is missing"')
    box.step("30-c", "true")
    path, sleeps = _fake_sleep(box)
    r = box.boot(**path)
    assert r.returncode == 1
    assert box.trace() == ["10-a", "20-b", "20-b", "20-b"]
    log = (box.log_dir / "boot.log").read_text()
    # Backoff doubles: 1 s, then 2 s.
    assert "attempt 1 of 3 failed at 20-b; retrying from 20-b in 1s" in log
    assert "attempt 2 of 3 failed at 20-b; retrying from 20-b in 2s" in log
    assert sleeps.read_text().split() == ["1", "2"]
    st = box.status()
    assert (st["step"], st["state"]) == ("20-b", "failed")
    assert st["reason"].startswith("the widget is missing (see ")
    assert st["reason"].endswith("; gave up after 3 attempts")


def test_status_says_retrying_while_waiting(box):
    _retry_settings(box, attempts=2, delay=3)
    box.step("10-a", _fails_first_time(box, "mirror unreachable"))
    release = box.root / "release"
    path, sleeps = _fake_sleep(box, until=release)
    proc = subprocess.Popen(
        [str(box.home / "bin" / "gpu-cluster-boot")],
        env=box.env(**path),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        seen = None
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                st = json.loads((box.state / "status").read_text())
            except (OSError, ValueError):
                st = {}
            if st.get("state") == "retrying":
                seen = st
                break
            time.sleep(0.1)
        assert seen is not None, "the status never said retrying"
        assert seen["step"] == "10-a"
        assert seen["reason"].startswith("mirror unreachable (see ")
        assert seen["reason"].endswith("; attempt 1 of 2 failed, retrying from 10-a in 3s")
        release.touch()
        assert proc.wait(timeout=30) == 0
        assert sleeps.read_text().split() == ["3"]
    finally:
        if proc.poll() is None:
            proc.kill()
    assert box.status()["state"] == "ok"


def test_one_attempt_by_default_when_cluster_env_says_nothing(box):
    # Without BOOT_ATTEMPTS (an older cluster.env, or a hand-run with a short config)
    # the entry point fails at once, as before.
    box.step("10-a", 'die "nope"')
    t0 = time.monotonic()
    r = box.boot()
    assert r.returncode == 1 and time.monotonic() - t0 < 5
    assert box.trace() == ["10-a"]
    assert box.status()["state"] == "failed"


@pytest.mark.parametrize("setting,value", [("BOOT_ATTEMPTS", "0"), ("BOOT_ATTEMPTS", "x"), ("BOOT_RETRY_DELAY", "-1")])
def test_bad_retry_settings_are_refused(box, setting, value):
    box.step("10-a", "true")
    with (box.etc / "cluster.env").open("a") as f:
        f.write(f"{setting}={value}\n")
    r = box.boot()
    assert r.returncode == 2
    assert f"{setting} must be" in r.stderr


def test_a_step_that_failed_at_the_end_of_a_long_wait_is_not_retried(box):
    # Its own bounded wait (e.g. 30 minutes for the munge key) already gave a transient
    # cause more time than the retries would; retrying would multiply the wait.
    _retry_settings(box, attempts=4, delay=1)
    with (box.etc / "cluster.env").open("a") as f:
        f.write("BOOT_RETRY_LONG_STEP=1\n")
    box.step("10-a", 'sleep 1; die "timed out after 1800s waiting for the munge key"')
    r = box.boot()
    assert r.returncode == 1
    assert box.trace() == ["10-a"]
    st = box.status()
    assert st["state"] == "failed"
    assert st["reason"].endswith("; not retried (failed after its own 1s+ wait)")


def test_rendered_cluster_env_retries_and_bounds_the_munge_recovery():
    from tests.support.user_data import rendered

    env = dict(
        line.split("=", 1)
        for line in rendered().files["/etc/gpu-cluster/cluster.env"].decode().splitlines()
        if line and not line.startswith("#")
    )
    assert (env["BOOT_ATTEMPTS"], env["BOOT_RETRY_DELAY"]) == ("4", "30")
    # A live holder answers a request within MUNGE_WORKER_MIN_AGE + MUNGE_WORKER_INTERVAL;
    # the controller must wait longer before it rotates the key, or a controller
    # replaced alone would rotate it under every running node.
    assert int(env["MUNGE_KEY_RECOVERY_WAIT"]) > int(env["MUNGE_WORKER_MIN_AGE"]) + int(env["MUNGE_WORKER_INTERVAL"])
