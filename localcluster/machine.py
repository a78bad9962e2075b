"""Whole machines: a node that boots like an EC2 instance, with systemd as PID 1.

The faithful lane (`--lane bookworm|trixie`) gives each node a `systemd-nspawn --boot`
machine inside the node's network namespace (nodes.py makes the namespace, its veth
and address, and runs the IMDSv2 stand-in in it). Inside, systemd starts cloud-init,
which reads our exact gzip'd MIME user data from a NoCloud seed and runs it: write_files,
the per-boot script, the user-data script (payload fetch, then gpu-cluster-boot), and
systemd runs the units step 85 enables.

What the machine gets from the host, and why (the only differences from EC2, see
docs/node-contract.md):
- a writable root: an overlay (upper/work in the node's directory) over a read-only
  baked root shared by every node, as instances share an AMI;
- the NoCloud seed and `datasource_list: [ NoCloud, None ]`, with network config
  disabled (the address comes from the namespace, as an ENI's does);
- /etc/gpu-cluster/overrides.env (the documented swaps);
- /fsx: the cluster's shared directory bound in, instead of Lustre; the payload
  directory bound read-only at its own path, so the rendered `file://` URI resolves;
- writable cgroup v1 controllers: nspawn mounts the host's v1 controllers read-only,
  and slurmd's proctrack/cgroup must create `slurm_<node>` in them. Each machine runs in
  its own cgroup per controller (`gcl-<cluster>-<node>`, removed on destroy); the
  machine's first unit remounts its controllers read-write, so Slurm's default
  CgroupMountpoint (/sys/fs/cgroup) works and cgroup.conf stays as rendered.
`machinectl` needs a host systemd, which this host lacks: machines run with
`--register=no --keep-unit` and are stopped through their nspawn process.
A small supervisor restarts nspawn when the machine reboots (exit 133, as
systemd-nspawn@.service's RestartForceExitStatus=133 does).
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import time
from pathlib import Path

from userdata import layout

CGROUP_ROOT = Path("/sys/fs/cgroup")
SEED_DIR = "var/lib/cloud/seed/nocloud"
CLOUD_CFG = "etc/cloud/cloud.cfg.d/90-gpu-cluster-local.cfg"
CGROUP_UNIT = "gpu-cluster-local-cgroups.service"
OVERRIDES = layout.OVERRIDES_ENV.lstrip("/")  # relative to a machine's root
REBOOT_EXIT = 133  # systemd-nspawn's exit status when the machine asked for a reboot
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

# datasource_list: only our seed (None = keep booting if the seed is unreadable, so the
# failure shows in cloud-init status instead of a hang). network config disabled: the
# namespace already has the node's address; cloud-init's fallback DHCP on eth0 would
# remove it.
CLOUD_CFG_TEXT = """\
# Written by the local cluster (localcluster/machine.py): the NoCloud seed is the
# local stand-in for EC2 user data; the address comes from the node's network namespace.
datasource_list: [ NoCloud, None ]
network:
  config: disabled
"""

HOSTS_TEXT = """\
127.0.0.1\tlocalhost
::1\t\tlocalhost ip6-localhost ip6-loopback
ff02::1\t\tip6-allnodes
ff02::2\t\tip6-allrouters
"""

CGROUP_UNIT_TEXT = """\
# Written by the local cluster (localcluster/machine.py). systemd-nspawn mounts the host's
# cgroup v1 controllers read-only; a real machine's are writable and slurmd's
# proctrack/cgroup creates slurm_<node> in them. The machine has its own cgroup per
# controller on the host (its cgroup namespace root), so read-write is confined to it.
[Unit]
Description=gpu-cluster local machine: writable cgroup v1 controllers
DefaultDependencies=no
After=local-fs.target
Before=sysinit.target munge.service slurmd.service slurmctld.service

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/bin/sh -c 'for d in /sys/fs/cgroup/*/; do [ -L "$${d%%/}" ] && continue; mountpoint -q "$$d" && mount -o remount,bind,rw "$$d" || true; done'

