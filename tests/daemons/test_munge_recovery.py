"""Whole-cluster relaunch against a kept /fsx: no munge key deadlock (issue 9).

Each "node" is the real entry point with the real steps 30-fsx and 40-munge (and a
stand-in identity step), in its own mount namespace with a private /etc/munge, /run,
/var/lib/munge and /var/log/munge, running a real munged and the real munge responder
in direct mode; /fsx is one directory bind-mounted into every node.

The scenario: an old cluster (controller + worker P) made key generation 1. P is cut
off from /fsx (its responder stops), the controller is destroyed; a new controller and
a new worker boot at the same time. /fsx says a key exists, but no live node answers.
Before the fix every node waited MUNGE_JOIN_TIMEOUT and failed. Now the controller
waits MUNGE_KEY_RECOVERY_WAIT, makes generation 2 and answers the waiting worker; when P
sees /fsx again, it notices the fingerprint change and rejoins on its own.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.support.processes import command_lines

BOOT = Path(__file__).resolve().parents[2] / "nodeside"

pytestmark = [
    pytest.mark.slurm,  # needs Debian's munge and root, like the other daemon tests
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root (mount namespaces, munged)"),
    pytest.mark.skipif(
        shutil.which("munged") is None and not Path("/usr/sbin/munged").exists(),
        reason="munge is not installed (apt-get install munge)",
    ),
]

RECOVERY_WAIT = 10
JOIN_TIMEOUT = 60

NS_SETUP = """set -e
mount -t tmpfs -o mode=0755 tmpfs /run
for d in /etc/munge /var/lib/munge /var/log/munge; do
  mount -t tmpfs -o mode=0700 tmpfs "$d"; chown munge:munge "$d"
done
# what the munge package leaves on a new instance: a random key of its own
mungekey --create --keyfile=/etc/munge/munge.key
chown munge:munge /etc/munge/munge.key && chmod 0400 /etc/munge/munge.key
mount --bind "$FSX" "$FSX"
exec "$@"
"""


class Node:
    """One node: its own file layout under tmp, /fsx shared with the others."""

    def __init__(self, root: Path, fsx: Path, name: str, role: str, recovery_wait: int = RECOVERY_WAIT):
        self.root, self.fsx, self.name, self.role = root, fsx, name, role
        self.home, self.etc = root / "opt", root / "etc"
        self.state, self.run_dir, self.log_dir = root / "state", root / "run", root / "log"
        self.extra_pids: list[int] = []
        for d in (self.home / "bin", self.home / "steps", self.etc):
            d.mkdir(parents=True, exist_ok=True)
        shutil.copy(BOOT / "bin" / "gpu-cluster-boot", self.home / "bin")
        shutil.copytree(BOOT / "lib", self.home / "lib")
        for step in ("30-fsx.sh", "40-munge.sh"):
            shutil.copy(BOOT / "steps" / step, self.home / "steps")
        ident = self.home / "steps" / "10-identity.sh"
        ident.write_text(f"""#!/usr/bin/env bash
set -euo pipefail
mkdir -p "$GPU_CLUSTER_STATE"
printf "INSTANCE_ID='i-0{name}'\\nNODE_NAME='{name}'\\nNODE_ROLE='{role}'\\nNODE_ADDR='127.0.0.1'\\nGPU_CLUSTER_NODES='2'\\n" \\
  >"$GPU_CLUSTER_STATE/identity.env"
