"""gpu-cluster deep DCGM runs on idle nodes (health.dcgm_idle, docs/health.md).

    dcgm_idle.py tick                  the controller's pass: follow the runs, start new ones
    dcgm_idle.py run --level N --out F on the node under test, inside its run's reservation:
                                       `dcgmi diag -r N`, the verdict written to F
    dcgm_idle.py status                the record (runs, last verdicts, history) as JSON

DCGM level 2 stresses the GPUs for about 2.5-10.5 minutes, level 3 longer [DCGM-DIAG]: not
for the health program (Slurm kills it at 60 s), the boot or the replacement path. The
controller's agent loop (lib/dcgm.sh dcgm_tick) runs one pass at most every
DCGM_IDLE_INTERVAL s (default 60):

1. Runs in progress: a run whose verdict file exists is finished: on `fail` the node is
   drained with `gpu-cluster dcgm: level N: <the failed test>` (the repair agent treats
   that prefix as hardware) unless someone else drained it first; the reservation is
   deleted and the verdict recorded. A job that left the queue without a verdict, or ran
   past the bound, ends the run without a verdict (no drain: a tool problem is not a GPU
   verdict). A run yields when jobs wait for nodes (pending for Resources, Priority or
   ReqNodeNotAvail): its job is cancelled, the node is free again at once, and it is
   tried at a later pass.
2. New runs, while fewer than DCGM_IDLE_MAX_NODES are in progress and no job waits for
   nodes: a node that is `idle` (not drained, not reserved, no job), idle for
   DCGM_IDLE_MINUTES (Slurm's LastBusyTime), whose last run is DCGM_IDLE_EVERY_HOURS old,
   whose last health record does not say dcgmi is missing, outside its block's end
   window. The run first creates the reservation `gpu-cluster-dcgm-<node>` on that node
   for the bound (without IGNORE_JOBS Slurm refuses it if a job started there since the
   node was read: no job ever shares the node with the stress test), then submits the
   `run` half as a batch job inside it.

Why a reservation rather than "run when idle, drain on failure": a level 2 run takes
minutes, and any job the scheduler put on the node meanwhile would share GPUs with the
stress test: the job slows down and the diagnostic's figures lie. The reservation makes
the node unavailable for those minutes; yielding keeps it from holding work back.

State and history under FSX_ROOT/dcgm/ (state.json, history.jsonl, results/). Time is an
input (`--now EPOCH`, tests). Stdlib only: the controller runs it with python3.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Any

try:  # beside repair.py on the node, a package in the repository
    import repair  # type: ignore[import-not-found]
except ImportError:
    from nodeside import repair

DCGM_PREFIX = repair.DCGM_PREFIX
RESERVATION_PREFIX = "gpu-cluster-dcgm-"
JOB_NAME = "gpu-cluster-dcgm"
# Pending reasons of a job that waits for nodes (a held, dependent or scheduled job does not).
WAITING_FOR_NODES = re.compile(r"^(Resources|Priority|ReqNodeNotAvail|Nodes_required)")
MISSING = "dcgmi not installed"
GRACE = 120  # seconds past the bound before a run is given up


@dataclass(frozen=True)
class Settings:
    level: int = 0
    every: int = 24 * 3600
    idle: int = 30 * 60
    max_nodes: int = 1
    limit_minutes: int = 20
    block_end_margin: int = 40 * 60
    fsx_root: str = "/fsx/.gpu-cluster/cluster"
    health_records: str = ""
    program: str = "/opt/gpu-cluster/lib/dcgm_idle.py"

    @classmethod
    def from_env(cls, env: dict[str, str]) -> Settings:
        def num(key: str, default: int) -> int:
            try:
                return int(env.get(key, "") or default)
            except ValueError:
                return default

        fsx_root = env.get("FSX_ROOT", cls.fsx_root)
        return cls(
            level=num("DCGM_IDLE_LEVEL", 0),
            every=num("DCGM_IDLE_EVERY_HOURS", 24) * 3600,
            idle=num("DCGM_IDLE_MINUTES", 30) * 60,
            max_nodes=num("DCGM_IDLE_MAX_NODES", 1),
            limit_minutes=num("DCGM_IDLE_TIME_LIMIT_MINUTES", 20),
            block_end_margin=max(31, num("BLOCK_END_MARGIN_MINUTES", 40)) * 60,
            fsx_root=fsx_root,
            health_records=env.get("HEALTH_RECORDS") or os.path.join(fsx_root, "health"),
            program=env.get("DCGM_IDLE_PROGRAM", cls.program),
        )

    @property
    def dir(self) -> str:
        return os.path.join(self.fsx_root, "dcgm")


# --- Slurm ---------------------------------------------------------------------------------


def _slurm_time(text: str) -> int | None:
    """Slurm's local timestamp (2026-01-01T12:00:00) as epoch seconds; None for Unknown/None."""
    try:
        return int(time.mktime(time.strptime(text, "%Y-%m-%dT%H:%M:%S")))
    except ValueError:
        return None