[Install]
WantedBy=sysinit.target
"""

SUPERVISOR = """\
#!/usr/bin/env bash
# The machine's supervisor (localcluster/machine.py): joins the node's cgroups, then
# boots the machine again whenever it reboots (nspawn exits 133), like
# systemd-nspawn@.service with RestartForceExitStatus=133. Any other exit ends it.
set -uo pipefail
main() {
  local cg rc boots=0 nspawn
  for cg in "${CGROUPS[@]}"; do echo $$ >"$cg/cgroup.procs"; done
  trap 'kill -TERM "$child" 2>/dev/null; wait "$child"; exit 143' TERM
  while :; do
    boots=$((boots + 1))
    echo "$(date -u +%FT%TZ) supervisor: boot $boots" >&2
    # Read at every boot: the host may change the machine's mounts (e.g. /fsx attached late).
    mapfile -d '' -t nspawn <"$NODE_DIR/nspawn.argv"
    "${nspawn[@]}" &
    child=$!
    echo "$child" >"$NODE_DIR/nspawn.pid"
    wait "$child"
    rc=$?
    echo "$(date -u +%FT%TZ) supervisor: nspawn exited $rc" >&2
    [[ -e $NODE_DIR/stop ]] && exit "$rc"
    ((rc == REBOOT_EXIT)) || exit "$rc"
  done
}
"""


# ---- cgroups -------------------------------------------------------------------------
def hierarchies() -> list[Path]:
    """Every mounted cgroup hierarchy (v1 controllers, name=systemd, the unified tree)."""
    if not CGROUP_ROOT.is_dir():
        return []
    if (CGROUP_ROOT / "cgroup.controllers").exists():
        return [CGROUP_ROOT]  # a pure v2 host: one tree
    out = []
    for entry in sorted(os.listdir(CGROUP_ROOT)):
        top = CGROUP_ROOT / entry
        if not top.is_symlink() and (top / "cgroup.procs").exists():
            out.append(top)
    return out


def make_cgroups(tag: str) -> list[str]:
    """A cgroup per hierarchy for one machine: its cgroup namespace root on every controller.

    Two machines must not share one (their systemd would both create system.slice in
    it, and two slurmd would share slurm_<node> parents).
    """
    made = []
    for top in hierarchies():
        mine = top / tag
        mine.mkdir(exist_ok=True)
        if (top / "cpuset.cpus").exists():  # a new cpuset is empty until told its CPUs and memory nodes
            for knob in ("cpuset.cpus", "cpuset.mems"):
                (mine / knob).write_text((top / knob).read_text())
        made.append(str(mine))
    return made


def cgroup_pids(paths: list[str]) -> set[int]:
    """Every process in these cgroups or below them."""
    pids: set[int] = set()
    for top in paths:
        for dirpath, _, files in os.walk(top):
            if "cgroup.procs" in files:
                try:
                    pids.update(int(x) for x in Path(dirpath, "cgroup.procs").read_text().split())
                except OSError:
                    pass
    return pids


# ---- the machine's root ----------------------------------------------------------------
def mount_root(node_dir: Path, base: Path) -> Path:
    """The machine's writable root: an overlay over the shared baked root."""
    root, upper, work = node_dir / "root", node_dir / "upper", node_dir / "work"
    for d in (root, upper, work):
        d.mkdir(parents=True, exist_ok=True)
    if not os.path.ismount(root):
        subprocess.run(
            ["mount", "-t", "overlay", "overlay", "-o", f"lowerdir={base},upperdir={upper},workdir={work}", str(root)],
            check=True,
            capture_output=True,
            text=True,
        )
    return root


def put(root: Path, path: str, data: bytes, mode: int = 0o644, owner: str = "root:root") -> None:
    """Write a file into the machine's root; owner names are the machine's, not the host's."""
    p = root / path.lstrip("/")
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(data)
    os.chmod(p, mode)
    user, _, group = owner.partition(":")
    uid, gid = _id(root / "etc/passwd", user), _id(root / "etc/group", group or user)
    if uid is not None and gid is not None:
        os.chown(p, uid, gid)


def _id(table: Path, name: str) -> int | None:
    try:
        for line in table.read_text().splitlines():
            f = line.split(":")
            if len(f) > 2 and f[0] == name:
                return int(f[2])
    except OSError:
        pass
    return None


def nocloud_meta_data(instance_id: str, hostname: str) -> bytes:
    # JSON is YAML: instance-id drives cloud-init's per-instance semaphores (a new id is a
    # new instance, so a relaunch runs the user data again; a reboot keeps the id).
    return json.dumps({"instance-id": instance_id, "local-hostname": hostname}).encode() + b"\n"


