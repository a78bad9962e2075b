"""Munge key join at scale: N joiners at once against the real responder on a shared dir.

Every node but the first controller gets the cluster's munge key through the join path
(lib/munge-join.sh): it publishes a one-time certificate under FSX_ROOT/munge/requests,
the controller's responder (lib/munge-responder.sh) encrypts the key to it, and the
node decrypts its answer from FSX_ROOT/munge/responses. When a whole Capacity Block
starts, hundreds of nodes ask within seconds of each other. Goal (issue 9): at 1024
joiners, every joiner holds the key within 60 s.

What runs, all from the rendered node files (`render_userdata(...).files`), never copies:
- the responder: the shipped lib/munge-responder.sh as on the controller (identity
  NODE_ROLE=controller, the rendered cluster.env and its MUNGE_CONTROLLER_INTERVAL; only
  the documented overrides.env moves FSX_MOUNTPOINT/FSX_ROOT/MUNGE_KEY into the bench
  directory). There is no slurmctld here: `sinfo`/`scontrol` are stubs that report an
  empty cluster, so the controller's housekeeping (node reaper, block end, boot
  failures) runs and finds nothing to do;
- each joiner: one bash process with its own GPU_CLUSTER_STATE/RUN, its identity in the
  environment (no IMDS), sourcing the shipped step 40-munge.sh without its last line
  (`main "$@"`) and running its `join_cluster` as a worker does (request, then poll
  every 2 s until `try_collect` installs a key matching key.sha256);
- the shared "/fsx": a tmpfs mounted in a private mount namespace (the bench re-executes
  itself under `unshare --mount`), so nothing outlives the run.

Not timed: the joiners' one-time EC P-256 key pairs. Each node makes its own in
parallel on its own CPUs (a few milliseconds); here 1024 of them would share 2 cores. They
are made beforehand by the shipped `mj_request` (which reuses an existing pair), and
cached under /var/tmp for a day (the certificates are valid for two).

By default the responder is pinned to CPU 0 and all joiners to the other CPUs, so the
responder is measured like a controller with a core of its own while the joiner herd
(on EC2: 1024 separate machines) shares what is left.

Figures per size: seconds from the start until every joiner holds the key; per-joiner
p50/p95/max; responder CPU (total, per request, share of one core); joiners' CPU; and
a profile of one responder pass over a batch of requests, per command (bash xtrace
timestamps on the shipped `mj_answer`), as shipped and with SSL_CERT_FILE=/dev/null
(what the responder pays for OpenSSL loading the system CA bundle).

Usage: python3 bench/bench_munge_join.py [--joiners 256,1024] [--goal 60] [--json out.json]
         [--controller-interval S] [--responder-env K=V] [--no-pin] [--profile-requests 64]
         [--timeout 300] [--strict] [--keep] [--key-cache DIR]
(root; Debian's munge (the munge user, mungekey) and openssl installed).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import fcntl
import hashlib
import json
import os
import pwd
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from model.catalog import CATALOG  # noqa: E402
from model.config import parse_config  # noqa: E402
from userdata import layout  # noqa: E402
from userdata.render import FsxEndpoint, render_userdata  # noqa: E402

NAME = "bench"
INSTANCE_TYPE = "p5.48xlarge"
KEY_CACHE = Path("/var/tmp/gpu-cluster-bench-munge-keys")
KEY_CACHE_MAX_AGE = 86400  # certificates are made for 2 days (mj_request): reuse for 1
NS_MARK = "GPU_CLUSTER_BENCH_MUNGE_NS"
STEP40 = f"{layout.STEPS}/40-munge.sh"
RESPONDER = f"{layout.LIB}/munge-responder.sh"

# One joiner: the shipped step 40's functions, run as a worker runs them.
JOINER = r"""#!/usr/bin/env bash
set -euo pipefail
set -a
. "$GPU_CLUSTER_ETC/cluster.env"
. "$GPU_CLUSTER_ETC/overrides.env"
set +a
# per joiner: its own key file (the node's /etc/munge/munge.key) and the bench's bound
MUNGE_KEY=$GPU_CLUSTER_STATE/munge.key
MUNGE_JOIN_TIMEOUT=$BENCH_JOIN_TIMEOUT
. "$BENCH_STEP40_LIB"
: >"$BENCH_READY"
flock -s "$BENCH_GO" true
start=$EPOCHREALTIME
join_cluster
end=$EPOCHREALTIME
[[ $(key_fingerprint "$MUNGE_KEY") == "$(<"$M/key.sha256")" ]] || die "installed key does not match key.sha256"
printf '%s %s\n' "$start" "$end" >"$BENCH_RESULT"
"""

# Make (or keep) one-time key pairs with the shipped mj_request; publish to a scratch dir.
KEYGEN = r"""set -euo pipefail
. "$1/munge-join.sh"
cache=$2 scratch=$3
shift 3
for id in "$@"; do mj_request "$cache/$id" "$scratch" "$id"; done
"""

# One responder pass (the shipped mj_answer) under xtrace with timestamps.
PROFILE = r"""set -euo pipefail
. "$GPU_CLUSTER_HOME/lib/common.sh"
. "$GPU_CLUSTER_HOME/lib/munge-join.sh"
exec {BASH_XTRACEFD}>"$BENCH_TRACE"
PS4='+${EPOCHREALTIME} '
set -x
mj_answer "$1" "$2" "$3" 0
"""

STUB = "#!/bin/sh\n# bench: no slurmctld here; the controller's housekeeping sees an empty cluster\nexit 0\n"


def rendered_files(nodes: int) -> dict[str, bytes]:
    cfg = parse_config(
        {
            "name": NAME,
            "instance_type": INSTANCE_TYPE,
            "network": {"availability_zone": "us-east-2b"},
            "capacity": {"nodes": nodes},
        }
    )
    return render_userdata(
        cfg, CATALOG[INSTANCE_TYPE], FsxEndpoint("fs-0bench.fsx.example", "bench"), "s3://bench/payload-{sha256}.tar.gz"
    ).files


def env_value(text: str, key: str) -> str:
    for line in text.splitlines():
        if line.startswith(f"{key}="):
            return line.split("=", 1)[1]
    raise KeyError(f"cluster.env has no {key}")


def joiner_id(i: int) -> str:
    return f"i-bench{i:05d}"


def cpu_ticks(pid: int) -> int:
    """utime+stime+cutime+cstime of pid: itself and every child it has reaped."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(f) for f in fields[11:15])


