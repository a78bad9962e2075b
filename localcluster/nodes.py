"""Nodes as Linux namespaces: network, hostname and a private view of the file system.

One local cluster = one "hub" network namespace holding a bridge (so no address of
ours ever touches the host's own interfaces) plus, per node:
- a named network namespace with `eth0` (a veth whose peer sits on the hub bridge),
  its own IPv4 `10.77.<subnet>.<10+serial>/24`, and loopback (the IMDS stand-in);
- a long-lived init process (`unshare --mount --uts`, entered through
  `nsenter --net=/var/run/netns/NAME`: `ip netns exec` would remount /sys and hide
  the cgroup v1 mounts slurmd needs) that holds the mount and UTS namespaces.
  Inside it: hostname `ip-10-77-...`, overlays over /etc /usr /opt /var/{lib,log,spool,cache}
  (writes land in the node's own directory), tmpfs on /run, /tmp (PMIx needs a
  private /tmp per node) and /dev/shm, the node's own cgroup v1 sub-trees bind-mounted
  over /sys/fs/cgroup/<controller> (two slurmd's must not share job cgroups), and the
  one shared directory bind-mounted at /fsx;
- the IMDSv2 stand-in on 127.0.0.1:1338 inside the node's network namespace.
Everything a node runs is found again by its namespaces, so `kill_node` leaves
nothing behind, even when our state file is lost.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from localcluster import machine
from model import tags as node_tags
from userdata import layout

REPO = Path(__file__).resolve().parent.parent
BASE = Path(os.environ.get("GPU_CLUSTER_LOCAL_DIR", "/var/tmp/gpu-cluster-local"))
NETNS_DIR = Path("/var/run/netns")
CGROUP_ROOT = Path("/sys/fs/cgroup")
IMDS_PORT = 1338
# The AWS stand-in (localcluster/aws_standin.py) in a controller machine's namespace: the
# controller's agents reach it through AWS_ENDPOINT_URL_EC2 (cluster.py MACHINE_OVERRIDES).
AWS_PORT = 1339
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# Top-level trees a node may write to; each gets an overlay over the host's copy.
OVERLAYS = ("etc", "usr", "opt", "var/lib", "var/log", "var/spool", "var/cache", "root")
TMPFS = (("run", "0755"), ("tmp", "1777"), ("dev/shm", "1777"))


def sh(*argv: str, check: bool = True, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(list(argv), check=check, capture_output=True, text=True, **kw)


def ns_inode(pid: int | str, kind: str) -> int | None:
    try:
        return os.stat(f"/proc/{pid}/ns/{kind}").st_ino
    except OSError:
        return None


def pids_in(net_inode: int | None, mnt_inode: int | None) -> list[int]:
    """Every process whose network or mount namespace is the node's."""
    found = []
    me = os.getpid()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        if (net_inode and ns_inode(entry, "net") == net_inode) or (mnt_inode and ns_inode(entry, "mnt") == mnt_inode):
            found.append(int(entry))
    return found


@dataclass
class Node:
    cluster: str
    serial: int
    ip: str
    hostname: str
    instance_id: str
    role: str
    netns: str
    veth: str
    dir: str
    fsx: bool = True
    init_pid: int = 0
    imds_pid: int = 0
    boot_pid: int = 0
    started: float = 0.0
    cgroups: list[str] = field(default_factory=list)
    lane: str = "namespace"  # or a machine lane (bookworm, trixie): machine.py
    block: str = node_tags.ON_DEMAND  # its GpuClusterBlock tag: which block's machines end together

    @property
    def path(self) -> Path:
        return Path(self.dir)

    @property
    def is_machine(self) -> bool:
        return self.lane != "namespace"

    def upper(self, node_path: str) -> Path:
        """Where a path the node wrote lands on the host (read-only use)."""
        rel = node_path.lstrip("/")
        if self.is_machine:  # the machine's root, as the host sees it (its /run is not here)
            return self.path / "root" / rel
        for top in sorted(OVERLAYS, key=len, reverse=True):
            if rel == top or rel.startswith(top + "/"):
                return self.path / "upper" / top.replace("/", "-") / rel[len(top) :].lstrip("/")
        raise ValueError(f"{node_path} is not on a node-private overlay")

    def nsenter(self) -> list[str]:
        if self.is_machine:
            pid = self.leader()
            if pid is None:
                raise RuntimeError(f"{self.hostname}: machine is not running")
            return machine.nsenter_argv(pid)
        return ["nsenter", "-t", str(self.init_pid), "-m", "-u", "-n", "--"]

    def leader(self) -> int | None:
        """A machine's PID 1 as the host sees it (None: not running, e.g. mid-reboot)."""
        try:
            ino = os.stat(NETNS_DIR / self.netns).st_ino
        except OSError:
            return None
        return machine.leader(ino, self.cgroups)