def read_env(path: Path) -> dict[str, str]:
    """KEY=value lines of an env file (values kept as written, quotes included)."""
    out = {}
    if path.exists():
        for line in path.read_text().splitlines():
            key, eq, value = line.partition("=")
            if eq and key.strip() and not key.lstrip().startswith("#"):
                out[key.strip()] = value
    return out


def env_text(values: dict[str, str]) -> bytes:
    """`KEY=value` lines the nodes source (overrides.env): each value one shell word, so a
    value with a space or a quote (CLOUDWATCH_SKIP's reason) arrives whole."""
    return "".join(f"{k}={shlex.quote(v)}\n" for k, v in values.items()).encode()


def merged_overrides(root: Path, swaps: dict[str, str]) -> bytes:
    """The image's overrides.env (its lane's pins, baked in) with this host's swaps on top."""
    # The baked lines as written (quoted already), the swaps quoted as env_text does.
    env = read_env(root / OVERRIDES)
    env.update({k: shlex.quote(v) for k, v in swaps.items()})
    return "".join(f"{k}={v}\n" for k, v in env.items()).encode()


def seed_root(root: Path, *, user_data: bytes, instance_id: str, hostname: str, swaps: dict[str, str]) -> None:
    """Lay down what the machine gets from its host before its first boot."""
    put(root, f"{SEED_DIR}/user-data", user_data, 0o600)
    put(root, f"{SEED_DIR}/meta-data", nocloud_meta_data(instance_id, hostname), 0o600)
    cfg = CLOUD_CFG_TEXT
    if not (root / "usr/lib/locale/locale-archive").exists():
        # cloud-init's locale module sets en_US.UTF-8 unless told otherwise; an image
        # without generated locales fails it (cloud-init status: error). C.UTF-8 is built in.
        cfg += "locale: C.UTF-8\n"
    put(root, CLOUD_CFG, cfg.encode())
    if not (root / "etc/hosts").exists():
        # A debootstrap minbase root has no /etc/hosts (Debian's netbase ships it; every
        # EC2 image has one, and step 10 pins the node's name in it).
        put(root, "etc/hosts", HOSTS_TEXT.encode())
    put(root, OVERRIDES, merged_overrides(root, swaps))
    put(root, f"etc/systemd/system/{CGROUP_UNIT}", CGROUP_UNIT_TEXT.encode())
    wants = root / "etc/systemd/system/sysinit.target.wants"
    wants.mkdir(parents=True, exist_ok=True)
    link = wants / CGROUP_UNIT
    if not link.is_symlink():
        link.symlink_to(f"/etc/systemd/system/{CGROUP_UNIT}")
    # The machine name is the hostname; an image's own /etc/hostname would win at boot.
    put(root, "etc/hostname", f"{hostname}\n".encode())


def nspawn_argv(root: Path, hostname: str, netns_path: Path, binds: list[tuple[str, str, bool]]) -> list[str]:
    argv = [
        "systemd-nspawn",
        "--quiet",
        "-D",
        str(root),
        "--boot",
        "--register=no",
        "--keep-unit",
        f"--machine={hostname}",
        f"--network-namespace-path={netns_path}",
        "--link-journal=no",
        "--console=read-only",
        "--resolv-conf=off",
        "--timezone=off",
        # A real machine's PID 1 may raise any limit; the machine's systemd can only go
        # up to nspawn's hard limits, and slurmd's unit needs LimitMEMLOCK=infinity (EFA).
        "--rlimit=RLIMIT_MEMLOCK=infinity",
    ]
    for src, dst, ro in binds:
        argv.append(f"--bind{'-ro' if ro else ''}={src}:{dst}")
    return argv


# Each machine's systemd, journald, logind, dbus and cloud-init's hotplug socket hold about
# six inotify instances, all counted against the host's root user. The kernel default (128)
# stops about the 21st machine: its systemd logs "Failed to create inotify object: Too many
# open files" and its boot jobs wait forever.
INOTIFY_INSTANCES = Path("/proc/sys/fs/inotify/max_user_instances")
INOTIFY_PER_MACHINE = 8


def ensure_inotify(machines: int) -> str | None:
    """Raise the host's inotify instance limit for this many machines; says what it did."""
    try:
        have = int(INOTIFY_INSTANCES.read_text())
    except (OSError, ValueError):
        return None
    need = 128 + INOTIFY_PER_MACHINE * machines  # the host keeps its own share
    if have >= need:
        return None
    want = max(need, 8192)
    INOTIFY_INSTANCES.write_text(f"{want}\n")
    return f"raised fs.inotify.max_user_instances from {have} to {want} ({machines} machines)"