class Slurm(repair.Slurm):
    """The Slurm clients a pass uses (tests pass a fake with the same methods)."""

    def last_busy(self) -> dict[str, int | None]:
        """Node -> when it last ran a job (LastBusyTime, Slurm 20.11 and later)."""
        rc, out = self._run("scontrol", "-o", "show", "node")
        if rc != 0:
            return {}
        found = {}
        for line in out.splitlines():
            name = re.search(r"NodeName=(\S+)", line)
            busy = re.search(r"LastBusyTime=(\S+)", line)
            if name:
                found[name.group(1)] = _slurm_time(busy.group(1)) if busy else None
        return found

    def waiting_for_nodes(self) -> list[str]:
        rc, out = self._run("squeue", "-h", "-t", "PENDING", "-o", "%i|%r")
        if rc != 0:
            return []
        return [j for j, _, r in (line.partition("|") for line in out.splitlines()) if WAITING_FOR_NODES.match(r)]

    def job_state(self, job: str) -> str:
        """The job's state, '' once it left the queue."""
        rc, out = self._run("squeue", "-h", "-j", job, "-o", "%T")
        return out.strip() if rc == 0 else ""

    def reserve(self, name: str, node: str, minutes: int) -> str:
        rc, out = self._run(
            "scontrol",
            "create",
            "reservation",
            f"reservationname={name}",
            "starttime=now",
            f"duration={minutes}",
            f"nodes={node}",
            "users=root",
        )
        return "" if rc == 0 else out or f"exit {rc}"

    def unreserve(self, name: str) -> str:
        rc, out = self._run("scontrol", "delete", f"reservationname={name}")
        return "" if rc == 0 or "does not exist" in out.lower() else out or f"exit {rc}"

    def submit(self, reservation: str, node: str, minutes: int, output: str, command: str) -> tuple[str, str]:
        """(job id, '') or ('', why)."""
        rc, out = self._run(
            "sbatch",
            "--parsable",
            f"--reservation={reservation}",
            "-w",
            node,
            "-N1",
            "--exclusive",
            f"--time={minutes}",
            f"--job-name={JOB_NAME}",
            "-o",
            output,
            "--wrap",
            command,
        )
        job = out.split(";")[0].strip() if rc == 0 else ""
        return (job, "") if job.isdigit() else ("", out or f"exit {rc}")

    def cancel(self, job: str) -> str:
        rc, out = self._run("scancel", job)
        return "" if rc == 0 else out or f"exit {rc}"

    def drain(self, node: str, reason: str) -> str:
        return self.set_reason(node, reason)


# --- the controller's pass ----------------------------------------------------------------------