""")
        ident.chmod(0o755)
        (self.etc / "cluster.env").write_text(
            "CLUSTER_NAME=demo\n"
            f"FSX_MOUNTPOINT={fsx}\nFSX_ROOT={fsx}/.gpu-cluster/demo\n"
            "FSX_DNS_NAME=fs-1.example\nFSX_MOUNT_NAME=x\nFSX_MOUNT_TRIES=1\n"
            "MUNGE_KEY=/etc/munge/munge.key\n"
            f"MUNGE_JOIN_TIMEOUT={JOIN_TIMEOUT}\nMUNGE_KEY_RECOVERY_WAIT={recovery_wait}\n"
            "MUNGE_CONTROLLER_INTERVAL=1\nMUNGE_WORKER_INTERVAL=1\nMUNGE_WORKER_MIN_AGE=2\n"
            "NODE_REAP_GRACE=1800\n"
        )

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("GPU_CLUSTER", "AWS_EC2", "SLURM"))}
        env.update(
            GPU_CLUSTER_HOME=str(self.home),
            GPU_CLUSTER_ETC=str(self.etc),
            GPU_CLUSTER_STATE=str(self.state),
            GPU_CLUSTER_RUN=str(self.run_dir),
            GPU_CLUSTER_LOG_DIR=str(self.log_dir),
            GPU_CLUSTER_SERVICE_MANAGER="direct",
            GPU_CLUSTER_PACKAGES="preinstalled",
            GC_WAIT_INTERVAL="1",
            FSX=str(self.fsx),
        )
        return env

    def boot(self) -> subprocess.Popen:
        """The whole entry point, in a fresh mount namespace (a new instance)."""
        cmd = [
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "bash",
            "-c",
            NS_SETUP,
            "node",
            str(self.home / "bin" / "gpu-cluster-boot"),
        ]
        return subprocess.Popen(cmd, env=self.env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def pid(self, service: str) -> int | None:
        f = self.run_dir / f"{service}.pid"
        if not f.exists():
            return None
        pid = int(f.read_text().split()[0])
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        return pid

    def inside(self, *argv: str, input: str | None = None) -> subprocess.CompletedProcess:
        """Run a command in this node's mount namespace (entered through its munged)."""
        pid = self.pid("munge")
        assert pid, f"{self.name}: munged is not running"
        return subprocess.run(
            ["nsenter", "-t", str(pid), "-m", "--", *argv],
            input=input,
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=30,
        )

    def key(self) -> bytes:
        pid = self.pid("munge")
        assert pid, f"{self.name}: munged is not running"
        r = subprocess.run(
            ["nsenter", "-t", str(pid), "-m", "--", "cat", "/etc/munge/munge.key"], capture_output=True, timeout=30
        )
        assert r.returncode == 0, r.stderr
        return r.stdout

    def stop(self, service: str) -> None:
        pid = self.pid(service)
        if pid:
            os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + 10
            while self.pid(service) and time.monotonic() < deadline:
                time.sleep(0.1)

    def start_responder(self) -> None:
        """Start the responder again in this node's namespace (as systemd's Restart would)."""
        pid = self.pid("munge")
        assert pid
        p = subprocess.Popen(
            ["nsenter", "-t", str(pid), "-m", "--", "setsid", str(self.home / "lib" / "munge-responder.sh")],
            env=self.env(),
            stdout=open(self.root / "responder.out", "wb"),
            stderr=subprocess.STDOUT,
        )
        self.extra_pids.append(p.pid)
        (self.run_dir / "gpu-cluster-munge-responder.pid").write_text(f"{p.pid}\n")

    def log(self) -> str:
        p = self.log_dir / "boot.log"
        return p.read_text(errors="replace") if p.exists() else ""

    def kill_all(self) -> None:
        pids = set(self.extra_pids)
        for f in self.run_dir.glob("*.pid") if self.run_dir.exists() else ():
            try:
                pids.add(int(f.read_text().split()[0]))
            except (ValueError, IndexError):
                pass
        # ... and anything else still running from this node's files (a responder the
        # rejoin started, whatever its pid file says).
        pids.update(pid for pid, argv in command_lines() if str(self.root).encode() in b"\0".join(argv))
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def _wait(proc: subprocess.Popen, node: Node, timeout: float) -> int:
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        pytest.fail(f"{node.name}: boot still running after {timeout}s\n{node.log()[-3000:]}")
    return proc.returncode


def _credential_crosses(a: Node, b: Node) -> bool:
    """A credential made by a's munged decodes on b's: both run the same key."""
    cred = a.inside("munge", "-n")
    assert cred.returncode == 0, cred.stderr
    r = b.inside("unmunge", input=cred.stdout)
    return "STATUS:          Success" in r.stdout


@pytest.fixture
def nodes(tmp_path):
    fsx = tmp_path / "fsx"
    fsx.mkdir()
    made: list[Node] = []

    def make(name: str, role: str, **kw) -> Node:
        n = Node(tmp_path / name, fsx, name, role, **kw)
        made.append(n)
        return n

    yield make
    for n in made:
        n.kill_all()