def set_argv(node_dir: Path, argv: list[str]) -> None:
    """The nspawn command line the supervisor runs at the machine's next boot."""
    tmp = node_dir / "nspawn.argv.tmp"
    tmp.write_bytes(b"".join(a.encode() + b"\0" for a in argv))
    tmp.replace(node_dir / "nspawn.argv")


def start(node_dir: Path, argv: list[str], cgroups: list[str]) -> int:
    """Start the supervisor (and so the machine); returns the supervisor's pid."""
    script = node_dir / "supervisor.sh"
    set_argv(node_dir, argv)
    cgs = " ".join(_q(c) for c in cgroups)
    script.write_text(SUPERVISOR + f"NODE_DIR={_q(str(node_dir))}\nREBOOT_EXIT={REBOOT_EXIT}\nCGROUPS=({cgs})\nmain\n")
    (node_dir / "stop").unlink(missing_ok=True)
    console = open(node_dir / "console.log", "ab")
    proc = subprocess.Popen(
        ["bash", str(script)],
        stdin=subprocess.DEVNULL,
        stdout=console,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        env={"PATH": PATH, "LANG": "C.UTF-8"},
    )
    return proc.pid


def _q(s: str) -> str:
    return "'" + s.replace("'", "'\\''") + "'"


# ---- a running machine -------------------------------------------------------------------
# nspawn's mount propagation directory: what the host mounts under it appears in the
# machine at INCOMING (the mechanism `machinectl bind` uses).
PROPAGATE = Path("/run/systemd/nspawn/propagate")
INCOMING = "/run/host/incoming"


def detach_all(path: Path) -> int:
    """Lazily unmount every mount stacked on `path`; returns how many there were.

    os.path.ismount cannot see a directory bind-mounted onto itself (same device, and
    `..` leads out of the mount), so it is not asked: umount2 is called until the kernel
    says `path` is no mount point (EINVAL).
    """
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    target = os.fsencode(str(path))
    n = 0
    while libc.umount2(target, 2) == 0:  # MNT_DETACH
        n += 1
    return n


def mounts_at(path: Path) -> int:
    """Mounts whose mount point is `path` (from /proc/self/mountinfo)."""
    want = str(path).replace("\\", "\\134").replace(" ", "\\040")
    with open("/proc/self/mountinfo") as f:
        return sum(1 for line in f if line.split(" ", 5)[4] == want)


def share_propagation(hostname: str) -> None:
    """Make the machine's propagation directory a shared mount before nspawn starts.

    nspawn hands the machine a slave copy of it; mounts made there later reach the
    machine only if the host side is shared, which a host without systemd (whose root
    mount is private) does not give by itself. Whatever an earlier machine of this name
    left there is detached first: a shared self-bind stacked on old ones is copied to
    every peer, so the mounts doubled with each start of the same name (tens of
    thousands after a day of test runs, and every machine's boot slowed to minutes).
    """
    d = PROPAGATE / hostname
    d.mkdir(parents=True, exist_ok=True)
    detach_all(d)
    subprocess.run(["mount", "--bind", str(d), str(d)], check=True, capture_output=True, text=True)
    subprocess.run(["mount", "--make-shared", str(d)], check=True, capture_output=True, text=True)


def bind_into(hostname: str, leader_pid: int, src: Path, dest: str) -> None:
    """Bind-mount a host directory into a running machine at dest (e.g. /fsx appearing late)."""
    name = f"gcl-bind-{os.getpid()}"
    stage = PROPAGATE / hostname / name
    stage.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "--bind", str(src), str(stage)], check=True, capture_output=True, text=True)
    try:
        r = subprocess.run(
            nsenter_argv(leader_pid) + ["sh", "-c", 'mkdir -p "$2" && mount --bind "$1" "$2"', "bind",
                                        f"{INCOMING}/{name}", dest],
            capture_output=True, text=True,
        )  # fmt: skip
        if r.returncode != 0:
            raise RuntimeError(f"{hostname}: could not mount {src} on {dest}: {r.stderr.strip()}")
    finally:
        subprocess.run(["umount", str(stage)], capture_output=True)
        stage.rmdir()


