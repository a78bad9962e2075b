"""The host Slurm harness's teardown (tests/support/slurm_harness.py): slurmd leaves its
steps running when it stops, and each full `make test` left one orphaned
`slurmstepd: [<job>.batch]` on the host. The teardown kills this cluster's steps, named by
their sockets in its spool dir, and nothing else (stand-in processes with slurmstepd's
title; no Slurm needed)."""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from tests.support.slurm_harness import SlurmLayout, SlurmTestCluster, kill_leftover_steps


def _step(title: str) -> subprocess.Popen:
    # `exec -a` sets argv[0], which is what slurmstepd's title replaces.
    proc = subprocess.Popen(["bash", "-c", f"exec -a '{title}' sleep 30"])
    cmdline = Path(f"/proc/{proc.pid}/cmdline")
    deadline = time.monotonic() + 5
    while not cmdline.read_bytes().startswith(title.encode()):  # until bash has exec'd
        assert time.monotonic() < deadline, f"no process titled {title!r} within 5 s"
        time.sleep(0.01)
    return proc


def _socket(path) -> socket.socket:
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(path))
    return s


def test_only_this_clusters_steps_are_killed(tmp_path):
    ours, other = _step("slurmstepd: [1005712901.batch]"), _step("slurmstepd: [1005713001.batch]")
    sock = _socket(tmp_path / "host1_1005712901.4294967291")
    try:
        killed = kill_leftover_steps(tmp_path)
        assert killed == [ours.pid]
        assert ours.wait(timeout=5) == -9
        assert other.poll() is None
    finally:
        sock.close()
        for p in (ours, other):
            p.kill()
            p.wait()


def test_a_spool_without_step_sockets_touches_nothing(tmp_path):
    step = _step("slurmstepd: [1005712901.batch]")
    (tmp_path / "host1_1005712901.4294967291").write_text("not a socket")
    try:
        assert kill_leftover_steps(tmp_path) == []
        assert step.poll() is None
    finally:
        step.kill()
        step.wait()


def test_a_cluster_in_a_sysroot_finds_its_steps_inside_it():
    # The topology module's trixie cluster runs Slurm 24.11 chrooted: its spool is a path
    # inside the sysroot, and CI run 4 still left that cluster's batch step behind.
    # A short sysroot path: a unix socket's path has a 108-byte limit.
    sysroot = Path(tempfile.mkdtemp(prefix="sr-", dir="/tmp"))
    cluster = SlurmTestCluster(SlurmLayout(Path("/t")), sysroot=sysroot)
    step = _step("slurmstepd: [1003885501.batch]")
    sock = _socket(sysroot / "t" / "slurmd" / "host1_1003885501.4294967291")
    try:
        cluster.stop()
        assert step.wait(timeout=5) == -9
    finally:
        sock.close()
        step.kill()
        step.wait()
        shutil.rmtree(sysroot)
