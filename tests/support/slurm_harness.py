"""Run real Slurm daemons (Debian's slurmctld/slurmd/munged) on this host with test paths.

Reusable by any test that needs a live controller or node: a private munged on its own
socket and key, slurmctld and a dynamic slurmd (`slurmd -Z --conf ...`) on free ports,
every file under one temporary directory, every process stopped by its own pid.

The rendered slurm.conf is used as is except for the lines `localize_slurm_conf`
rewrites (node paths -> test paths, ports, munge socket); everything else is what the
nodes get. Needs root (slurmd, cgroups) and Debian's slurmctld, slurmd, slurm-client, munge,
libpmix2 and libpmix-dev (Slurm's PMIx plugin loads the unversioned libpmix.so).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from model.catalog import InstanceSpec
from tests.support.processes import command_lines

DAEMONS = ("slurmctld", "slurmd", "munged", "mungekey", "scontrol", "srun")


def missing_prerequisites() -> str | None:
    """Why real Slurm cannot run here, or None when it can."""
    if os.geteuid() != 0:
        return "needs root (slurmd manages cgroups; slurmctld runs as SlurmUser=root)"
    missing = [name for name in DAEMONS if shutil.which(name) is None and not Path("/usr/sbin", name).exists()]
    if missing:
        return "missing " + ", ".join(missing) + " (apt-get install slurmctld slurmd slurm-client munge)"
    return None


SYSROOT_ENV = "GPU_CLUSTER_SLURM_SYSROOT"


def sysroot_params() -> list:
    """pytest params: this host's Slurm, plus a chroot with another version when
    $GPU_CLUSTER_SLURM_SYSROOT names one (e.g. Debian 13's Slurm 24.11: the nodes run 23.11,
    between the two)."""
    import os

    import pytest

    params = [pytest.param(None, id="host")]
    root = os.environ.get(SYSROOT_ENV)
    if root:
        why = sysroot_problem(Path(root))
        params.append(
            pytest.param(Path(root), id="sysroot", marks=pytest.mark.skipif(why is not None, reason=why or ""))
        )
    return params


def sysroot_problem(sysroot: Path) -> str | None:
    """Why a chroot holding a second Slurm cannot run the oracle, or None when it can."""
    if not (sysroot / "usr/sbin/slurmctld").exists():
        return f"{sysroot} has no /usr/sbin/slurmctld (apt-get install slurmctld slurmd slurm-client munge libpmix-dev there)"
    if not any((sysroot / "sys/fs/cgroup").iterdir() if (sysroot / "sys/fs/cgroup").is_dir() else ()):
        return f"{sysroot}/sys/fs/cgroup is empty: mount --rbind /sys {sysroot}/sys (and /proc, /dev)"
    if not (sysroot / "proc/self").exists():
        return f"{sysroot}/proc is not mounted"
    return None


def _bin(name: str) -> str:
    return shutil.which(name) or str(Path("/usr/sbin", name))


def host_short_name() -> str:
    """`hostname -s`: slurmctld only runs where this equals the SlurmctldHost name."""
    return subprocess.run(["hostname", "-s"], check=True, capture_output=True, text=True).stdout.strip()


def host_cgroup_plugin() -> str:
    """cgroup.conf CgroupPlugin for this host: cgroup/v1 unless /sys/fs/cgroup is cgroup2."""
    out = subprocess.run(["stat", "-fc", "%T", "/sys/fs/cgroup"], capture_output=True, text=True).stdout.strip()
    return "autodetect" if out == "cgroup2fs" else "cgroup/v1"


def parse_node_line(line: str) -> dict[str, str]:
    """`KEY=value KEY=value` (slurmd -C, scontrol show node) -> dict."""
    return dict(tok.split("=", 1) for tok in line.split() if "=" in tok)


def slurmd_hardware() -> dict[str, str]:
    """This host's `slurmd -C` first line as a dict."""
    out = subprocess.run([_bin("slurmd"), "-C"], check=True, capture_output=True, text=True).stdout
    return parse_node_line(out.splitlines()[0])