def test_whole_cluster_relaunch_rotates_the_key_and_the_cut_off_holder_rejoins(nodes, tmp_path):
    fsx_munge = tmp_path / "fsx" / ".gpu-cluster" / "demo" / "munge"
    # --- the old cluster: a controller makes generation 1, worker P joins ------------
    old_ctl, p = nodes("old-ctl", "controller"), nodes("p", "worker")
    assert _wait(old_ctl.boot(), old_ctl, 60) == 0, old_ctl.log()[-3000:]
    assert _wait(p.boot(), p, 60) == 0, p.log()[-3000:]
    k1 = p.key()
    assert k1 == old_ctl.key()
    digest1 = (fsx_munge / "key.sha256").read_text().strip()
    assert digest1 == hashlib.sha256(k1).hexdigest()
    generation_file = fsx_munge / "key.generation"
    gen1 = generation_file.read_text().strip() if generation_file.exists() else None

    # --- P is cut off from /fsx; the controller instance is destroyed -----------------
    p.stop("gpu-cluster-munge-responder")
    old_ctl.kill_all()

    # --- every instance replaced at once: new controller and new worker ---------------
    ctl, w = nodes("ctl", "controller"), nodes("w", "worker")
    t0 = time.monotonic()
    pc, pw = ctl.boot(), w.boot()
    rc_ctl, rc_w = _wait(pc, ctl, JOIN_TIMEOUT + 30), _wait(pw, w, JOIN_TIMEOUT + 30)
    took = time.monotonic() - t0
    assert rc_ctl == 0, ctl.log()[-3000:]
    assert rc_w == 0, w.log()[-3000:]
    assert took < JOIN_TIMEOUT, f"took {took:.0f}s: someone waited for the join timeout"
    assert (
        f"no node holding the cluster's munge key answered within {RECOVERY_WAIT}s: making a new key (generation 2)"
    ) in ctl.log()
    k2 = ctl.key()
    assert k2 != k1 and w.key() == k2
    assert (fsx_munge / "key.sha256").read_text().strip() == hashlib.sha256(k2).hexdigest()
    assert (gen1, generation_file.read_text().strip()) == ("1", "2")
    assert _credential_crosses(w, ctl) and _credential_crosses(ctl, w)
    # The worker was answered through the join path, never by a plaintext key on /fsx.
    assert "requesting the cluster's munge key" in w.log()
    for f in (tmp_path / "fsx").rglob("*"):
        if f.is_file():
            body = f.read_bytes()
            assert k1 not in body and k2 not in body, f"plaintext munge key in {f}"

    # --- P sees /fsx again: its key is not the cluster's any more; it rejoins ---------
    assert not _credential_crosses(p, ctl)
    p.start_responder()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:  # munged is restarted meanwhile: its pid (our way in) may just have gone
            if p.key() == k2 and "munge ok" in p.log().rsplit("gpu-cluster-boot:", 1)[-1]:
                break
        except AssertionError:
            pass
        time.sleep(0.5)
    assert p.key() == k2, (p.root / "responder.out").read_text()[-2000:] + p.log()[-3000:]
    assert "the cluster's munge key changed (generation 2)" in (p.root / "responder.out").read_text()
    deadline = time.monotonic() + 20
    while not _credential_crosses(p, ctl) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert _credential_crosses(p, ctl) and _credential_crosses(ctl, p)


def test_controller_replaced_alone_joins_a_live_holder_without_rotating(nodes, tmp_path):
    """The normal case the bound must not break: a worker holds the key and answers."""
    fsx_munge = tmp_path / "fsx" / ".gpu-cluster" / "demo" / "munge"
    old_ctl, w = nodes("old-ctl", "controller"), nodes("w", "worker")
    assert _wait(old_ctl.boot(), old_ctl, 60) == 0, old_ctl.log()[-3000:]
    assert _wait(w.boot(), w, 60) == 0, w.log()[-3000:]
    k1 = w.key()
    old_ctl.kill_all()
    # A generous bound here: this test is about the live holder answering first.
    ctl = nodes("ctl", "controller", recovery_wait=JOIN_TIMEOUT)
    assert _wait(ctl.boot(), ctl, JOIN_TIMEOUT + 30) == 0, ctl.log()[-3000:]
    assert ctl.key() == k1
    assert (fsx_munge / "key.generation").read_text().strip() == "1"
    assert "making a new key" not in ctl.log()
