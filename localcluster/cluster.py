"""Bring a local cluster up from the rendered user data, watch it, show it working.

The user data is rendered once per cluster and kept (`user-data.bin` in the state
directory) so a replacement node boots from exactly the same bytes as the first ones.
Each node gets the files cloud-init would write from it, plus the one file the
contract allows a local node to have: /etc/gpu-cluster/overrides.env with the three
swaps. Nothing in the rendered scripts is edited.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from localcluster import profile
from model import tags as node_tags
from localcluster.nodes import IMDS_PORT, Cluster, Node

ENTRY_POINT = "/opt/gpu-cluster/bin/gpu-cluster-boot"
SCRIPTS_DIR = "/var/lib/cloud/instance/scripts"  # where cloud-init keeps x-shellscript parts
OVERRIDES_PATH = "/etc/gpu-cluster/overrides.env"
# The three documented swaps (docs/node-contract.md), and nothing else.
OVERRIDES = {
    "AWS_EC2_METADATA_SERVICE_ENDPOINT": f"http://127.0.0.1:{IMDS_PORT}",
    "GPU_CLUSTER_SERVICE_MANAGER": "direct",
    "GPU_CLUSTER_PACKAGES": "preinstalled",
}
BOOT_LOG = "/var/log/gpu-cluster/boot.log"
LAUNCH_PARALLEL = 4
STATUS = "/var/lib/gpu-cluster/status"
# The entry point's lines in boot.log: "<ts> [boot] end 10-identity ok after 3s",
# "<ts> [boot] FAILED 30-fsx after 0s: <reason>"; steps log "<ts> [NN-step] ...".
STEP_LINE = re.compile(r"^\S+ \[(?P<who>[^\]]+)\] (?P<msg>.*)$")
STEP_END = re.compile(r"^(?:end (?P<ok>\S+) ok|FAILED (?P<failed>\S+)) after (?P<secs>\d+)s(?:: (?P<reason>.*))?$")
WAIT_DONE = re.compile(r"done waiting after (\d+)s: (.*)")


def overrides_env() -> bytes:
    return "".join(f"{k}={v}\n" for k, v in OVERRIDES.items()).encode()


@dataclass
class StepResult:
    step: str
    state: str
    seconds: float | None


@dataclass
class BootWatch:
    """What one node's boot log says so far."""
    node: Node
    proc: subprocess.Popen | None
    offset: int = 0
    steps: list[StepResult] = field(default_factory=list)
    waits: list[tuple[str, str, float]] = field(default_factory=list)  # step, what, seconds
    skipped_in: dict = field(default_factory=dict)
    rc: int | None = None
    finished: float | None = None