def forget(hostname: str) -> None:
    """Remove what nspawn keeps on the host for a machine it could not clean up (SIGKILL)."""
    d = PROPAGATE / hostname
    if d.is_dir():
        for sub in d.iterdir():
            subprocess.run(["umount", "-l", str(sub)], capture_output=True)
            if sub.is_dir():
                sub.rmdir()
        detach_all(d)  # ours and nspawn's own self-binds
        try:
            d.rmdir()
        except OSError:
            pass  # still a mount point in a namespace made while it was shared; harmless


def _nspid(pid: int | str) -> list[str]:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("NSpid:"):
                return line.split()[1:]
    except OSError:
        pass
    return []


def leader(net_inode: int | None, cgroups: list[str]) -> int | None:
    """The machine's PID 1 (systemd), seen from the host; None while it is not running."""
    if not net_inode:
        return None
    for pid in sorted(cgroup_pids(cgroups)):
        ns = _nspid(pid)
        if len(ns) >= 2 and ns[-1] == "1":
            try:
                if os.stat(f"/proc/{pid}/ns/net").st_ino == net_inode:
                    return pid
            except OSError:
                continue
    return None


def nsenter_argv(pid: int) -> list[str]:
    """Enter every namespace of the machine (root and cwd become the machine's /)."""
    return ["nsenter", "-t", str(pid), "-m", "-u", "-i", "-n", "-p", "-C", "--"]


def state_file(pid: int, path: str) -> Path:
    """A file inside the running machine (its /run too), through /proc/<pid>/root."""
    return Path(f"/proc/{pid}/root") / path.lstrip("/")


def alive(supervisor_pid: int) -> bool:
    """The supervisor still runs (a recycled pid running something else does not count)."""
    try:
        cmd = Path(f"/proc/{supervisor_pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return any(c.endswith(b"supervisor.sh") for c in cmd)


def stop(node_dir: Path, supervisor_pid: int, cgroups: list[str], *, graceful: float = 0.0) -> None:
    """Stop a machine for good: no restart, then every process in its cgroups killed.

    graceful > 0 first asks systemd to power off (SIGTERM to nspawn does that) and
    waits that long; 0 is a pulled plug, as an instance termination is.
    """
    (node_dir / "stop").write_text("1\n")
    nspawn_pid = _read_pid(node_dir / "nspawn.pid")
    if graceful > 0 and nspawn_pid:
        _signal(nspawn_pid, signal.SIGTERM)
        deadline = time.monotonic() + graceful
        while time.monotonic() < deadline and _running(nspawn_pid):
            time.sleep(0.1)
    if supervisor_pid and alive(supervisor_pid):
        _signal(supervisor_pid, signal.SIGKILL)
    if nspawn_pid and _is_nspawn(nspawn_pid):
        _signal(nspawn_pid, signal.SIGKILL)
    deadline = time.monotonic() + 15
    while True:
        left = cgroup_pids(cgroups) - {os.getpid()}
        if not left or time.monotonic() > deadline:
            break
        for pid in left:
            _signal(pid, signal.SIGKILL)
        time.sleep(0.05)


def _read_pid(p: Path) -> int | None:
    try:
        return int(p.read_text().strip())
    except (OSError, ValueError):
        return None


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except (OSError, IndexError):
        return False


def _is_nspawn(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip() == "systemd-nspawn"
    except OSError:
        return False


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def memory(cgroups: list[str]) -> dict[str, float]:
    """A machine's memory in MiB, three ways.

    usage_mib/rss_mib: charged to its memory cgroup (all, anonymous). Pages are charged
    to the cgroup that first touched them, so libraries every machine maps from the
    shared root count once, elsewhere: about what one more node costs.
    pss_mib: the proportional set size of its processes (shared pages split among
    their users): its fair share of the host's memory.
    """
    out: dict[str, float] = {}
    for cg in cgroups:
        p = Path(cg)
        if p.parent.name == "memory" and (p / "memory.usage_in_bytes").exists():
            stat = dict(line.split() for line in (p / "memory.stat").read_text().splitlines())
            out = {
                "usage_mib": int((p / "memory.usage_in_bytes").read_text()) / 2**20,
                "rss_mib": int(stat.get("total_rss", 0)) / 2**20,
            }
    pss = 0
    for pid in cgroup_pids(cgroups):
        try:
            for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    pss += int(line.split()[1])
        except OSError:
            pass
    out["pss_mib"] = pss / 1024
    return out


def rss_mib(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0