# Short (interface names are 15 characters) and without '-', so that one cluster's
# "gcl-<name>-" prefix never matches another's namespaces.
CLUSTER_NAME = re.compile(r"[a-z][a-z0-9]{1,7}")
CLUSTER_NAME_RULE = "use 2-8 lowercase letters/digits, starting with a letter"


class Cluster:
    """A local cluster's network, nodes and state, kept in BASE/<name>/state.json."""

    def __init__(self, name: str = "local", subnet: int = 0, base: Path = BASE):
        if not CLUSTER_NAME.fullmatch(name):
            raise ValueError(f"local cluster name '{name}': {CLUSTER_NAME_RULE}")
        self.name = name
        self.subnet = subnet
        self.root = Path(base) / name
        self.hub = f"gcl-{name}-hub"
        self.fsx_dir = self.root / "fsx"
        self.nodes: dict[str, Node] = {}
        self.next_serial = 1
        self.lane: str | None = None  # the lane its nodes were launched on (cluster.LANES)
        self.base: str | None = None  # machine lanes: the root every node boots (one "AMI")
        self.lock = threading.RLock()  # nodes are created from several threads
        self.load()

    # ---- state -------------------------------------------------------------------
    @property
    def state_file(self) -> Path:
        return self.root / "state.json"

    def load(self) -> None:
        if self.state_file.exists():
            st = json.loads(self.state_file.read_text())
            self.subnet = st["subnet"]
            self.next_serial = st["next_serial"]
            self.lane = st.get("lane")
            self.base = st.get("base")
            self.nodes = {n["hostname"]: Node(**n) for n in st["nodes"]}

    def save(self) -> None:
        with self.lock:
            self._save()

    def _save(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(
            json.dumps(
                {
                    "name": self.name,
                    "subnet": self.subnet,
                    "next_serial": self.next_serial,
                    "lane": self.lane,
                    "base": self.base,
                    "nodes": [asdict(n) for n in self.nodes.values()],
                },
                indent=1,
            )
        )
        tmp.replace(self.state_file)

    # ---- network -----------------------------------------------------------------
    def ensure_network(self) -> None:
        with self.lock:
            self._ensure_network()

    def _ensure_network(self) -> None:
        if (NETNS_DIR / self.hub).exists():
            return
        sh("ip", "netns", "add", self.hub)
        sh("ip", "-n", self.hub, "link", "add", "br0", "type", "bridge")
        sh("ip", "-n", self.hub, "link", "set", "br0", "up")

    def _new_identity(self, role: str) -> tuple[int, str, str, str]:
        with self.lock:
            serial = self.next_serial
            self.next_serial += 1
        if serial > 240:
            raise RuntimeError("no addresses left in this local cluster's /24")
        return self._identity(serial)

    def _identity(self, serial: int) -> tuple[int, str, str, str]:
        ip = f"10.77.{self.subnet}.{10 + serial}"
        hostname = "ip-" + ip.replace(".", "-")
        # Deterministic per cluster and serial: a replacement always gets a new one.
        instance_id = "i-0" + hashlib.sha256(f"{self.name}:{serial}".encode()).hexdigest()[:16]
        return serial, ip, hostname, instance_id

    # ---- nodes ---------------------------------------------------------------------
    def _register_node(self, role: str, *, fsx: bool, lane: str = "namespace") -> Node:
        """A new node's identity (serial, address, name, instance id), recorded in the state."""
        self.ensure_network()
        self.fsx_dir.mkdir(parents=True, exist_ok=True)
        serial, ip, hostname, instance_id = self._new_identity(role)
        node = Node(
            cluster=self.name,
            serial=serial,
            ip=ip,
            hostname=hostname,
            instance_id=instance_id,
            role=role,
            netns=f"gcl-{self.name}-{serial}",
            veth=f"gcl{self.name}{serial}"[:15],
            dir=str(self.root / "nodes" / hostname),
            fsx=fsx,
            lane=lane,
        )
        with self.lock:
            self.nodes[hostname] = node
        self.save()
        return node

    def create_node(
        self, role: str, files: dict[str, tuple[bytes, int, str]], *, fsx: bool = True, tags: dict[str, str], az: str
    ) -> Node:
        """Namespaces, mounts and files of a fresh node; IMDS running; boot not started."""
        node = self._register_node(role, fsx=fsx)
        node.block = tags.get(node_tags.BLOCK, node_tags.ON_DEMAND)
        node.path.mkdir(parents=True, exist_ok=True)
        self._make_netns(node)
        node.cgroups = self._make_cgroups(node)
        self._write_manifest(node, files)
        imds_ready = self._start_imds(node, tags, az)  # starts while the mounts are made
        self._start_init(node)
        imds_ready()
        self.save()
        return node

    def create_machine(
        self,
        role: str,
        *,
        lane: str,
        base: Path,
        user_data: bytes,
        swaps: dict[str, str],
        files: dict[str, tuple[bytes, int, str]],
        fsx: bool = True,
        tags: dict[str, str],
        az: str,
        ro_binds: list[str | tuple[str, str]],
    ) -> Node:
        """A whole machine (machine.py) in a fresh network namespace, booting; IMDS running.

        `ro_binds`: host paths bound read-only at the same path, or (host path, path inside)
        pairs (a local apt repository at its mount point, localcluster/apt_repo.py)."""
        node = self._register_node(role, fsx=fsx, lane=lane)
        node.block = tags.get(node_tags.BLOCK, node_tags.ON_DEMAND)
        node.path.mkdir(parents=True, exist_ok=True)
        self._make_netns(node)
        imds_ready = self._start_imds(node, tags, az)
        # Imported here: this module also runs inside a namespace as `python -S -m
        # localcluster.nodes write-files`, without site-packages (botocore, which the
        # stand-in's model checks need).
        from localcluster import topology_standin

        # EC2's view of this instance's network nodes, served to the controller's refresh
        topology_standin.place(self.aws_state, node.instance_id, topology_standin.lane_network_nodes(node.serial))
        aws_ready = self._start_aws(node) if role == "controller" else (lambda: None)
        root = machine.mount_root(node.path, base)
        machine.seed_root(root, user_data=user_data, instance_id=node.instance_id, hostname=node.hostname, swaps=swaps)
        for path, (content, mode, owner) in files.items():  # test faults only (e.g. a wrong key)
            machine.put(root, path, content, mode, owner)
        node.cgroups = machine.make_cgroups(f"gcl-{self.name}-{node.hostname}")
        binds = [(p, p, True) if isinstance(p, str) else (p[0], p[1], True) for p in ro_binds]
        if fsx:
            binds.append((str(self.fsx_dir), layout.FSX_MOUNTPOINT, False))
        (node.path / "nspawn.json").write_text(
            json.dumps(machine.nspawn_argv(root, node.hostname, NETNS_DIR / node.netns, binds))
        )
        imds_ready()
        aws_ready()
        self.power_on(node)
        return node

    def power_on(self, node: Node) -> None:
        """Boot a machine (again) from its kept root: a new supervisor and nspawn."""
        machine.share_propagation(node.hostname)
        argv = json.loads((node.path / "nspawn.json").read_text())
        node.init_pid = machine.start(node.path, argv, node.cgroups)
        node.started = time.time()
        self.save()

    def attach_fsx(self, node: Node) -> None:
        """Mount the shared directory on /fsx of a running node launched without it
        (/fsx appearing late, as a Lustre mount that only succeeds on a later try)."""
        if not node.is_machine:  # namespace lane: bind it in the node's mount namespace
            sh(
                "nsenter",
                f"--mount=/proc/{node.init_pid}/ns/mnt",
                "mount",
                "--bind",
                str(self.fsx_dir),
                layout.FSX_MOUNTPOINT,
            )
            node.fsx = True
            self.save()
            return
        pid = node.leader()
        if pid is None:
            raise RuntimeError(f"{node.hostname}: machine is not running")
        machine.bind_into(node.hostname, pid, self.fsx_dir, layout.FSX_MOUNTPOINT)
        node.fsx = True
        argv = json.loads((node.path / "nspawn.json").read_text())  # and on its next boots
        bind = f"--bind={self.fsx_dir}:{layout.FSX_MOUNTPOINT}"
        if bind not in argv:
            (node.path / "nspawn.json").write_text(json.dumps(argv + [bind]))
            machine.set_argv(node.path, argv + [bind])  # a reboot's nspawn has it too
        self.save()

    def power_off(self, node: Node, graceful: float = 0.0) -> None:
        """Stop a machine, keeping its root (graceful: systemd powers off first)."""
        machine.stop(node.path, node.init_pid, node.cgroups, graceful=graceful)

    def _make_netns(self, node: Node) -> None:
        sh("ip", "netns", "add", node.netns)
        sh("ip", "-n", self.hub, "link", "add", node.veth, "type", "veth", "peer", "name", "eth0", "netns", node.netns)
        sh("ip", "-n", self.hub, "link", "set", node.veth, "master", "br0", "up")
        sh("ip", "-n", node.netns, "addr", "add", f"{node.ip}/24", "dev", "eth0")
        sh("ip", "-n", node.netns, "link", "set", "eth0", "up")
        sh("ip", "-n", node.netns, "link", "set", "lo", "up")

    def _make_cgroups(self, node: Node) -> list[str]:
        """A cgroup v1 sub-tree per controller for this node (mounted as its root)."""
        made = []
        # cgroup v1 only: one hierarchy per controller. (On a v2 host the unified tree is
        # left as it is; Slurm's cgroup/v2 plugin wants systemd, which nodes here lack.)
        if not CGROUP_ROOT.is_dir() or (CGROUP_ROOT / "cgroup.controllers").exists():
            return made
        for ctl in sorted(os.listdir(CGROUP_ROOT)):
            top = CGROUP_ROOT / ctl
            if top.is_symlink() or not (top / "cgroup.procs").exists():
                continue
            mine = top / f"gcl-{self.name}-{node.hostname}"
            mine.mkdir(exist_ok=True)
            if ctl == "cpuset":  # a new cpuset is empty until told its CPUs and memory nodes
                for knob in ("cpuset.cpus", "cpuset.mems"):
                    (mine / knob).write_text((top / knob).read_text())
            made.append(str(mine))
        return made

    def _write_manifest(self, node: Node, files: dict[str, tuple[bytes, int, str]]) -> None:
        manifest = [
            {"path": p, "b64": base64.b64encode(c).decode(), "mode": m, "owner": o}
            for p, (c, m, o) in sorted(files.items())
        ]
        (node.path / "write_files.json").write_text(json.dumps(manifest))

    def _setup_script(self, node: Node) -> str:
        d = node.path
        lines = ["set -euo pipefail", f"hostname {node.hostname}"]
        for top in OVERLAYS:
            key = top.replace("/", "-")
            up, wk = d / "upper" / key, d / "work" / key
            lines += [
                f"mkdir -p {up} {wk}",
                f"mount -t overlay overlay -o lowerdir=/{top},upperdir={up},workdir={wk} /{top}",
            ]
        # cloud-init's write_files, inside the node's own view of the file system. It runs
        # before the private tmpfs mounts: the repository (and so this module) may live
        # under /tmp, which the node's own /tmp hides (write_files refuses those paths).
        lines.append(
            f"PYTHONPATH={REPO} {sys.executable} -S -m localcluster.nodes write-files {d / 'write_files.json'}"
        )
        for top, mode in TMPFS:
            lines.append(f"mount -t tmpfs -o mode={mode},size=1g tmpfs /{top}")
        lines += ["mkdir -p -m 1777 /run/lock"]
        for cg in node.cgroups:
            ctl = Path(cg).parent.name
            lines.append(f"mount --bind {cg} {CGROUP_ROOT / ctl}")
        if node.fsx:
            lines.append(f"mount --bind {self.fsx_dir} {layout.FSX_MOUNTPOINT}")
        lines += [f"echo ready > {d / 'init.ready'}", "exec sleep infinity"]
        return "\n".join(lines) + "\n"

    def _start_init(self, node: Node) -> None:
        script = node.path / "init.sh"
        script.write_text(self._setup_script(node))
        if not Path(layout.FSX_MOUNTPOINT).exists():
            Path(layout.FSX_MOUNTPOINT).mkdir()  # an empty mount point; removed again by `down`
            (self.root.parent / ".created-fsx").write_text("1\n")
        log = open(node.path / "init.log", "w")
        proc = subprocess.Popen(
            [
                "nsenter",
                f"--net={NETNS_DIR / node.netns}",
                "unshare",
                "--mount",
                "--uts",
                "--propagation",
                "private",
                "bash",
                str(script),
            ],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        node.init_pid = proc.pid
        deadline = time.monotonic() + 60
        while not (node.path / "init.ready").exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(
                    f"{node.hostname}: namespace set-up failed: {(node.path / 'init.log').read_text().strip()[-800:]}"
                )
            time.sleep(0.02)

    @property
    def aws_state(self) -> Path:
        """The AWS stand-in's state (its request log, the lane's topology table)."""
        return self.root / "aws"

    def _start_aws(self, node: Node):
        """The AWS stand-in in the node's namespace on 127.0.0.1:AWS_PORT (EC2's
        DescribeInstanceTopology from the lane's table); returns its readiness wait."""
        ready = node.path / "aws.ready"
        proc = subprocess.Popen(
            ["nsenter", f"--net={NETNS_DIR / node.netns}", sys.executable, "-m", "localcluster.aws_standin",
             "--state", str(self.aws_state), "--handlers", "localcluster.topology_standin:handlers",
             "--port", str(AWS_PORT), "--ready", str(ready)],
            cwd=REPO,
            env={**os.environ, "PYTHONPATH": str(REPO)},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=open(node.path / "aws.err", "w"),
            start_new_session=True,
        )  # fmt: skip

        def wait_ready() -> None:
            deadline = time.monotonic() + 30
            while not ready.exists():
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(
                        f"{node.hostname}: AWS stand-in did not start: {(node.path / 'aws.err').read_text()[-800:]}"
                    )
                time.sleep(0.02)

        return wait_ready

    def _start_imds(self, node: Node, tags: dict[str, str], az: str):
        identity = {
            "instance_id": node.instance_id,
            "local_ipv4": node.ip,
            "local_hostname": f"{node.hostname}.us-east-2.compute.internal",
            "availability_zone": az,
            "tags": tags,
            # The instance profile's role, as EC2 serves it (the controller has its own).
            "iam_role": f"gpu-cluster-local-{tags.get(node_tags.ROLE, 'worker')}",
        }
        (node.path / "imds.json").write_text(json.dumps(identity, indent=1))
        ready = node.path / "imds.ready"
        proc = subprocess.Popen(
            [
                "nsenter",
                f"--net={NETNS_DIR / node.netns}",
                sys.executable,
                "-S",
                "-m",
                "localcluster.imds",
                str(node.path / "imds.json"),
                "--port",
                str(IMDS_PORT),
                "--log",
                str(node.path / "imds.log"),
                "--ready",
                str(ready),
            ],
            cwd=REPO,
            env={**os.environ, "PYTHONPATH": str(REPO)},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=open(node.path / "imds.err", "w"),
            start_new_session=True,
        )
        node.imds_pid = proc.pid

        def wait_ready() -> None:
            deadline = time.monotonic() + 30
            while not ready.exists():
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(
                        f"{node.hostname}: IMDS stand-in did not start: {(node.path / 'imds.err').read_text()[-800:]}"
                    )
                time.sleep(0.02)

        return wait_ready

    def start_boot(self, node: Node, command: str, env: dict[str, str] | None = None) -> subprocess.Popen:
        """Run the boot command inside the node, as cloud-init's runcmd would (root, / cwd)."""
        console = open(node.path / "console.log", "ab")
        base_env = {"PATH": PATH, "HOME": "/root", "LANG": "C.UTF-8", **(env or {})}
        proc = subprocess.Popen(
            node.nsenter() + ["env", "-i"] + [f"{k}={v}" for k, v in base_env.items()] + ["bash", "-c", command],
            cwd="/",
            stdin=subprocess.DEVNULL,
            stdout=console,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        node.boot_pid = proc.pid
        node.started = time.time()
        self.save()
        return proc

    def run(
        self, node: Node, argv: list[str], *, timeout: float = 60, check: bool = False, input: str | None = None
    ) -> subprocess.CompletedProcess:
        """A command inside the node's namespaces (Slurm clients run on the controller)."""
        return subprocess.run(
            node.nsenter() + ["env", f"PATH={PATH}", "HOME=/root", "LANG=C.UTF-8"] + argv,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=check,
            input=input,
            cwd="/",
        )

    def controller(self) -> Node:
        for node in self.nodes.values():
            if node.role == "controller":
                return node
        raise RuntimeError(f"local cluster '{self.name}' has no controller")

    # ---- teardown ------------------------------------------------------------------
    def kill_node(self, node: Node, *, keep_dir: bool = False) -> None:
        """Kill every process in the node's namespaces, then remove its traces."""
        if node.is_machine:  # a pulled plug: the supervisor first, so nothing boots it again
            machine.stop(node.path, node.init_pid, node.cgroups)
            machine.forget(node.hostname)
        netns_path = NETNS_DIR / node.netns
        net_ino = os.stat(netns_path).st_ino if netns_path.exists() else None
        # A machine's processes are found by its network namespace and cgroups (its init_pid
        # is the supervisor, on the host's mount namespace); a namespace node's by both.
        mnt_ino = ns_inode(node.init_pid, "mnt") if node.init_pid and not node.is_machine else None
        if mnt_ino is not None and mnt_ino in (ns_inode(1, "mnt"), ns_inode(os.getpid(), "mnt")):
            mnt_ino = None  # a recycled pid outside any node: never match the host (pid 1 may be unreadable)
        for pid in (node.imds_pid, node.boot_pid, node.init_pid):
            if pid and ns_inode(pid, "net") == net_ino and net_ino:
                _kill(pid)
        deadline = time.monotonic() + 10
        while True:
            left = pids_in(net_ino, mnt_ino)
            if not left or time.monotonic() > deadline:
                break
            for pid in left:
                _kill(pid)
            time.sleep(0.05)
        sh("ip", "-n", self.hub, "link", "del", node.veth, check=False)
        sh("ip", "netns", "del", node.netns, check=False)
        _remove_cgroups(node.cgroups)
        if not keep_dir:
            _rmtree(node.path)
        with self.lock:
            self.nodes.pop(node.hostname, None)
        if self.root.exists():
            self.save()

    def down(self) -> list[str]:
        """Remove everything this local cluster created; safe to run again."""
        removed = []
        for node in list(self.nodes.values()):
            self.kill_node(node)
            removed.append(node.hostname)
        # Anything our state no longer knows about, found by name.
        prefix = f"gcl-{self.name}-"
        if NETNS_DIR.is_dir():
            for ns in sorted(os.listdir(NETNS_DIR)):
                if ns.startswith(prefix) and ns != self.hub:
                    ino = os.stat(NETNS_DIR / ns).st_ino
                    for pid in pids_in(ino, None):
                        _kill(pid)
                    sh("ip", "netns", "del", ns, check=False)
                    removed.append(ns)
        if (NETNS_DIR / self.hub).exists():
            sh("ip", "netns", "del", self.hub, check=False)
            removed.append(self.hub)
        if CGROUP_ROOT.is_dir():
            for ctl in os.listdir(CGROUP_ROOT):
                try:
                    stale = [p for p in (CGROUP_ROOT / ctl).glob(prefix + "*") if p.is_dir()]
                except OSError:
                    continue
                for pid in machine.cgroup_pids([str(p) for p in stale]) - {os.getpid()}:
                    _kill(pid)  # a machine our state no longer knows about
                _remove_cgroups([str(p) for p in stale])
        if self.root.exists():
            _rmtree(self.root)
            removed.append(str(self.root))
        base = self.root.parent
        marker = base / ".created-fsx"
        others = [p for p in base.iterdir() if p.is_dir()] if base.exists() else []
        if not others:
            if (
                marker.exists()
                and Path(layout.FSX_MOUNTPOINT).is_dir()
                and not os.path.ismount(layout.FSX_MOUNTPOINT)
                and not any(Path(layout.FSX_MOUNTPOINT).iterdir())
            ):
                Path(layout.FSX_MOUNTPOINT).rmdir()
                removed.append(layout.FSX_MOUNTPOINT)
            if base.exists():
                shutil.rmtree(base, ignore_errors=True)
        self.nodes = {}
        return removed


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _remove_cgroups(paths: list[str]) -> None:
    """rmdir a cgroup sub-tree bottom-up (cgroup directories cannot be rm -r'd)."""
    for top in paths:
        p = Path(top)
        if not p.exists():
            continue
        for dirpath, _dirnames, _ in sorted(os.walk(p), key=lambda t: -t[0].count("/")):
            try:
                os.rmdir(dirpath)
            except OSError:
                pass


def _rmtree(path: Path) -> None:
    """rm -r, but never across a mount point (a leaked bind of /fsx or the host)."""
    path = Path(path)
    if not path.exists():
        return
    with open("/proc/self/mountinfo") as f:
        mounts = [line.split()[4] for line in f]
    for m in sorted(mounts, key=len, reverse=True):
        if m == str(path) or m.startswith(str(path) + "/"):
            sh("umount", "-l", m, check=False)
    shutil.rmtree(path, ignore_errors=True)


def write_files(manifest_path: str) -> None:
    """cloud-init write_files, run inside the node: contents, modes, owners, parents."""
    import grp
    import pwd

    for entry in json.loads(Path(manifest_path).read_text()):
        path = Path(entry["path"])
        hidden = [top for top, _ in TMPFS if path.is_relative_to(f"/{top}")]
        if hidden:
            raise SystemExit(
                f"write_files: {path} is under /{hidden[0]}, which the local node mounts "
                "privately after writing files; write it elsewhere or extend localcluster"
            )
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(entry["b64"]))
        os.chmod(path, entry["mode"])
        user, _, group = entry["owner"].partition(":")
        try:
            os.chown(path, pwd.getpwnam(user).pw_uid, grp.getgrnam(group or user).gr_gid)
        except KeyError:
            pass  # like cloud-init, an unknown owner leaves root ownership


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "write-files":
        write_files(sys.argv[2])
    else:
        sys.exit("usage: python -m localcluster.nodes write-files MANIFEST")