class LocalCluster:
    def __init__(self, name: str = "local", subnet: int = 0, out=print):
        self.c = Cluster(name, subnet)
        self.name = name
        self.out = out
        self.watches: dict[str, BootWatch] = {}
        self.seen_skips: set[tuple[str, str]] = set()
        self.launch_seconds = 0.0

    # ---- user data -----------------------------------------------------------------
    @property
    def user_data_file(self) -> Path:
        return self.c.root / "user-data.bin"

    @property
    def payload_dir(self) -> Path:
        return self.c.root / "payload"

    def render(self, nodes: int) -> profile.UserData:
        ud = profile.render(self.name, nodes, str(self.payload_dir))
        self.c.root.mkdir(parents=True, exist_ok=True)
        self.user_data_file.write_bytes(ud.raw)
        if ud.payload is not None:
            self.payload_dir.mkdir(exist_ok=True)
            (self.payload_dir / f"{ud.payload[0]}.tar.gz").write_bytes(ud.payload[1])
        (self.c.root / "expected-nodes").write_text(f"{nodes}\n")
        problems = profile.parity_problems(ud)
        via = (f", {len(profile.payload_files(ud.payload[1]))} more in a {len(ud.payload[1])}-byte payload "
               f"(file:// stand-in for S3)" if ud.payload else "")
        self.out(f"user data: {len(ud.raw)} bytes (gzip), {len(ud.files)} files in write_files{via}, "
                 f"{len(ud.scripts)} boot script(s)")
        self.out(profile.PROFILE_NOTE + f"; Slurm cgroup plugin {profile.cgroup_plugin()}")
        for p in problems:
            self.out(f"  WARNING parity: {p}")
        return ud

    def shipped(self) -> tuple[dict, list, list[bytes]]:
        return profile.parse_user_data(self.user_data_file.read_bytes())

    def expected_nodes(self) -> int:
        return int((self.c.root / "expected-nodes").read_text())

    # ---- nodes -------------------------------------------------------------------------
    def launch(self, role: str, *, fsx: bool = True, extra: dict[str, tuple[bytes, int, str]] | None = None,
               expected: int | None = None) -> BootWatch:
        """Create a node from the kept user data and start its boot (like an ASG launch)."""
        files, runcmd, scripts = self.shipped()
        to_write = {p: (f.content, f.permissions, f.owner) for p, f in files.items()}
        # cloud-init keeps x-shellscript parts as files and runs them after write_files.
        for i, script in enumerate(scripts):
            to_write[f"{SCRIPTS_DIR}/part-{i + 1:03d}"] = (script, 0o700, "root:root")
        to_write[OVERRIDES_PATH] = (overrides_env(), 0o644, "root:root")
        to_write.update(extra or {})
        tags = node_tags.identity_tags(self.name, role, expected or self.expected_nodes(), node_tags.ON_DEMAND)
        node = self.c.create_node(role, to_write, fsx=fsx, tags=tags, az=profile.AZ)
        proc = self.c.start_boot(node, boot_command(runcmd, len(scripts)))
        w = BootWatch(node, proc)
        with self.c.lock:
            self.watches[node.hostname] = w
        return w

    def up(self, n: int, *, timeout: float = 600) -> float:
        if n < 2:
            raise SystemExit("a local cluster needs at least 2 nodes (a controller and a worker)")
        t0 = time.monotonic()
        self.render(n)
        self.out(f"starting {n} nodes: network namespaces on 10.77.{self.c.subnet}.0/24, "
                 f"IMDS stand-in on 127.0.0.1:{IMDS_PORT} in each, shared /fsx")
        self.launch("controller", expected=n)
        # Workers launch a few at a time, like an Auto Scaling group filling up; each
        # starts booting as soon as its namespaces exist.
        with ThreadPoolExecutor(max_workers=LAUNCH_PARALLEL) as pool:
            for f in [pool.submit(self.launch, "worker", expected=n) for _ in range(n - 1)]:
                f.result()
        self.launch_seconds = time.monotonic() - t0
        self.out(f"{n} nodes started in {self.launch_seconds:.1f}s; booting:")
        self.watch(timeout=timeout)
        failed = [w for w in self.watches.values() if w.rc != 0]
        if failed:
            for w in failed:
                self.out(f"{w.node.hostname}: boot FAILED (exit {w.rc}); last log lines:")
                for line in self.log_tail(w.node, 15):
                    self.out(f"    {line}")
            raise SystemExit(1)
        self.wait_idle(len(self.c.nodes), timeout=max(30.0, timeout - (time.monotonic() - t0)))
        return time.monotonic() - t0

    # ---- watching ------------------------------------------------------------------
    def log_tail(self, node: Node, n: int) -> list[str]:
        p = node.upper(BOOT_LOG)
        lines = p.read_text(errors="replace").splitlines() if p.exists() else []
        if not lines:
            c = node.path / "console.log"
            lines = c.read_text(errors="replace").splitlines() if c.exists() else []
        return lines[-n:]

    def poll(self, w: BootWatch) -> None:
        p = w.node.upper(BOOT_LOG)
        if p.exists():
            with open(p, "rb") as f:
                f.seek(w.offset)
                chunk = f.read()
            cut = chunk.rfind(b"\n") + 1
            w.offset += cut
            for raw in chunk[:cut].decode(errors="replace").splitlines():
                self._line(w, raw)
        if w.proc is not None and w.rc is None and w.proc.poll() is not None:
            w.rc = w.proc.returncode
            w.finished = time.time()

    def _line(self, w: BootWatch, raw: str) -> None:
        m = STEP_LINE.match(raw)
        if not m:
            return
        who, msg = m.group("who"), m.group("msg")
        wd = WAIT_DONE.search(msg)
        if wd:
            w.waits.append((who, wd.group(2), float(wd.group(1))))
        e = STEP_END.match(msg) if who == "boot" else None
        if e:
            step = e.group("ok") or e.group("failed")
            r = StepResult(step, "ok" if e.group("ok") else "failed", float(e.group("secs")))
            w.steps.append(r)
            skips = w.skipped_in.pop(step, [])
            note = f"  {e.group('reason')}" if e.group("reason") else ""
            new = [k for k in skips if (step, k) not in self.seen_skips]
            self.seen_skips.update((step, k) for k in skips)
            if new:  # each skip is said once per bring-up, by the first node that made it
                note += "  (skipped: " + "; ".join(new) + ")"
            self.out(f"  {w.node.hostname:<15} {step:<13} {r.state:<6} {r.seconds:4.0f}s{note}")
        elif msg.startswith("SKIPPED: "):
            w.skipped_in.setdefault(who, []).append(re.sub(r" \(GPU_CLUSTER_PACKAGES=preinstalled\)$", "",
                                                           msg[len("SKIPPED: "):]))

    def watch(self, watches: list[BootWatch] | None = None, timeout: float = 600) -> None:
        ws = watches if watches is not None else list(self.watches.values())
        deadline = time.monotonic() + timeout
        while True:
            for w in ws:
                self.poll(w)
            if all(w.rc is not None for w in ws):
                break
            if time.monotonic() > deadline:
                for w in ws:
                    if w.rc is None:
                        self.out(f"{w.node.hostname}: boot still running after {timeout:.0f}s")
                break
            time.sleep(0.25)
        for w in ws:
            self.poll(w)

    # ---- Slurm, from the controller --------------------------------------------------
    def ctl(self, *argv: str, timeout: float = 60, check: bool = False) -> subprocess.CompletedProcess:
        return self.c.run(self.c.controller(), list(argv), timeout=timeout, check=check)

    def node_states(self) -> dict[str, str]:
        r = self.ctl("sinfo", "-h", "-N", "-o", "%N %t")
        states = {}
        for line in r.stdout.splitlines():
            parts = line.split()
            if len(parts) == 2:
                states[parts[0]] = parts[1]
        return states

    def wait_idle(self, count: int, timeout: float = 120) -> dict[str, str]:
        deadline = time.monotonic() + timeout
        while True:
            states = self.node_states()
            idle = [n for n, s in states.items() if s in ("idle", "mix", "alloc")]
            if len(idle) >= count:
                return states
            if time.monotonic() > deadline:
                raise TimeoutError(f"only {len(idle)}/{count} nodes idle after {timeout:.0f}s: {states}")
            time.sleep(0.5)

    def show(self) -> None:
        n = len(self.c.nodes)
        # The hand-off step submitted the validation job the moment all nodes were idle;
        # let it finish first so sinfo shows the nodes idle again.
        self.validation_job()
        self.out("\n$ sinfo")
        self.out(self.ctl("sinfo").stdout.rstrip())
        self.out("")
        self.show_srun()
        self.out("\n$ sbatch (job output below)")
        self.out(self.sbatch_demo(n).rstrip())
        self.out("\n$ first-boot validation report (job submitted by the controller's 95-handoff step)")
        self.out(self.validation_report())

    def show_srun(self) -> None:
        n = len(self.c.nodes)
        self.out(f"$ srun -N{n} hostname")
        r = self.ctl("srun", f"-N{n}", "--time=1", "hostname", timeout=120)
        self.out((r.stdout + r.stderr).rstrip())

    def sbatch_demo(self, n: int, timeout: float = 120) -> str:
        script = ("#!/bin/bash\n"
                  f"#SBATCH -N{n}\n#SBATCH --time=2\n#SBATCH -o /fsx/localcluster/job-%j.out\n"
                  "echo \"job $SLURM_JOB_ID on $SLURM_JOB_NODELIST\"\n"
                  "srun -l hostname\n")
        self.ctl("mkdir", "-p", "/fsx/localcluster")
        r = self.c.run(self.c.controller(), ["sbatch", "--parsable"], input=script)
        if r.returncode != 0:
            return f"sbatch failed: {r.stderr.strip()}"
        job = r.stdout.strip().split(";")[0]
        out = self.c.fsx_dir / "localcluster" / f"job-{job}.out"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            st = self.ctl("scontrol", "show", "job", job).stdout
            if re.search(r"JobState=(COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL)", st):
                break
            time.sleep(0.5)
        state = re.search(r"JobState=(\S+)", st)
        body = out.read_text() if out.exists() else "(no output file)"
        return f"job {job}: {state.group(1) if state else '?'}\n{body}"

    def validation_dir(self) -> Path:
        return self.c.fsx_dir / ".gpu-cluster" / self.name / "validation"

    def validation_job(self, timeout: float = 300) -> str | None:
        """Wait for the first-boot validation job (submitted by the controller's hand-off) to end."""
        record = self.validation_dir() / "first-boot.jobid"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if record.exists() and record.read_text().strip():
                job = record.read_text().strip()
                st = self.ctl("scontrol", "show", "job", job).stdout
                if not st or re.search(r"JobState=(COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_ME)", st):
                    return job
            time.sleep(0.5)
        return None

    def validation_report(self, timeout: float = 300) -> str:
        """The first-boot validation job's human report (its Slurm output) and report.json."""
        job = self.validation_job(timeout)
        d = self.validation_dir()
        if job is None:
            return f"no finished first-boot validation job after {timeout:.0f}s (see {d})"
        out = d / f"slurm-{job}.out"
        text = out.read_text(errors="replace") if out.exists() else ""
        start = text.find("gpu-cluster validation ")
        body = text[start:] if start >= 0 else text
        reports = sorted(d.glob("*/report.json"), key=lambda p: p.stat().st_mtime)
        where = f"\n(job {job}; machine-readable: {reports[-1].relative_to(self.c.fsx_dir.parent)})" if reports else ""
        return body.rstrip() + where

    # ---- operations ----------------------------------------------------------------
    def replace(self, hostname: str, timeout: float = 300) -> BootWatch:
        """Destroy a node and launch a fresh one (new IP, name, instance id) in its place."""
        old = self.c.nodes.get(hostname)
        if old is None:
            raise SystemExit(f"no node {hostname} in local cluster '{self.name}'")
        role = old.role
        self.out(f"destroying {hostname} ({old.instance_id}, {old.ip})")
        self.c.kill_node(old)
        if role != "controller":
            # A destroyed dynamic node stays "idle" in slurmctld until SlurmdTimeout and
            # jobs would be sent to it; the replace command removes it, as an operator would.
            self.forget_node(hostname)
        w = self.launch(role)
        self.out(f"launched {w.node.hostname} ({w.node.instance_id}, {w.node.ip}) from the same user data")
        self.watch([w], timeout=timeout)
        if role == "controller" and w.rc == 0:
            # The new controller restored the old one's state from /fsx, its node included.
            self.forget_node(hostname)
        return w

    def forget_node(self, hostname: str, timeout: float = 30) -> bool:
        """Remove a destroyed node from slurmctld (down first if a job still holds it)."""
        deadline = time.monotonic() + timeout
        while True:
            r = self.ctl("scontrol", "delete", f"nodename={hostname}")
            if r.returncode == 0 or "Invalid node name" in r.stderr:
                self.out(f"removed {hostname} from Slurm (scontrol delete nodename={hostname})")
                return True
            if time.monotonic() > deadline:
                self.out(f"could not remove {hostname} from Slurm: {r.stderr.strip()}")
                return False
            self.ctl("scontrol", "update", f"nodename={hostname}", "state=down", "reason=instance destroyed")
            time.sleep(0.5)

    def status(self) -> None:
        if not self.c.nodes:
            self.out(f"local cluster '{self.name}': not running")
            return
        self.out(f"local cluster '{self.name}': {len(self.c.nodes)} nodes, state in {self.c.root}")
        for node in self.c.nodes.values():
            status = "-"
            st = node.upper(STATUS)
            if st.exists():
                try:
                    j = json.loads(st.read_text())
                    status = f"{j.get('step')} {j.get('state')}: {j.get('reason')}"
                except ValueError:
                    status = st.read_text().strip()[:200]
            alive = Path(f"/proc/{node.init_pid}").exists()
            self.out(f"  {node.hostname:<16} {node.ip:<12} {node.role:<10} {node.instance_id} "
                     f"{'up' if alive else 'GONE'}  status: {status}")
        try:
            self.out(self.ctl("sinfo", timeout=10).stdout.rstrip())
        except Exception as e:  # a status view never fails on a half-dead cluster
            self.out(f"sinfo: {e}")