@dataclass
class Runs:
    settings: Settings
    slurm: Any
    now: int
    state: dict[str, Any] = field(default_factory=lambda: {"runs": {}, "last": {}})
    lines: list[str] = field(default_factory=list)
    history: list[dict[str, Any]] = field(default_factory=list)

    def record(self, node: str, action: str, detail: str, **extra: Any) -> None:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.now))
        self.history.append({"time": stamp, "node": node, "action": action, "detail": detail, **extra})
        self.lines.append(f"dcgm: {node}: {action}: {detail}")

    def tick(self) -> None:
        nodes = self.slurm.nodes()
        if nodes is None:
            self.lines.append("dcgm: sinfo did not answer; nothing done this pass")
            return
        waiting = self.slurm.waiting_for_nodes()
        for node in sorted(self.state["runs"]):
            self.follow(node, nodes.get(node), waiting)
        if waiting:
            return
        free = self.settings.max_nodes - len(self.state["runs"])
        if free > 0:
            for node in self.due(nodes)[:free]:
                self.start(node)

    # ---- runs in progress
    def follow(self, name: str, node: repair.Node | None, waiting: list[str]) -> None:
        run = self.state["runs"][name]
        verdict = repair.load_json(run["result"], None)
        if isinstance(verdict, dict) and verdict.get("status") in ("pass", "fail", "skip"):
            self.finish(name, node, run, verdict)
            return
        state = self.slurm.job_state(run["job"])
        if not state:
            self.end(name, run, "no-verdict", f"job {run['job']} ended without a verdict (log {run['log']})")
        elif self.now > run["start"] + self.settings.limit_minutes * 60 + GRACE:
            self.slurm.cancel(run["job"])
            self.end(name, run, "no-verdict", f"job {run['job']} ran past {self.settings.limit_minutes} min; cancelled")
        elif waiting:
            self.slurm.cancel(run["job"])
            self.end(name, run, "yielded", f"job(s) {','.join(waiting[:5])} wait for nodes; job {run['job']} cancelled")

    def finish(self, name: str, node: repair.Node | None, run: dict[str, Any], verdict: dict[str, Any]) -> None:
        status, detail = verdict["status"], str(verdict.get("detail", ""))
        self.slurm.unreserve(run["resv"])
        del self.state["runs"][name]
        self.state["last"][name] = {"at": self.now, "status": status, "detail": detail, "level": run["level"]}
        if status != "fail":
            self.record(name, status, f"level {run['level']}: {detail}")
            return
        reason = f"{DCGM_PREFIX}level {run['level']}: {detail}".replace('"', "'")[: repair.REASON_MAX]
        if node is not None and node.drained and node.reason and not node.reason.startswith(DCGM_PREFIX):
            self.record(name, "fail", f"level {run['level']}: {detail}; already drained by someone else: {node.reason}")
            return
        err = self.slurm.drain(name, reason)
        self.record(name, "fail", f"level {run['level']}: {detail}; " + (f"drain failed: {err}" if err else "drained"))

    def end(self, name: str, run: dict[str, Any], action: str, detail: str) -> None:
        """A run over without a verdict: free the node; a yielded run keeps its old last time."""
        self.slurm.unreserve(run["resv"])
        del self.state["runs"][name]
        if action != "yielded":
            self.state["last"][name] = {"at": self.now, "status": action, "detail": detail, "level": run["level"]}
        self.record(name, action, detail)

    # ---- new runs
    def due(self, nodes: dict[str, repair.Node]) -> list[str]:
        """Idle nodes whose turn it is, the longest untested first."""
        s, busy = self.settings, self.slurm.last_busy()
        out = []
        for name, node in nodes.items():
            if node.state != "idle" or name in self.state["runs"]:
                continue
            last = self.state["last"].get(name, {}).get("at", 0)
            if self.now - last < s.every or self.dcgmi_missing(name):
                continue
            since_busy = busy.get(name)
            if since_busy is None or self.now - since_busy < s.idle:
                continue
            end = repair.block_end(s.fsx_root, node.block)
            if end is not None and self.now >= end - s.block_end_margin - s.limit_minutes * 60:
                continue
            out.append((last, name))
        return [name for _, name in sorted(out)]

    def dcgmi_missing(self, name: str) -> bool:
        """The node's last health record says it has no dcgmi: skipped, said once per node."""
        record = repair.load_json(os.path.join(self.settings.health_records, f"{name}.json"), {})
        checks = record.get("checks", []) if isinstance(record, dict) else []
        missing = any(c.get("check") == "dcgm" and c.get("detail") == MISSING for c in checks if isinstance(c, dict))
        said = self.state.setdefault("said", {})
        if missing and said.get(name) != MISSING:
            said[name] = MISSING
            self.record(name, "skip", f"{MISSING} (its health record); no deep diagnostic")
        elif not missing:
            said.pop(name, None)
        return missing

    def start(self, name: str) -> None:
        s = self.settings
        resv = f"{RESERVATION_PREFIX}{name}"
        err = self.slurm.reserve(resv, name, s.limit_minutes)
        if err:  # a job started there since sinfo, or Slurm refuses: try at a later pass
            self.record(name, "not-started", f"could not reserve it: {err}")
            return
        result = os.path.join(s.dir, "results", f"{name}-{self.now}.json")
        log = os.path.join(s.dir, f"{name}-%j.out")
        command = f"python3 {s.program} run --level {s.level} --out {result}"
        job, why = self.slurm.submit(resv, name, s.limit_minutes, log, command)
        if not job:
            self.slurm.unreserve(resv)
            self.record(name, "not-started", f"sbatch failed: {why}")
            return
        self.state["runs"][name] = {
            "job": job,
            "resv": resv,
            "start": self.now,
            "level": s.level,
            "result": result,
            "log": log.replace("%j", job),
        }
        self.record(name, "started", f"level {s.level}, job {job} in reservation {resv} (bound {s.limit_minutes} min)")