def host_profile_spec(name: str = "local-test") -> InstanceSpec:
    """A GPU-less InstanceSpec measured from this host, as the local cluster uses.

    memory_mib is what slurmd -C reports, so RealMemory (95 %) sits below it exactly
    like the catalog's values sit below a real node's slurmd -C.
    """
    hw = slurmd_hardware()
    return InstanceSpec(
        name=name,
        gpu_model="none",
        gpus=0,
        gpu_memory_mib=0,
        vcpus=int(hw["CPUs"]),
        sockets=int(hw["SocketsPerBoard"]) * int(hw.get("Boards", "1")),
        cores_per_socket=int(hw["CoresPerSocket"]),
        threads_per_core=int(hw["ThreadsPerCore"]),
        memory_mib=int(hw["RealMemory"]),
        network_cards=0,
        efa_count=0,
        efa_on_card0=False,
        local_nvme_gb=0,
        efa_gbps=0,
        sources={"all": "slurmd -C"},
    )


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _set_key(text: str, key: str, value: str) -> str:
    """Replace `key=...` (case-insensitive, whole line) or append it."""
    pattern = re.compile(rf"^{re.escape(key)}=.*$", re.IGNORECASE | re.MULTILINE)
    line = f"{key}={value}"
    if pattern.search(text):
        return pattern.sub(lambda _m: line, text)
    return text + line + "\n"


@dataclass
class SlurmLayout:
    """Every path a test cluster uses, under one root."""

    root: Path

    @property
    def etc(self) -> Path:
        return self.root / "etc"  # noqa: E704

    @property
    def conf(self) -> Path:
        return self.etc / "slurm.conf"  # noqa: E704

    @property
    def state(self) -> Path:
        return self.root / "slurmctld"  # noqa: E704

    @property
    def spool(self) -> Path:
        return self.root / "slurmd"  # noqa: E704

    @property
    def log(self) -> Path:
        return self.root / "log"  # noqa: E704

    @property
    def run(self) -> Path:
        return self.root / "run"  # noqa: E704

    @property
    def munge(self) -> Path:
        return self.root / "munge"  # noqa: E704

    @property
    def munge_socket(self) -> Path:
        return self.munge / "munge.socket"  # noqa: E704

    @property
    def plugstack_dir(self) -> Path:
        return self.etc / "plugstack.conf.d"  # noqa: E704

    def make_dirs(self) -> None:
        for d in (self.etc, self.state, self.spool, self.log, self.run, self.munge, self.plugstack_dir):
            d.mkdir(parents=True, exist_ok=True, mode=0o700)


def localize_slurm_conf(text: str, layout: SlurmLayout, *, ctld_port: int, slurmd_port: int) -> str:
    """Point a filled slurm.conf at test paths, free ports and the private munged.

    Only these keys change; the test asserts everything else as rendered. FirstJobId
    is derived from the (unique) controller port so job ids, and with them the job
    cgroup paths (/sys/fs/cgroup/*/slurm/uid_0/job_N), never collide with another
    test cluster or local cluster running on this host at the same time.
    """
    for key, value in (
        ("FirstJobId", 1_000_000 + ctld_port * 100),
        ("StateSaveLocation", layout.state),
        ("SlurmdSpoolDir", layout.spool),
        ("SlurmctldPidFile", layout.run / "slurmctld.pid"),
        ("SlurmdPidFile", layout.run / "slurmd.pid"),
        ("SlurmctldLogFile", layout.log / "slurmctld.log"),
        ("SlurmdLogFile", layout.log / "slurmd.log"),
        ("JobCompLoc", layout.state / "jobcomp.log"),
        ("PlugStackConfig", layout.etc / "plugstack.conf"),
        ("SlurmctldPort", ctld_port),
        ("SlurmdPort", slurmd_port),
        ("AuthInfo", f"socket={layout.munge_socket}"),
    ):
        text = _set_key(text, key, str(value))
    return text


def localize_plugstack_conf(text: str, layout: SlurmLayout) -> str:
    return text.replace("/etc/slurm/plugstack.conf.d", str(layout.plugstack_dir))