def boot_command(runcmd: list, n_scripts: int = 0) -> str:
    """What cloud-init would run: the user data's scripts, else runcmd, else the entry point."""
    if n_scripts:
        return "\n".join(f"{SCRIPTS_DIR}/part-{i + 1:03d} || exit $?" for i in range(n_scripts))
    cmds = []
    for item in runcmd:
        cmds.append(shlex.join(str(a) for a in item) if isinstance(item, list) else str(item))
    if any(ENTRY_POINT in c for c in cmds):
        return "set -e\n" + "\n".join(cmds)
    return ENTRY_POINT


# The boot's bounded polls ("waiting ... for WHAT"), grouped by what they wait for.
WAIT_KINDS = (
    ("idle node(s) in partition", "hand-off: all nodes idle (controller)"),
    ("the controller to create the munge key", "controller: munge key fingerprint"),
    ("the munge key encrypted to this node", "munge key through the join path"),
    ("the controller to publish", "controller: controller.env"),
    ("to answer (scontrol ping)", "slurmctld answering"),
    ("slurmctld to register", "registration in slurmctld"),
    ("munged to answer", "local munged start"),
)
HANDOFF = WAIT_KINDS[0][1]


def wait_kind(what: str) -> str:
    for needle, kind in WAIT_KINDS:
        if needle in what:
            return kind
    return what.split(" (")[0]


def summary(watches: list[BootWatch]) -> dict:
    """Per node: step times, and its boot split into coordination waits and work.

    The controller's hand-off wait (for every node to be idle) is reported apart: it is
    the cluster's bring-up, not this node's, and would otherwise count twice.
    """
    rows = {}
    for w in watches:
        total = sum(s.seconds or 0 for s in w.steps)
        by_kind: dict[str, float] = {}
        for _, what, secs in w.waits:
            k = wait_kind(what)
            by_kind[k] = by_kind.get(k, 0.0) + secs
        handoff = by_kind.get(HANDOFF, 0.0)
        waited = sum(v for k, v in by_kind.items() if k != HANDOFF)
        rows[w.node.hostname] = {"role": w.node.role, "steps": {s.step: s.seconds for s in w.steps},
                                 "boot": total - handoff, "waits": waited, "handoff": handoff,
                                 "work": max(0.0, total - handoff - waited), "wait_kinds": by_kind}
    return rows


if __name__ == "__main__":
    sys.exit("use: python -m localcluster")