# --- the node's half: the diagnostic itself -------------------------------------------------------


def verdict(rc: int | None, out: str, err: str) -> tuple[str, str]:
    """(pass|fail|skip, detail) of one `dcgmi diag` run: a test reported `Fail` is a GPU
    verdict; an error exit without one (the host engine is down) is a tool problem."""
    if rc is None:
        return "skip", MISSING
    failed = [" ".join(line.replace("|", " ").split()) for line in out.splitlines() if re.search(r"\bFail", line)]
    if failed:
        more = f" (+{len(failed) - 1} more)" if len(failed) > 1 else ""
        return "fail", f"{failed[0][:160]}{more} (dcgmi diag)"
    if rc != 0:
        return "skip", f"dcgmi diag exit {rc}: {' '.join((err or out).split())[-160:]}"
    return "pass", "every test passed (dcgmi diag)"


def run_diag(level: int, out_path: str, timeout: int) -> dict[str, Any]:
    t0 = time.monotonic()
    if shutil.which("dcgmi") is None:
        rc, out, err = None, "", ""
    else:
        try:
            p = subprocess.run(["dcgmi", "diag", "-r", str(level)], capture_output=True, text=True, timeout=timeout)
            rc, out, err = p.returncode, p.stdout, p.stderr
        except subprocess.TimeoutExpired:
            rc, out, err = -1, "", f"did not finish in {timeout} s"
    status, detail = verdict(rc, out, err)
    doc = {
        "node": os.environ.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0],
        "level": level,
        "status": status,
        "detail": detail,
        "job": os.environ.get("SLURM_JOB_ID", ""),
        "seconds": round(time.monotonic() - t0, 1),
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    repair.write_json(out_path, doc)
    print(out, end="")
    return doc


# --- files and the command line -------------------------------------------------------------------


def load_state(settings: Settings) -> dict[str, Any]:
    state = repair.load_json(os.path.join(settings.dir, "state.json"), None)
    return state if isinstance(state, dict) else {"runs": {}, "last": {}}


def save(runs: Runs) -> None:
    d = runs.settings.dir
    repair.write_json(os.path.join(d, "state.json"), runs.state)
    if runs.history:
        with open(os.path.join(d, "history.jsonl"), "a") as f:
            for h in runs.history:
                f.write(json.dumps(h, sort_keys=True) + "\n")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="dcgm_idle.py", description="deep DCGM runs on idle nodes")
    p.add_argument("command", choices=("tick", "run", "status"))
    p.add_argument("--now", type=int, help="the time (epoch seconds); default the clock")
    p.add_argument("--level", type=int, choices=(2, 3), help="run: the DCGM run level")
    p.add_argument("--out", help="run: where the verdict goes")
    a = p.parse_args(argv)
    settings = Settings.from_env(dict(os.environ))
    if a.command == "run":
        if not a.level or not a.out:
            p.error("run needs --level and --out")
        run_diag(a.level, a.out, settings.limit_minutes * 60)
        return 0
    if a.command == "status":
        state = load_state(settings)
        history = repair.read_history(settings.dir, 100)
        print(json.dumps({"level": settings.level, **state, "history": history}, indent=1, sort_keys=True))
        return 0
    if settings.level not in (2, 3):
        return 0
    runs = Runs(settings, Slurm(), a.now if a.now is not None else int(time.time()), state=load_state(settings))
    runs.tick()
    try:
        save(runs)
    except OSError as e:
        runs.lines.append(f"dcgm: cannot write the record under {settings.dir}: {e}")
    for line in runs.lines:
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