def children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, max(0, round(q * (len(s) - 1))))]


def stop_group(proc: subprocess.Popen, grace: float = 5.0) -> None:
    """SIGTERM the process group we started, SIGKILL after `grace` s; reap."""
    if proc.poll() is not None:
        return
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


class Bench:
    """One bench directory: rendered node files, a tmpfs /fsx, the cluster's key."""

    def __init__(self, work: Path, files: dict[str, bytes], controller_interval: float | None, key_cache: Path):
        self.work, self.files, self.key_cache = work, files, key_cache
        self.home, self.fsx = work / "opt", work / "fsx"
        self.fsx_root = self.fsx / ".gpu-cluster" / NAME
        self.m = self.fsx_root / "munge"
        self.etc = work / "etc"
        self.stubs = work / "stubbin"
        self.joiners_dir = work / "joiners"
        self.cluster_env = files[layout.CLUSTER_ENV].decode()
        self.interval = controller_interval or float(env_value(self.cluster_env, "MUNGE_CONTROLLER_INTERVAL"))
        self.key = work / "controller" / "munge.key"
        self.started: list[int] = []

    def setup(self) -> None:
        for path, content in self.files.items():
            if path.startswith(layout.HOME + "/"):
                dest = self.home / path[len(layout.HOME) + 1 :]
                dest.parent.mkdir(parents=True, exist_ok=True)
                dest.write_bytes(content)
                dest.chmod(0o755 if content.startswith(b"#!") else 0o644)
        step40 = self.files[STEP40].decode()
        body, last = step40.rstrip("\n").rsplit("\n", 1)
        if last.strip() != 'main "$@"':
            raise SystemExit(
                f'{STEP40}: expected the last line to be `main "$@"` (the bench sources the '
                f"step's functions without running it), found {last!r}; update bench_munge_join.py"
            )
        (self.home / "bench-step40-functions.sh").write_text(body + "\n")
        self.etc.mkdir()
        (self.etc / "cluster.env").write_text(self.cluster_env)
        overrides = f"FSX_MOUNTPOINT={self.fsx}\nFSX_ROOT={self.fsx_root}\nMUNGE_KEY={self.key}\n"
        if self.interval != float(env_value(self.cluster_env, "MUNGE_CONTROLLER_INTERVAL")):
            overrides += f"MUNGE_CONTROLLER_INTERVAL={self.interval:g}\n"
        (self.etc / "overrides.env").write_text(overrides)
        self.stubs.mkdir()
        for name in ("sinfo", "scontrol"):
            (self.stubs / name).write_text(STUB)
            (self.stubs / name).chmod(0o755)
        # the shared /fsx: a tmpfs (we are in a private mount namespace), laid out as step 30 does
        self.fsx.mkdir()
        subprocess.run(["mount", "-t", "tmpfs", "-o", "mode=0755,size=512m", "bench-fsx", str(self.fsx)], check=True)
        for d in ("munge/requests", "munge/responses", "slurmctld", "status", "validation"):
            (self.fsx_root / d).mkdir(parents=True, mode=0o700, exist_ok=True)
        # the controller made the cluster's key (step 40, new cluster) and published its fingerprint
        self.key.parent.mkdir()
        subprocess.run(["mungekey", "--create", f"--keyfile={self.key}"], check=True)
        shutil.chown(self.key, "munge", "munge")
        self.key.chmod(0o400)
        digest = hashlib.sha256(self.key.read_bytes()).hexdigest()
        (self.m / "key.generation").write_text("1\n")
        (self.m / "key.sha256").write_text(digest + "\n")
        self.joiners_dir.mkdir()

    def base_env(self) -> dict[str, str]:
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("GPU_CLUSTER", "AWS_EC2", "SLURM", "MUNGE", "FSX", "NODE_", "INSTANCE_ID"))
        }
        env.update(
            GPU_CLUSTER_HOME=str(self.home),
            GPU_CLUSTER_ETC=str(self.etc),
            GPU_CLUSTER_SERVICE_MANAGER="direct",
            GPU_CLUSTER_PACKAGES="preinstalled",
            PATH=f"{self.stubs}:{env.get('PATH', '/usr/sbin:/usr/bin:/sbin:/bin')}",
        )
        return env

    # --- the responder, as on the controller ----------------------------------------
    def start_responder(self, cpus: str | None, extra_env: dict[str, str]) -> subprocess.Popen:
        state, run, logs = (self.work / "controller" / d for d in ("state", "run", "log"))
        for d in (state, run, logs):
            d.mkdir(parents=True)
        (state / "identity.env").write_text(
            "INSTANCE_ID='i-benchctl'\nNODE_NAME='ctl'\nNODE_ROLE='controller'\n"
            "NODE_ADDR='127.0.0.1'\nGPU_CLUSTER_NODES='1'\n"
        )
        env = {
            **self.base_env(),
            "GPU_CLUSTER_STATE": str(state),
            "GPU_CLUSTER_RUN": str(run),
            "GPU_CLUSTER_LOG_DIR": str(logs),
            **extra_env,
        }
        argv = ["bash", str(self.home / RESPONDER[len(layout.HOME) + 1 :])]
        if cpus:
            argv = ["taskset", "-c", cpus, *argv]
        with open(self.responder_log, "wb") as log:
            proc = subprocess.Popen(
                argv, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        self.started.append(proc.pid)
        return proc

    @property
    def responder_log(self) -> Path:
        return self.work / "controller" / "responder.log"

    # --- joiners ----------------------------------------------------------------------
    def prepare_keys(self, n: int) -> tuple[int, float]:
        """One-time key pairs for joiners 0..n-1 in the key cache, made by the shipped mj_request.
        Returns (how many were made now, seconds it took)."""
        self.key_cache.mkdir(mode=0o700, exist_ok=True)
        now = time.time()
        todo = []
        for i in range(n):
            d = self.key_cache / joiner_id(i)
            pem = d / "join.pem"
            if not (pem.exists() and (d / "join.key").exists() and now - pem.stat().st_mtime < KEY_CACHE_MAX_AGE):
                shutil.rmtree(d, ignore_errors=True)
                todo.append(joiner_id(i))
        if not todo:
            return 0, 0.0
        t0 = time.monotonic()
        workers = os.cpu_count() or 1
        chunks = [todo[k::workers] for k in range(workers)]
        with tempfile.TemporaryDirectory(dir=self.work) as scratch:

            def run(ids: list[str]) -> None:
                if ids:
                    subprocess.run(
                        ["bash", "-c", KEYGEN, "keygen", str(self.home / "lib"), str(self.key_cache), scratch, *ids],
                        check=True,
                    )

            with concurrent.futures.ThreadPoolExecutor(workers) as pool:
                list(pool.map(run, chunks))
        return len(todo), time.monotonic() - t0

    def start_joiners(self, n: int, cpus: str | None, timeout: int, go: Path) -> list[subprocess.Popen]:
        base = self.base_env()
        procs = []
        for i in range(n):
            jid = joiner_id(i)
            root = self.joiners_dir / jid
            state, run = root / "state", root / "run"
            run.mkdir(parents=True)
            shutil.copytree(self.key_cache / jid, state / "munge-join")  # reused by mj_request
            env = {
                **base,
                "GPU_CLUSTER_STATE": str(state),
                "GPU_CLUSTER_RUN": str(run),
                "GPU_CLUSTER_LOG_DIR": str(root),
                "GC_STEP": "40-munge",
                # the identity step 10 would read from IMDS
                "INSTANCE_ID": jid,
                "NODE_NAME": f"bench{i:05d}",
                "NODE_ROLE": "worker",
                "NODE_ADDR": "127.0.0.1",
                "GPU_CLUSTER_NODES": str(n + 1),
                "BENCH_STEP40_LIB": str(self.home / "bench-step40-functions.sh"),
                "BENCH_JOIN_TIMEOUT": str(timeout),
                "BENCH_GO": str(go),
                "BENCH_READY": str(root / "ready"),
                "BENCH_RESULT": str(root / "result"),
            }
            argv = ["bash", "-c", JOINER, "joiner"]
            if cpus:
                argv = ["taskset", "-c", cpus, *argv]
            with open(root / "join.log", "wb") as log:
                p = subprocess.Popen(
                    argv,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            self.started.append(p.pid)
            procs.append(p)
        return procs

    def holds_key(self, i: int) -> bool:
        """The joiner installed exactly the cluster's key, owner munge, mode 0400."""
        k = self.joiners_dir / joiner_id(i) / "state" / "munge.key"
        if not k.exists():
            return False
        st = k.stat()
        return (
            k.read_bytes() == self.key.read_bytes()
            and st.st_mode & 0o777 == 0o400
            and st.st_uid == pwd.getpwnam("munge").pw_uid
        )

    def plaintext_key_on_fsx(self) -> list[str]:
        key = self.key.read_bytes()
        return [str(f) for f in self.fsx.rglob("*") if f.is_file() and key in f.read_bytes()]

    # --- profile: one responder pass per command ------------------------------------------
    def profile(self, n: int, extra_env: dict[str, str]) -> dict:
        req, resp = self.work / "profile" / "requests", self.work / "profile" / "responses"
        for d in (req, resp):
            shutil.rmtree(d, ignore_errors=True)
            d.mkdir(parents=True, mode=0o700)
        for i in range(n):
            shutil.copy(self.key_cache / joiner_id(i) / "join.pem", req / f"{joiner_id(i)}.pem")
        trace = self.work / "profile" / "trace"
        env = {**self.base_env(), "BENCH_TRACE": str(trace), **extra_env}
        t0 = time.monotonic()
        out = subprocess.run(
            ["bash", "-c", PROFILE, "profile", str(self.key), str(req), str(resp)],
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        wall = time.monotonic() - t0
        answered = int(out.stdout.strip() or 0)
        per_cmd: dict[str, float] = {}
        rows = []
        for line in trace.read_text(errors="replace").splitlines():
            stripped = line.lstrip("+")
            ts, _, cmd = stripped.partition(" ")
            try:
                rows.append((float(ts), cmd))
            except ValueError:
                continue  # a continuation line of a multi-line command
        for (ts, cmd), (nxt, _) in zip(rows, rows[1:], strict=False):
            words = cmd.split()
            name = " ".join(words[:2]) if words and words[0] == "openssl" else (words[0] if words else "?")
            if name.startswith(("((", "[[")):
                name = name[:2] + "...]]" if name.startswith("[[") else "((...))"
            per_cmd[name] = per_cmd.get(name, 0.0) + (nxt - ts)
        top = sorted(per_cmd.items(), key=lambda kv: -kv[1])[:8]
        return {
            "requests": n,
            "answered": answered,
            "wall_s": round(wall, 2),
            "ms_per_request": round(1000 * wall / max(n, 1), 1),
            "ms_per_request_by_command": {k: round(1000 * v / max(n, 1), 1) for k, v in top},
        }


@dataclass
class _Race:
    """What was measured between releasing the joiners and the last one's exit."""

    t0: float  # wall clock at the release: the joiners' results are epoch times
    wall: float
    responder_cpu: float
    joiners_cpu: float
    load: float


def _prepare(b: Bench, args: argparse.Namespace, n: int, ncpu: int, result: dict) -> None:
    """Bench directory, the joiners' key pairs (not timed) and the responder profiles."""
    b.setup()
    made, keygen_s = b.prepare_keys(max(n, args.profile_requests))
    result["keys_made_now"] = made
    if made:
        result["keygen_cpu_s_per_joiner"] = round(keygen_s * min(ncpu, made) / made, 2)
    if args.profile_requests:
        result["profile_as_shipped"] = b.profile(args.profile_requests, {})
        result["profile_without_ca_bundle"] = b.profile(args.profile_requests, {"SSL_CERT_FILE": "/dev/null"})


def _wait_ready(b: Bench, n: int, joiners: list[subprocess.Popen], deadline: float) -> None:
    while sum((b.joiners_dir / joiner_id(i) / "ready").exists() for i in range(n)) < n:
        if time.monotonic() > deadline or any(p.poll() is not None for p in joiners):
            raise SystemExit(f"joiners did not all get ready; see {b.joiners_dir}/*/join.log")
        time.sleep(0.2)


def _race(
    b: Bench,
    args: argparse.Namespace,
    n: int,
    joiner_cpus: str | None,
    responder: subprocess.Popen,
    joiners: list[subprocess.Popen],
    result: dict,
) -> _Race:
    """Start n joiners held on a lock, release them at once, wait for all; `joiners` is
    filled as they start, so the caller stops them whatever happens here."""
    go = b.work / "go"
    go.touch()
    go_fd = os.open(go, os.O_RDONLY)
    fcntl.flock(go_fd, fcntl.LOCK_EX)  # joiners wait on a shared lock: released = all boot at once
    cpu_children0 = children_cpu()
    spawn0 = time.monotonic()
    joiners.extend(b.start_joiners(n, joiner_cpus, args.timeout, go))
    deadline = time.monotonic() + args.timeout
    _wait_ready(b, n, joiners, deadline)
    result["spawn_s"] = round(time.monotonic() - spawn0, 1)
    time.sleep(0.5)  # let the last ones reach the lock
    if responder.poll() is not None:
        raise SystemExit(f"the responder exited: {b.responder_log.read_text()[-2000:]}")
    load = os.getloadavg()[0]
    tick = os.sysconf("SC_CLK_TCK")
    rcpu0 = cpu_ticks(responder.pid)
    t0 = time.time()
    mono0 = time.monotonic()
    fcntl.flock(go_fd, fcntl.LOCK_UN)
    os.close(go_fd)
    for p in joiners:
        p.wait(timeout=max(1.0, deadline + 30 - time.monotonic()))
    wall = time.monotonic() - mono0
    rcpu = (cpu_ticks(responder.pid) - rcpu0) / tick
    return _Race(t0=t0, wall=wall, responder_cpu=rcpu, joiners_cpu=children_cpu() - cpu_children0, load=load)


def _joiner_times(
    b: Bench, n: int, joiners: list[subprocess.Popen], t0: float
) -> tuple[list[float], list[float], list[str]]:
    """(seconds each holding joiner took, when each finished after t0, ids of the failed)."""
    per, ends, failed = [], [], []
    for i in range(n):
        r = b.joiners_dir / joiner_id(i) / "result"
        if joiners[i].returncode == 0 and r.exists() and b.holds_key(i):
            start, end = (float(x) for x in r.read_text().split())
            per.append(end - start)
            ends.append(end - t0)
        else:
            failed.append(joiner_id(i))
    return per, ends, failed


def _figures(
    b: Bench, args: argparse.Namespace, n: int, pin: bool, race: _Race, joiners: list[subprocess.Popen]
) -> dict:
    per, ends, failed = _joiner_times(b, n, joiners, race.t0)
    answered_lines = [ln for ln in b.responder_log.read_text(errors="replace").splitlines() if "answered" in ln]
    all_hold = max(ends) if ends and not failed else None
    rcpu, wall = race.responder_cpu, race.wall
    figures = {
        "holding": len(per),
        "failed": failed[:20],
        "failed_count": len(failed),
        "seconds_until_all_hold": round(all_hold, 1) if all_hold is not None else None,
        "per_joiner_p50_s": round(statistics.median(per), 1) if per else None,
        "per_joiner_p95_s": round(pct(per, 0.95), 1) if per else None,
        "per_joiner_max_s": round(max(per), 1) if per else None,
        "responder_cpu_s": round(rcpu, 1),
        "responder_cpu_ms_per_request": round(1000 * rcpu / max(n, 1), 1),
        "responder_core_share": round(rcpu / wall, 2) if wall else None,
        "responder_passes_answering": len(answered_lines),
        "joiners_cpu_s": round(race.joiners_cpu, 1),
        "controller_interval_s": b.interval,
        "responder_env": args.responder_env,
        "pinned": pin,
        "load_before": round(race.load, 2),
        "requests_left": len(list((b.m / "requests").glob("*.pem"))),
        "responses_left": len(list((b.m / "responses").glob("*.cms"))),
        "plaintext_key_on_fsx": b.plaintext_key_on_fsx(),
        "goal_s": args.goal,
        "goal_met": all_hold is not None and all_hold <= args.goal,
    }
    if failed:
        figures["first_failed_log"] = (b.joiners_dir / failed[0] / "join.log").read_text(errors="replace")[-1500:]
    return figures


def _clean_up(
    b: Bench,
    args: argparse.Namespace,
    joiners: list[subprocess.Popen],
    responder: subprocess.Popen | None,
    result: dict,
) -> None:
    for p in joiners:
        stop_group(p, grace=2)
    if responder is not None:
        stop_group(responder)
    result["started_pids"] = b.started
    if b.fsx.is_mount():
        subprocess.run(["umount", str(b.fsx)], check=False)
    if args.keep:
        result["work_dir"] = str(b.work)
    else:
        shutil.rmtree(b.work, ignore_errors=True)


def run_size(args: argparse.Namespace, n: int) -> dict:
    files = rendered_files(n + 1)
    work = Path(tempfile.mkdtemp(prefix=f"gpu-cluster-bench-munge-{n}-", dir="/var/tmp"))
    b = Bench(work, files, args.controller_interval, args.key_cache)
    ncpu = os.cpu_count() or 1
    pin = not args.no_pin and ncpu >= 2
    responder_cpus, joiner_cpus = ("0", f"1-{ncpu - 1}") if pin else (None, None)
    responder: subprocess.Popen | None = None
    joiners: list[subprocess.Popen] = []
    result: dict = {"joiners": n}
    try:
        _prepare(b, args, n, ncpu, result)
        responder = b.start_responder(responder_cpus, dict(kv.split("=", 1) for kv in args.responder_env))
        race = _race(b, args, n, joiner_cpus, responder, joiners, result)
        result.update(_figures(b, args, n, pin, race, joiners))
    finally:
        _clean_up(b, args, joiners, responder, result)
    return result


def print_result(r: dict) -> None:
    extra = f", responder env {' '.join(r['responder_env'])}" if r.get("responder_env") else ""
    print(
        f"\n== {r['joiners']} joiners (responder interval {r.get('controller_interval_s')} s{extra}, "
        f"{'pinned: responder CPU 0, joiners the rest' if r.get('pinned') else 'not pinned'}, "
        f"load before {r.get('load_before')})"
    )
    for key in ("profile_as_shipped", "profile_without_ca_bundle"):
        if key in r:
            p = r[key]
            cmds = ", ".join(f"{k} {v}" for k, v in p["ms_per_request_by_command"].items())
            print(
                f"  responder pass over {p['requests']} requests ({key.split('_', 1)[1].replace('_', ' ')}): "
                f"{p['ms_per_request']} ms/request wall; by command (ms/request): {cmds}"
            )
    if "profile_as_shipped" in r:
        print("  (xtrace: a pipeline's time lands on its last command; `grep` is the `openssl x509 -subject` it reads)")
    if "holding" not in r:
        return
    print(
        f"  holding the key: {r['holding']}/{r['joiners']}"
        + (f"  FAILED {r['failed_count']}: {r['failed']}" if r["failed_count"] else "")
    )
    print(
        f"  until all hold:  {r['seconds_until_all_hold']} s   per joiner p50 {r['per_joiner_p50_s']} s, "
        f"p95 {r['per_joiner_p95_s']} s, max {r['per_joiner_max_s']} s"
    )
    print(
        f"  responder CPU:   {r['responder_cpu_s']} s ({r['responder_cpu_ms_per_request']} ms/request, "
        f"{r['responder_core_share']} of one core); passes that answered: {r['responder_passes_answering']}"
    )
    print(
        f"                   answering is serial: with a free core of its own the responder still needs "
        f"~{r['responder_cpu_s']} s for these {r['joiners']} requests"
    )
    print(f"  joiners CPU:     {r['joiners_cpu_s']} s in all (spawned in {r['spawn_s']} s, before the clock)")
    print(
        f"  left on /fsx: {r['requests_left']} requests, {r['responses_left']} responses; "
        f"plaintext key on /fsx: {r['plaintext_key_on_fsx'] or 'none'}"
    )
    print(f"  goal: all {r['joiners']} hold the key within {r['goal_s']} s: {'MET' if r['goal_met'] else 'MISSED'}")


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--joiners", default="256,1024", help="comma-separated joiner counts")
    ap.add_argument("--goal", type=float, default=60.0, help="seconds until every joiner holds the key")
    ap.add_argument("--timeout", type=int, default=300, help="bound on each joiner's wait (MUNGE_JOIN_TIMEOUT)")
    ap.add_argument(
        "--controller-interval",
        type=float,
        default=None,
        help="override MUNGE_CONTROLLER_INTERVAL (default: the rendered value)",
    )
    ap.add_argument(
        "--responder-env",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra environment for the responder (a what-if, e.g. SSL_CERT_FILE=/dev/null)",
    )
    ap.add_argument("--profile-requests", type=int, default=64, help="requests in the profiled pass (0: none)")
    ap.add_argument("--no-pin", action="store_true", help="do not pin responder and joiners to separate CPUs")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--key-cache", type=Path, default=KEY_CACHE, help="where joiners' one-time key pairs are kept")
    ap.add_argument("--strict", action="store_true", help="exit 3 when the goal is missed")
    ap.add_argument("--keep", action="store_true", help="keep the bench directories (under /var/tmp)")
    args = ap.parse_args(argv)
    if os.geteuid() != 0:
        print("needs root (a tmpfs in a private mount namespace; keys owned by munge)", file=sys.stderr)
        return 2
    if os.environ.get(NS_MARK) != "1":
        # a private mount namespace: the tmpfs /fsx disappears with us, whatever happens
        os.environ[NS_MARK] = "1"
        os.execvp(
            "unshare",
            ["unshare", "--mount", "--propagation", "private", sys.executable, str(Path(__file__).resolve()), *argv],
        )
    results = []
    for n in (int(x) for x in args.joiners.split(",") if x.strip()):
        r = run_size(args, n)
        print_result(r)
        results.append(r)
        if args.json:  # after each size: a long run still leaves what it measured
            Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    if any(r.get("failed_count", 1) for r in results):
        return 1  # a joiner did not get the key: the join path is broken, not slow
    return 3 if args.strict and not all(r["goal_met"] for r in results) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