def wait_for(predicate, timeout: float, what: str, interval: float = 0.2):
    """Poll predicate() until it returns a truthy value; raise TimeoutError naming `what`."""
    deadline = time.monotonic() + timeout
    while True:
        result = predicate()
        if result:
            return result
        if time.monotonic() > deadline:
            raise TimeoutError(f"gave up after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


@dataclass
class SlurmTestCluster:
    """A private munged + slurmctld (+ optional dynamic slurmds) under `layout.root`.

    `sysroot`: run the daemons and clients of another Slurm installed in a chroot
    (e.g. Debian 13's Slurm 24.11 from debootstrap) instead of this host's. The layout
    paths are then paths inside the chroot; the chroot needs /proc, /dev and
    `mount --rbind /sys` (cgroups) in place.

    Usage:
        cluster = SlurmTestCluster(SlurmLayout(tmp_path))
        cluster.write_configs({"slurm.conf": ..., "cgroup.conf": ...})  # filled, localized
        try:
            cluster.start_munged(); cluster.start_slurmctld()
            cluster.start_slurmd("NodeAddr=127.0.0.1 CPUs=...")
            print(cluster.run("scontrol", "show", "node").stdout)
        finally:
            cluster.stop()
    """

    layout: SlurmLayout
    sysroot: Path | None = None
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)

    def __post_init__(self) -> None:
        SlurmLayout(self.host_path(self.layout.root)).make_dirs()

    def host_path(self, path: Path) -> Path:
        """Where a layout path is on this host (inside the sysroot when there is one)."""
        return self.sysroot / path.relative_to("/") if self.sysroot else path

    def _argv(self, argv: list[str]) -> list[str]:
        return ["chroot", str(self.sysroot), *argv] if self.sysroot else argv

    def _daemon(self, name: str) -> str:
        return str(Path("/usr/sbin", name)) if self.sysroot else _bin(name)

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.layout.conf)}

    def write_configs(self, files: dict[str, str]) -> None:
        """Write config files by name into the conf directory (next to slurm.conf)."""
        for name, text in files.items():
            self.host_path(self.layout.etc / name).write_text(text)

    def _spawn(self, name: str, argv: list[str]) -> subprocess.Popen:
        log = open(self.host_path(self.layout.log / f"{name}.stderr"), "wb")  # noqa: SIM115
        proc = subprocess.Popen(
            self._argv(argv), stdout=log, stderr=subprocess.STDOUT, env=self.env, start_new_session=True
        )
        log.close()
        self.procs[name] = proc
        return proc

    def _check_alive(self, name: str) -> None:
        proc = self.procs[name]
        if proc.poll() is not None:
            raise RuntimeError(f"{name} exited with {proc.returncode}:\n{self.logs(name)}")

    def logs(self, name: str) -> str:
        texts = []
        for path in (self.layout.log / f"{name}.stderr", self.layout.log / f"{name}.log"):
            path = self.host_path(path)
            if path.exists():
                texts.append(path.read_text(errors="replace")[-4000:])
        return "\n".join(texts)

    def start_munged(self) -> None:
        m = self.layout.munge
        key = m / "munge.key"
        subprocess.run(self._argv([self._daemon("mungekey"), "-c", "-k", str(key)]), check=True, capture_output=True)
        self._spawn(
            "munged",
            [
                self._daemon("munged"),
                "-F",
                "-f",
                f"--socket={self.layout.munge_socket}",
                f"--key-file={key}",
                f"--pid-file={m / 'munged.pid'}",
                f"--seed-file={m / 'munged.seed'}",
            ],
        )

        def ready() -> bool:
            self._check_alive("munged")
            return self.host_path(self.layout.munge_socket).exists()

        wait_for(ready, 10, "munged to create its socket")

    def start_slurmctld(self, timeout: float = 15) -> None:
        self._spawn("slurmctld", [self._daemon("slurmctld"), "-D", "-c", "-f", str(self.layout.conf)])

        def ready() -> bool:
            self._check_alive("slurmctld")
            r = self.run("scontrol", "ping", check=False, timeout=5)
            return r.returncode == 0 and "is UP" in r.stdout

        try:
            wait_for(ready, timeout, "slurmctld to answer `scontrol ping`", interval=0.3)
        except TimeoutError as err:
            raise TimeoutError(f"{err}\n{self.logs('slurmctld')}") from None

    def start_slurmd(self, conf_line: str, name: str = "slurmd") -> None:
        """Start a dynamic slurmd (-Z) with the given --conf node line."""
        self._spawn(name, [self._daemon("slurmd"), "-D", "-Z", "--conf", conf_line, "-f", str(self.layout.conf)])

    def wait_node_state(self, node: str, states: tuple[str, ...] = ("IDLE",), timeout: float = 20) -> dict[str, str]:
        """Wait until `scontrol show node` reports one of `states`; return its fields."""

        def ready():
            self._check_alive("slurmd")
            r = self.run("scontrol", "-o", "show", "node", node, check=False, timeout=5)
            if r.returncode != 0:
                return None
            fields = parse_node_line(r.stdout)
            state = fields.get("State", "")
            return fields if any(state.split("+")[0] == s for s in states) else None

        try:
            return wait_for(ready, timeout, f"node {node} to reach {'/'.join(states)}", interval=0.3)
        except TimeoutError as err:
            raise TimeoutError(f"{err}\n{self.logs('slurmd')}\n{self.logs('slurmctld')}") from None

    def run(self, *argv: str, check: bool = True, timeout: float = 15) -> subprocess.CompletedProcess:
        """Run a Slurm client command against this cluster (SLURM_CONF set)."""
        return subprocess.run(
            self._argv(list(argv)), env=self.env, capture_output=True, text=True, check=check, timeout=timeout
        )

    def stop(self, timeout: float = 5) -> None:
        """Stop every process this cluster started (last started first), by pid."""
        for name in reversed(list(self.procs)):
            proc = self.procs[name]
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=timeout)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=5)
        self.procs.clear()
        kill_leftover_steps(self.host_path(self.layout.spool))


def kill_leftover_steps(spool: Path) -> list[int]:
    """Kill the slurmstepd processes of jobs this cluster's slurmd ran; return their pids.

    slurmd leaves its steps running when it stops (so that a restart keeps jobs), and a
    test that ended with a batch job still running left one `slurmstepd: [<job>.batch]`
    on the host per run. Each step's socket in the spool dir (`<node>_<job>.<step>`)
    names the job, so only this cluster's steps are touched."""
    jobs = {p.name.rsplit("_", 1)[-1].split(".")[0] for p in spool.glob("*_*.*") if p.is_socket()}
    killed = []
    for pid, argv in command_lines() if jobs else ():
        m = re.match(r"slurmstepd: \[(\d+)\.", argv[0].decode(errors="replace")) if argv else None
        if m and m.group(1) in jobs:
            try:
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            except ProcessLookupError:
                pass
    return killed


def start_host_cluster(layout: SlurmLayout, name: str, conf_edit=None, sysroot: Path | None = None) -> SlurmTestCluster:
    """A one-node cluster from our rendered Slurm files (this host as controller and node,
    partition `train`, MaxNodeCount 8), munged, slurmctld and slurmd started and the node
    registered. `conf_edit(text) -> text` changes slurm.conf before it is localized.
    `sysroot`: the daemons and clients of the Slurm installed there (see SlurmTestCluster);
    `layout` is then a path inside it."""
    from tests.support.node_shell import fill_placeholders
    from userdata import slurm_conf as sc

    c = start_host_controller(layout, name, conf_edit, sysroot=sysroot)
    c.start_slurmd(
        fill_placeholders(sc.slurmd_conf_arg(host_profile_spec()), {"NODE_ADDR": "127.0.0.1", "NODE_BLOCK": "a"})
    )
    c.wait_node_state(host_short_name())
    return c


def start_host_controller(
    layout: SlurmLayout, name: str, conf_edit=None, sysroot: Path | None = None
) -> SlurmTestCluster:
    """start_host_cluster without the node: munged and slurmctld only (the test starts
    this host's slurmd itself, e.g. as a node that joins a running cluster); `sysroot` as
    start_host_cluster's."""
    from tests.support.node_shell import fill_placeholders
    from userdata import layout as node_layout
    from userdata import slurm_conf as sc

    spec = host_profile_spec()
    files = sc.render_slurm_files(name, "train", spec, cgroup_plugin=host_cgroup_plugin())
    conf = fill_placeholders(
        files[node_layout.SLURM_CONF_TEMPLATE],
        {"CONTROLLER_HOST": host_short_name(), "CONTROLLER_ADDR": "127.0.0.1", "MAX_NODES": 8},
    )
    if conf_edit is not None:
        conf = conf_edit(conf)
    c = SlurmTestCluster(layout, sysroot=sysroot)
    c.write_configs(
        {
            "slurm.conf": localize_slurm_conf(conf, layout, ctld_port=free_port(), slurmd_port=free_port()),
            "cgroup.conf": files["/etc/slurm/cgroup.conf"],
            "gres.conf": files["/etc/slurm/gres.conf"],
            "plugstack.conf": localize_plugstack_conf(files[node_layout.PLUGSTACK_CONF], layout),
        }
    )
    c.start_munged()
    c.start_slurmctld()
    return c
