"""Bring a local cluster up from the rendered user data, watch it, show it working.

The user data is rendered once per cluster and kept (`user-data.bin` in the state
directory) so a replacement node boots from exactly the same bytes as the first ones.
Two kinds of lanes:
- machine lanes (`bookworm`, `trixie`; machine.py): each node is a whole machine with
  systemd as PID 1; cloud-init in it reads those exact bytes from a NoCloud seed and
  runs them; systemd runs the units the boot enables;
- the `namespace` lane (nodes.py): each node gets the files cloud-init would write,
  and the boot runs in "direct" mode without systemd (fast; for quick checks).
Besides the user data a node gets the one file the contract allows a local node to
have: /etc/gpu-cluster/overrides.env with the documented swaps. Nothing in the
rendered scripts is edited.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from clitools.errors import UsageError
from localcluster import autoscaling, hardware, machine, profile
from localcluster.mirror import CLOUDWATCH_SKIP
from localcluster.nodes import AWS_PORT, IMDS_PORT, Cluster, Node
from localcluster.profile import TEST_IMAGE
from model import tags as node_tags
from userdata import layout
from userdata.layout import ENTRY_POINT

SCRIPTS_DIR = "/var/lib/cloud/instance/scripts"  # where cloud-init keeps x-shellscript parts
# The documented swaps (docs/node-contract.md), and nothing else.
OVERRIDES = {
    "AWS_EC2_METADATA_SERVICE_ENDPOINT": f"http://127.0.0.1:{IMDS_PORT}",
    "GPU_CLUSTER_SERVICE_MANAGER": "direct",
    "GPU_CLUSTER_PACKAGES": "preinstalled",
    "CLOUDWATCH_SKIP": CLOUDWATCH_SKIP,
}
# Machine lanes: systemd stays the service manager (the default, so not written), and the
# units step 85 enables are what systemd runs. The host adds only the metadata address
# and the EC2 endpoint (the AWS stand-in, in a controller's namespace: nodes.py) to
# the overrides.env baked into the lane's root (its pins: SLURM_SERIES, ENROOT_VERSION, the
# mirror URLs, GPU_CLUSTER_FSX=bind), so step 20 checks exact versions as on a baked AMI.
MACHINE_OVERRIDES = {
    "AWS_EC2_METADATA_SERVICE_ENDPOINT": f"http://127.0.0.1:{IMDS_PORT}",
    "CLOUDWATCH_SKIP": CLOUDWATCH_SKIP,
    # the controller's boto3 calls (the topology refresh) go to the lane's AWS stand-in
    "AWS_ENDPOINT_URL_EC2": f"http://127.0.0.1:{AWS_PORT}",
}
# A root without baked pins (a hand-made one, GPU_CLUSTER_LOCAL_ROOT) has Debian's Slurm,
# not the series step 20 would install, and no route to an archive: verify binaries only.
UNBAKED_OVERRIDES = {"GPU_CLUSTER_PACKAGES": "preinstalled"}
LANES = ("bookworm", "trixie", "slurm2311", "namespace")
IMAGES = ("baked", "plain")
DEFAULT_LANE = "bookworm"
LAUNCH_PARALLEL = 4
# The entry point's lines in boot.log: "<ts> [boot] end 10-identity ok after 0.4s",
# "<ts> [boot] FAILED 30-fsx after 0.2s: <reason>"; steps log "<ts> [NN-step] ...".
STEP_LINE = re.compile(r"^\S+ \[(?P<who>[^\]]+)\] (?P<msg>.*)$")
STEP_END = re.compile(
    r"^(?:end (?P<ok>\S+) ok|FAILED (?P<failed>\S+)) after (?P<secs>\d+(?:\.\d+)?)s(?:: (?P<reason>.*))?$"
)
WAIT_DONE = re.compile(r"done waiting after (\d+(?:\.\d+)?)s: (.*)")


def overrides_env(swaps: dict[str, str] | None = None) -> bytes:
    return machine.env_text({**OVERRIDES, **(swaps or {})})


def pauses(first: float = 0.05, cap: float = 0.5) -> Iterator[float]:
    """Pauses between polls, as the nodes' wait_until does: short at first (what is nearly
    ready is seen at once), then 1.5x longer each time up to `cap`."""
    pause = first
    while True:
        yield pause
        pause = min(cap, pause * 1.5)


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
    since: float = 0.0  # machines: a status file older than this is a previous boot's
    checked: float = 0.0  # machines: when cloud-init's result was last looked at


class LocalCluster:
    def __init__(
        self,
        name: str = "local",
        subnet: int = 0,
        out=print,
        lane: str | None = None,
        placement: str | None = None,
        image: str = "baked",
        team: bool = False,
        *,
        settings: dict | None = None,
        kit: hardware.Kit | None = None,
        swaps: dict[str, dict[str, str]] | None = None,
        autoscaling: bool = False,
    ):
        """`settings`: stack config sections on top of the lane's (profile.local_config);
        `kit`: stand-in GPU/EFA hardware on every node (localcluster/hardware.py);
        `swaps`: more overrides.env lines per role (tests' shorter bounded waits, e.g. the
        controller's JOIN_SETTLE; never on AWS: docs/node-contract.md); `autoscaling`: the
        Auto Scaling stand-in in the controller's namespace (localcluster/autoscaling.py),
        each machine in its group, terminations followed by follow_terminations()."""
        self.c = Cluster(name, subnet)
        self.name = name
        self.out = out
        if lane is not None and lane not in LANES:
            raise ValueError(f"lane '{lane}': use one of {', '.join(LANES)}")
        if placement is not None and placement not in profile.PLACEMENTS:
            raise ValueError(f"controller placement '{placement}': use one of {', '.join(profile.PLACEMENTS)}")
        self._placement = placement or "block"
        self._settings = settings or {}
        self.kit = kit
        self.swaps = swaps or {}
        self.autoscaling = autoscaling
        self.followed = 0  # terminations (asg_standin) already acted on
        if image not in IMAGES:
            raise ValueError(f"image '{image}': use one of {', '.join(IMAGES)}")
        # baked: the lane's root as an AMI is baked (images.py); plain: the same without the
        # bake, so step 20 installs at boot as on a plain DLAMI (plain_root.py, benchmarks).
        self.image = image
        # The team lane (localcluster/team.py): accounting on a MariaDB of its own, the
        # stack's users and a login machine. A running cluster keeps what it was.
        self._team = team
        # A running cluster keeps its lane. The library's default stays the namespace lane
        # (callers that predate the machine lanes); the command line defaults to DEFAULT_LANE.
        self.lane = self.c.lane or lane or "namespace"
        self.watches: dict[str, BootWatch] = {}
        self.seen_skips: set[tuple[str, str]] = set()
        self.launch_seconds = 0.0
        self.root_seconds = 0.0
        self.root_built = False  # this run built the lane's root (a cold start)
        self._base: Path | None = None

    @property
    def machines(self) -> bool:
        return self.lane != "namespace"

    @property
    def placement(self) -> str:
        """controller.placement of the rendered stack; a running cluster keeps its own."""
        f = self.c.root / "placement"
        return f.read_text().strip() if f.exists() else self._placement

    @property
    def dedicated(self) -> bool:
        return self.placement == "dedicated"

    @property
    def team(self) -> bool:
        return (self.c.root / "team").exists() or self._team

    @property
    def database(self):
        from localcluster.team import LocalDatabase

        return LocalDatabase(self.c)

    def login_count(self) -> int:
        return self.team_raw()["login"]["count"] if self.team else 0

    def team_raw(self) -> dict:
        from localcluster.team import team_raw

        return team_raw()

    def slurm_nodes(self) -> list[Node]:
        """The nodes running slurmd: all but a dedicated controller and login nodes (no jobs)."""
        return [
            n for n in self.c.nodes.values() if n.role != "login" and not (self.dedicated and n.role == "controller")
        ]

    def base_root(self) -> Path:
        """The lane's baked root (images.py builds and caches it; GPU_CLUSTER_LOCAL_ROOT overrides)."""
        if self._base is None and self.c.base and Path(self.c.base).is_dir():
            self._base = Path(self.c.base)  # a running cluster's nodes all boot the same root
        if self._base is None:
            t0 = time.monotonic()
            given = os.environ.get("GPU_CLUSTER_LOCAL_ROOT")
            if given:
                self._base = Path(given)
            elif self.image == "plain":
                from localcluster import plain_root

                cached = set(plain_root.images.CACHE_ROOT.glob("roots/*"))
                self._base = plain_root.build(self.lane)
                self.root_built = self._base not in cached
            else:
                from localcluster import images

                cached = set(images.CACHE_ROOT.glob("roots/*"))
                self._base = Path(images.build_root(self.lane))
                self.root_built = self._base not in cached
            self.root_seconds = time.monotonic() - t0
            if not any((self._base / p).exists() for p in ("usr/lib/systemd/systemd", "lib/systemd/systemd")):
                raise RuntimeError(f"{self._base}: not a root with systemd (lane {self.lane})")
            self.c.base = str(self._base)
        return self._base

    # ---- user data -----------------------------------------------------------------
    @property
    def user_data_file(self) -> Path:
        return self.c.root / "user-data.bin"

    @property
    def payload_dir(self) -> Path:
        return self.c.root / "payload"

    @property
    def settings(self) -> dict:
        """The stack config this cluster was rendered with on top of the lane's; a running cluster keeps its own."""
        f = self.c.root / "settings.json"
        return json.loads(f.read_text()) if f.exists() else self._settings

    def render(self, nodes: int) -> profile.UserData:
        settings = self.settings
        team = self.team_raw() if self.team else None
        db_host = self.database.ip if self.team else None
        ud = profile.render(
            self.name,
            nodes,
            str(self.payload_dir),
            placement=self.placement,
            team=team,
            db_host=db_host,
            settings=settings,
        )
        self.c.root.mkdir(parents=True, exist_ok=True)
        (self.c.root / "placement").write_text(self.placement + "\n")
        (self.c.root / "settings.json").write_text(json.dumps(settings, sort_keys=True) + "\n")
        if self.team:
            (self.c.root / "team").write_text("accounting, users, login\n")
        self.user_data_file.write_bytes(ud.raw)
        if ud.payload is not None:
            self.payload_dir.mkdir(exist_ok=True)
            (self.payload_dir / f"{ud.payload[0]}.tar.gz").write_bytes(ud.payload[1])
        (self.c.root / "expected-nodes").write_text(f"{nodes}\n")
        problems = profile.parity_problems(ud)
        via = (
            f", {len(profile.payload_files(ud.payload[1]))} more in a {len(ud.payload[1])}-byte payload "
            f"(file:// stand-in for S3)"
            if ud.payload
            else ""
        )
        self.out(
            f"user data: {len(ud.raw)} bytes (gzip), {len(ud.files)} files in write_files{via}, "
            f"{len(ud.scripts)} boot script(s)"
        )
        self.out(profile.PROFILE_NOTE + f"; Slurm cgroup plugin {profile.cgroup_plugin()}")
        for p in problems:
            self.out(f"  WARNING parity: {p}")
        return ud

    def shipped(self) -> tuple[dict, list, list[bytes]]:
        return profile.parse_user_data(self.user_data_file.read_bytes())

    def expected_nodes(self) -> int:
        return int((self.c.root / "expected-nodes").read_text())

    # ---- nodes -------------------------------------------------------------------------
    def launch(
        self,
        role: str,
        *,
        fsx: bool = True,
        extra: dict[str, tuple[bytes, int, str]] | None = None,
        expected: int | None = None,
        block: str = node_tags.ON_DEMAND,
    ) -> BootWatch:
        """Create a node from the kept user data and start its boot (like an ASG launch).

        `block`: its GpuClusterBlock tag (a Capacity Block's name; no end tag, so no
        block-end reservation: end_block stands for EC2's terminations)."""
        files, runcmd, scripts = self.shipped()
        to_write = {p: (f.content, f.permissions, f.owner) for p, f in files.items()}
        # cloud-init keeps x-shellscript parts as files and runs them after write_files.
        for i, script in enumerate(scripts):
            to_write[f"{SCRIPTS_DIR}/part-{i + 1:03d}"] = (script, 0o700, "root:root")
        extra, swaps = self._team_extras(role, {**(self.kit.files() if self.kit else {}), **(extra or {})})
        swaps = {**self.node_swaps(role), **swaps, **self.swaps.get(role, {})}
        to_write[layout.OVERRIDES_ENV] = (overrides_env(swaps), 0o644, "root:root")
        to_write.update(extra)
        tags = node_tags.identity_tags(self.name, role, expected or self.expected_nodes(), block)
        if self.machines:
            w = self._launch_machine(role, tags, fsx=fsx, extra=extra, swaps=swaps)
        else:
            node = self.c.create_node(role, to_write, fsx=fsx, tags=tags, az=profile.AZ)
            proc = self.c.start_boot(node, boot_command(runcmd, len(scripts)))
            w = BootWatch(node, proc)
            with self.c.lock:
                self.watches[node.hostname] = w
        if self.autoscaling:
            autoscaling.add(self.c.root, self.name, w.node)
            if role == "controller":
                autoscaling.start(self.c.root, w.node)
        return w

    def node_swaps(self, role: str) -> dict[str, str]:
        """overrides.env lines beyond the lane's own: the kit's, the Auto Scaling endpoint
        (controller), then the caller's for the role."""
        out = dict(self.kit.swaps()) if self.kit else {}
        if self.autoscaling and role == "controller":
            out["AWS_ENDPOINT_URL_AUTO_SCALING"] = autoscaling.endpoint()
        return {**out, **self.swaps.get(role, {})}

    def _team_extras(
        self, role: str, extra: dict[str, tuple[bytes, int, str]]
    ) -> tuple[dict[str, tuple[bytes, int, str]], dict[str, str]]:
        """The team lane's controller gets the database secret file and its swap."""
        if not (self.team and role == "controller"):
            return extra, {}
        from localcluster import team

        return {**team.controller_files(self.database), **extra}, team.controller_swaps()

    def _host_limits(self, machines: int) -> None:
        said = machine.ensure_inotify(machines)
        if said:
            self.out(f"host: {said}")

    def _launch_machine(
        self,
        role: str,
        tags: dict[str, str],
        *,
        fsx: bool,
        extra: dict[str, tuple[bytes, int, str]],
        swaps: dict[str, str] | None = None,
    ) -> BootWatch:
        self._host_limits(len(self.c.nodes) + 1)
        base = self.base_root()
        # The payload at its own path; the root's local apt repositories at their mount points.
        ro: list[str | tuple[str, str]] = [str(self.payload_dir)] if self.payload_dir.is_dir() else []
        from localcluster import images

        ro += images.apt_repo_binds(base)
        if self.image == "plain":
            from localcluster import plain_root

            ro += plain_root.binds(self.lane)
        baked = "SLURM_SERIES" in machine.read_env(base / machine.OVERRIDES)
        node = self.c.create_machine(
            role,
            lane=self.lane,
            base=base,
            user_data=self.user_data_file.read_bytes(),
            swaps={**MACHINE_OVERRIDES, **({} if baked else UNBAKED_OVERRIDES), **(swaps or {})},
            files=extra,
            fsx=fsx,
            tags=tags,
            az=profile.AZ,
            ro_binds=ro,
        )
        w = BootWatch(node, None)
        with self.c.lock:
            self.watches[node.hostname] = w
        return w

    def up(self, n: int, *, timeout: float = 600, block: str = node_tags.ON_DEMAND) -> float:
        """Boot a cluster of capacity.nodes = n (plus a dedicated controller); `block`
        tags the workers (and a colocated controller) as that block's machines."""
        if n < 2:  # capacity.nodes' minimum (model/capacity.py)
            raise UsageError(
                "a local cluster needs at least 2 nodes (capacity.nodes; a dedicated controller is besides them)"
            )
        if self.machines:  # the root is built (or found in the cache) before the clock starts
            base = self.base_root()
            how = "built" if self.root_built else "cached"
            self.out(f"lane {self.lane}: root {base} ({how}) ready in {self.root_seconds:.1f}s")
        t0 = time.monotonic()
        self.c.lane = self.lane
        if self.team:
            self.database.start()
            self.out(
                f"accounting database: MariaDB at {self.database.ip}:3306 (its own namespace, data in {self.database.dir})"
            )
        self.render(n)
        if self.machines:
            self.test_image()  # before boot: the first-boot gate runs it
        kind = (
            f"systemd-nspawn machines ({self.lane}, systemd + cloud-init, NoCloud seed)"
            if self.machines
            else "network namespaces (direct mode)"
        )
        self.out(
            f"starting {n} nodes: {kind} on 10.77.{self.c.subnet}.0/24, "
            f"IMDS stand-in on 127.0.0.1:{IMDS_PORT} in each, shared /fsx"
        )
        self._launch_all(n, block)
        self.launch_seconds = time.monotonic() - t0
        self.out(f"{len(self.c.nodes)} nodes started in {self.launch_seconds:.1f}s; booting:")
        return self._finish_bring_up(t0, timeout)

    def _launch_all(self, n: int, block: str = node_tags.ON_DEMAND) -> None:
        ctl_block, workers = launch_plan(n, self.dedicated, block)
        if self.machines:
            self._host_limits(1 + workers + len(self.c.nodes))
        self.launch("controller", expected=n, block=ctl_block)
        self._launch_workers(workers, n, block)
        for _ in range(self.login_count()):
            self.launch("login", expected=n)

    def _launch_workers(self, count: int, expected: int, block: str) -> list[BootWatch]:
        # Workers launch a few at a time, like an Auto Scaling group filling up; each
        # starts booting as soon as its namespaces exist.
        with ThreadPoolExecutor(max_workers=LAUNCH_PARALLEL) as pool:
            futures = [pool.submit(self.launch, "worker", expected=expected, block=block) for _ in range(count)]
            return [f.result() for f in futures]

    # ---- blocks: a later block's machines join, a block's machines end ------------------
    def launch_block(self, block: str, count: int, *, timeout: float = 600) -> list[BootWatch]:
        """Boot `count` workers of block `block` into the running cluster, as its group
        scales out at the block's start: the same user data, GpuClusterBlock=`block`.
        Returns once their boots ended (joining Slurm is the controller's business)."""
        if block == node_tags.ON_DEMAND or any(n.block == block for n in self.c.nodes.values()):
            raise UsageError(f"block '{block}': name a new block (its machines are not running)")
        if count < 1:
            raise UsageError(f"block '{block}': needs at least 1 node")
        if self.machines:
            self._host_limits(len(self.c.nodes) + count)
        ws = self._launch_workers(count, self.expected_nodes(), block)
        self.out(f"block {block}: {count} machine(s) started; booting:")
        self.watch(ws, timeout=timeout)
        self._raise_failed([w for w in ws if w.rc != 0])
        return ws

    def end_block(self, block: str) -> list[str]:
        """Kill every machine of block `block` at once, as EC2 terminates a Capacity
        Block's instances: no shutdown, no goodbye to slurmctld (the controller keeps
        their entries; draining them first is the block-end pass's job)."""
        gone = sorted(h for h, n in self.c.nodes.items() if n.block == block)
        if not gone:
            raise UsageError(f"block '{block}': no machine of it is running")
        for hostname in gone:
            self.out(f"block {block} ends: killing {hostname}")
            self.c.kill_node(self.c.nodes[hostname])
            self.watches.pop(hostname, None)
        return gone

    def follow_terminations(self) -> list[tuple[str, BootWatch]]:
        """Do what Auto Scaling does after each new TerminateInstanceInAutoScalingGroup the
        stand-in answered (localcluster/asg_standin.py): the instance is terminated (its
        machine killed, no goodbye to slurmctld) and, the desired capacity unchanged, the
        group launches a new instance from the same template into the same block (new
        instance id, name and address; the same tags, kit and overrides). Returns
        (terminated hostname, the new machine's boot watch) per termination; the boots run
        on (watch() them)."""
        from localcluster import asg_standin

        done = asg_standin.terminations(autoscaling.state_dir(self.c.root))
        out = []
        for t in done[self.followed :]:
            self.followed += 1
            old = next((n for n in self.c.nodes.values() if n.instance_id == t["instance_id"]), None)
            if old is None:
                self.out(f"auto scaling: {t['instance_id']} is not running; nothing to terminate")
                continue
            role, block = old.role, old.block
            self.out(f"auto scaling: terminating {old.hostname} ({old.instance_id}) in {t['group']}")
            self.c.kill_node(old)
            self.watches.pop(old.hostname, None)
            w = self.launch(role, block=block)
            self.out(f"auto scaling: launched {w.node.hostname} ({w.node.instance_id}) into {t['group']}")
            out.append((old.hostname, w))
        return out

    def _raise_failed(self, failed: list[BootWatch]) -> None:
        """Say what a failed boot left: its last log lines, every node as the controller's
        Slurm sees it (a wait that timed out is about another node's state) and the jobs in
        its queue (what holds a node); then raise. The error's first line carries the same
        in brief: a test report's summary keeps only that line, and a lane run's printed
        lines may be all a CI log leaves out."""
        if not failed:
            return
        brief = []
        for w in failed:
            self.out(f"{w.node.hostname}: boot FAILED (exit {w.rc}); last log lines:")
            tail = self.log_tail(w.node, 15)
            for line in tail:
                self.out(f"    {line}")
            last = f": {tail[-1].strip()[-300:]}" if tail else ""
            brief.append(f"{w.node.hostname} (exit {w.rc}{last})")
        rows = self.node_reasons()
        self.out("Slurm's nodes (sinfo on the controller):" + ("" if rows else " no answer"))
        said = []
        for name, (state, reason) in sorted(rows.items()):
            said.append(f"{name} {state}" + (f" ({reason})" if reason else ""))
            self.out(f"    {said[-1]}")
        jobs = self.queue_rows()
        self.out("Slurm's queue (squeue on the controller):" + ("" if jobs else " empty or no answer"))
        for row in jobs:
            self.out(f"    {row}")
        self._say_daemon_logs([name for name, (state, _) in rows.items() if state != "idle"])
        raise RuntimeError(
            "boot failed on "
            + ", ".join(brief)
            + f"; Slurm's nodes: {', '.join(said) or 'no answer'}; queue: {', '.join(jobs) or 'empty or no answer'}"
        )

    def _finish_bring_up(self, t0: float, timeout: float) -> float:
        self.watch(timeout=timeout)
        self._raise_failed([w for w in self.watches.values() if w.rc != 0])
        self.wait_idle(len(self.slurm_nodes()), timeout=max(30.0, timeout - (time.monotonic() - t0)))
        return time.monotonic() - t0

    # ---- machine lifecycle ---------------------------------------------------------------
    def reboot(self, hostname: str, *, hard: bool = False, timeout: float = 300) -> BootWatch:
        """Reboot a machine: `systemctl reboot` inside, or (hard) power off and boot again.

        Either way the root is kept and the instance id too: cloud-init runs only the
        per-boot script, which runs gpu-cluster-boot again. Returns once its boot ended.
        """
        node = self._machine(hostname)
        log = node.upper(layout.BOOT_LOG)
        w = BootWatch(node, None, offset=log.stat().st_size if log.exists() else 0, since=time.time())
        if hard:
            self.out(f"{hostname}: power off (pulled plug) and boot again")
            self.c.power_off(node)
            self.c.power_on(node)
        else:
            self.out(f"{hostname}: systemctl reboot")
            self.c.run(node, ["systemctl", "reboot"], timeout=30)
        with self.c.lock:
            self.watches[hostname] = w
        self.watch([w], timeout=timeout)
        return w

    def relaunch(self, *, timeout: float = 600) -> float:
        """Destroy every machine, then launch new ones (new ids) against the kept /fsx.

        Like a whole cluster replaced at once (the next Capacity Block): the user data
        and /fsx survive, nothing else does. Old node names are removed from Slurm once
        every new node booted. Returns seconds until every new node is idle.
        """
        n = self.expected_nodes()
        old = sorted(self.c.nodes)
        if self.machines:
            self.base_root()  # the same root as before; found before anything is destroyed
        t0 = time.monotonic()
        for hostname in old:
            self.out(f"destroying {hostname}")
            self.c.kill_node(self.c.nodes[hostname])
        self.watches.clear()
        self.c.lane = self.lane
        self._launch_all(n)
        self.launch_seconds = time.monotonic() - t0
        self.out(f"{len(self.c.nodes)} new nodes started in {self.launch_seconds:.1f}s; booting:")
        secs = self._finish_bring_up(t0, timeout)  # reports failures, waits for idle
        for hostname in old:
            self.forget_node(hostname)
        return secs

    def memory(self) -> dict[str, dict[str, float]]:
        """Per machine: MiB in its memory cgroup (all, anonymous) plus its IMDS stand-in's RSS."""
        out = {}
        for node in sorted(self.c.nodes.values(), key=lambda n: n.serial):
            m = machine.memory(node.cgroups) if node.is_machine else {}
            if m:
                m["imds_rss_mib"] = machine.rss_mib(node.imds_pid)
                out[node.hostname] = m
        return out

    def _machine(self, hostname: str) -> Node:
        node = self.c.nodes.get(hostname)
        if node is None:
            raise UsageError(f"no node {hostname} in local cluster '{self.name}'")
        if not node.is_machine:
            raise UsageError(f"{hostname} is a namespace node; reboot needs a machine lane")
        return node

    # ---- watching ------------------------------------------------------------------
    def log_tail(self, node: Node, n: int) -> list[str]:
        p = node.upper(layout.BOOT_LOG)
        lines = p.read_text(errors="replace").splitlines() if p.exists() else []
        if not lines:
            c = node.path / "console.log"
            lines = c.read_text(errors="replace").splitlines() if c.exists() else []
        return lines[-n:]

    def poll(self, w: BootWatch) -> None:
        p = w.node.upper(layout.BOOT_LOG)
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
        if w.proc is None and w.rc is None and w.node.is_machine:
            self._poll_machine(w)

    def _poll_machine(self, w: BootWatch) -> None:
        """A machine's boot ended when its status says ok/failed (this boot's), or when
        cloud-init finished without our boot saying so (e.g. the payload fetch failed)."""
        state = self._fresh_state(w)
        if state in ("ok", "failed"):
            w.rc = 0 if state == "ok" else 1
            w.finished = time.time()
            return
        now = time.monotonic()
        if now - w.checked < 2:
            return
        w.checked = now
        pid = w.node.leader()
        result = machine.state_file(pid, "/run/cloud-init/result.json") if pid else None
        try:
            done = result is not None and result.stat().st_mtime >= w.since
        except OSError:
            done = False
        if done:
            state = self._fresh_state(w)  # written before cloud-init's result
            w.rc = 0 if state == "ok" else (1 if state == "failed" else 2)
            w.finished = time.time()

    @staticmethod
    def _fresh_state(w: BootWatch) -> str | None:
        st = w.node.upper(layout.LOCAL_STATUS)
        try:
            if st.stat().st_mtime < w.since:
                return None
            return json.loads(st.read_text()).get("state")
        except (OSError, ValueError):
            return None

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
            self.out(f"  {w.node.hostname:<15} {step:<13} {r.state:<6} {r.seconds:5.1f}s{note}")
        elif msg.startswith("SKIPPED: "):
            w.skipped_in.setdefault(who, []).append(
                re.sub(r" \(GPU_CLUSTER_PACKAGES=preinstalled\)$", "", msg[len("SKIPPED: ") :])
            )

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
            time.sleep(0.1)  # reads the boot logs' new lines: cheap
        for w in ws:
            self.poll(w)

    # ---- Slurm, from the controller --------------------------------------------------
    def ctl(self, *argv: str, timeout: float = 60, check: bool = False) -> subprocess.CompletedProcess:
        return self.c.run(self.c.controller(), list(argv), timeout=timeout, check=check)

    def _say_daemon_logs(self, busy: list[str]) -> None:
        """The last lines of slurmctld's log and of the slurmd log of each node that is not
        idle: what Slurm did to the nodes the failed boot waited for."""
        nodes = {n.hostname: n for n in self.c.nodes.values()}
        ctl = [n for n in nodes.values() if n.role == "controller"]
        logs = [(node, layout.SLURMCTLD_LOG, 40) for node in ctl]
        logs += [(nodes[h], layout.SLURMD_LOG, 15) for h in sorted(busy) if h in nodes]
        for node, path, n in logs:
            try:
                lines = node.upper(path).read_text(errors="replace").splitlines()[-n:]
            except (OSError, ValueError) as e:
                lines = [f"unreadable: {e}"]
            self.out(f"{node.hostname}:{path} (last {n} lines):")
            for line in lines:
                self.out(f"    {line}")

    def queue_rows(self) -> list[str]:
        """squeue: '<job> <name> <user> <state> <time> <nodes>' per job in the queue."""
        try:
            out = self.ctl("squeue", "-h", "-o", "%i %j %u %T %M %N", timeout=10).stdout
        except (RuntimeError, subprocess.TimeoutExpired):
            return []
        return [line.strip() for line in out.splitlines() if line.strip()]

    def node_reasons(self) -> dict[str, tuple[str, str]]:
        """sinfo: node -> (state, drain reason or '')."""
        try:
            out = self.ctl("sinfo", "-h", "-N", "-o", "%N|%T|%E").stdout
        except (RuntimeError, subprocess.TimeoutExpired):
            return {}
        rows = {}
        for line in out.splitlines():
            name, _, rest = line.partition("|")
            state, _, reason = rest.partition("|")
            rows[name] = (state, "" if reason == "none" else reason)
        return rows

    def in_node(self, hostname: str, script: str, timeout: float = 60) -> None:
        """Run a shell script as root inside one node (a fault, hardware.py); it must succeed."""
        r = self.c.run(self.c.nodes[hostname], ["bash", "-ec", script], timeout=timeout)
        if r.returncode != 0:
            raise RuntimeError(f"{hostname}: {script}: exit {r.returncode}: {r.stderr.strip()[-500:]}")

    def node_states(self) -> dict[str, str]:
        try:
            r = self.ctl("sinfo", "-h", "-N", "-o", "%N %t")
        except (RuntimeError, subprocess.TimeoutExpired):
            return {}  # the controller machine is (re)booting: nothing is idle yet
        states = {}
        for line in r.stdout.splitlines():
            parts = line.split()
            if len(parts) == 2:
                states[parts[0]] = parts[1]
        return states

    def wait_idle(self, count: int, timeout: float = 120) -> dict[str, str]:
        deadline = time.monotonic() + timeout
        pause = pauses(0.1, 1.0)  # each poll is a sinfo inside the controller
        while True:
            states = self.node_states()
            idle = [n for n, s in states.items() if s in ("idle", "mix", "alloc")]
            if len(idle) >= count:
                return states
            if time.monotonic() > deadline:
                raise TimeoutError(f"only {len(idle)}/{count} nodes idle after {timeout:.0f}s: {states}")
            time.sleep(next(pause))

    def show(self) -> None:
        n = len(self.slurm_nodes())
        # The hand-off step submitted the validation job the moment all nodes were idle;
        # let it finish first so sinfo shows the nodes idle again.
        self.validation_job()
        self.out("\n$ sinfo")
        self.out(self.ctl("sinfo").stdout.rstrip())
        self.out("")
        self.show_srun()
        self.out("\n$ sbatch (job output below)")
        self.out(self.sbatch_demo(n).rstrip())
        if self.machines:
            self.out("")
            self.show_container()
            self.out("\n$ per machine: cloud-init status, systemd state, our units")
            for line in self.machine_report():
                self.out(line)
        self.out("\n$ first-boot validation report (job submitted by the controller's 95-handoff step)")
        self.out(self.validation_report())

    # ---- machine lanes: what systemd and cloud-init say, and a container job ------------
    def units(self, node: Node) -> list[str]:
        """The units step 85 enables on this node's role (a dedicated controller: no slurmd)."""
        slurmd = [] if node.role == "login" or (self.dedicated and node.role == "controller") else ["slurmd"]
        ctl = ["slurmctld", *(["slurmdbd"] if self.team else [])] if node.role == "controller" else []
        return ["munge", "gpu-cluster-munge-responder", *slurmd, *ctl]

    def machine_state(self, node: Node) -> dict:
        """cloud-init's status, systemd's overall state and each of our units', inside the machine."""
        ci = self.c.run(node, ["cloud-init", "status"], timeout=30).stdout
        m = re.search(r"status: (\S+)", ci)
        system = self.c.run(node, ["systemctl", "is-system-running"], timeout=30).stdout.strip()
        units = self.units(node)
        active = self.c.run(node, ["systemctl", "is-active", *units], timeout=30).stdout.split()
        return {
            "cloud_init": m.group(1) if m else ci.strip(),
            "systemd": system,
            "units": dict(zip(units, active, strict=False)),
        }

    def machine_report(self) -> list[str]:
        lines = []
        for node in sorted(self.c.nodes.values(), key=lambda n: n.serial):
            st = self.machine_state(node)
            units = " ".join(f"{u}={a}" for u, a in st["units"].items())
            lines.append(f"  {node.hostname:<15} cloud-init {st['cloud_init']:<6} systemd {st['systemd']:<9} {units}")
        return lines

    def test_image(self) -> Path:
        """/fsx/images/test.sqsh (host path), built from the lane's root once per cluster."""
        from localcluster import testimage

        return testimage.build(self.base_root(), self.c.fsx_dir / TEST_IMAGE)

    def container_srun(self, timeout: float = 240, user: str | None = None) -> subprocess.CompletedProcess:
        n = len(self.slurm_nodes())
        self.test_image()
        fsx = layout.FSX_MOUNTPOINT
        script = (
            'echo "$(cat /proc/sys/kernel/hostname): $(. /etc/os-release; echo "$PRETTY_NAME"); '
            f'{fsx} mounted: $([ -f {fsx}/{TEST_IMAGE} ] && echo yes || echo no)"'
        )
        # as `user` (the lane root's ordinary account): Pyxis then runs Enroot unprivileged
        as_user = ["runuser", "-u", user, "--"] if user else []
        return self.ctl(
            *as_user,
            "srun",
            f"-N{n}",
            "--time=5",
            f"--container-image={fsx}/{TEST_IMAGE}",
            f"--container-mounts={fsx}:{fsx}",
            "bash",
            "-c",
            script,
            timeout=timeout,
        )

    def show_container(self) -> None:
        n = len(self.slurm_nodes())
        fsx = layout.FSX_MOUNTPOINT
        self.out(f"$ srun -N{n} --container-image={fsx}/{TEST_IMAGE} --container-mounts={fsx}:{fsx} bash -c '...'")
        if "--container-image" not in self.ctl("srun", "--help").stdout:
            self.out("(skipped: Pyxis is not loaded on this lane's root; srun has no --container-image)")
            return
        for user in (None, *self.ordinary_users()):
            t0 = time.monotonic()
            r = self.container_srun(user=user)
            if user:
                self.out(f"$ runuser -u {user} -- srun -N{n} --container-image=... (as an ordinary user)")
            self.out("\n".join(sorted((r.stdout + r.stderr).rstrip().splitlines())))
            self.out(f"(exit {r.returncode}, {time.monotonic() - t0:.1f}s)")

    def ordinary_users(self) -> list[str]:
        """The lane root's ordinary account, when the controller has it (a hand-made root
        given by GPU_CLUSTER_LOCAL_ROOT may not)."""
        from localcluster import images

        if not self.machines or self.ctl("id", "-u", images.ORDINARY_USER).returncode != 0:
            return []
        return [images.ORDINARY_USER]

    def show_srun(self) -> None:
        n = len(self.slurm_nodes())
        self.out(f"$ srun -N{n} hostname")
        r = self.ctl("srun", f"-N{n}", "--time=1", "hostname", timeout=120)
        self.out((r.stdout + r.stderr).rstrip())

    def sbatch_demo(self, n: int, timeout: float = 120) -> str:
        script = (
            "#!/bin/bash\n"
            f"#SBATCH -N{n}\n#SBATCH --time=2\n#SBATCH -o {layout.FSX_MOUNTPOINT}/localcluster/job-%j.out\n"
            'echo "job $SLURM_JOB_ID on $SLURM_JOB_NODELIST"\n'
            "srun -l hostname\n"
        )
        self.ctl("mkdir", "-p", f"{layout.FSX_MOUNTPOINT}/localcluster")
        r = self.c.run(self.c.controller(), ["sbatch", "--parsable"], input=script)
        if r.returncode != 0:
            return f"sbatch failed: {r.stderr.strip()}"
        job = r.stdout.strip().split(";")[0]
        out = self.c.fsx_dir / "localcluster" / f"job-{job}.out"
        deadline = time.monotonic() + timeout
        pause = pauses(0.1, 1.0)
        while time.monotonic() < deadline:
            st = self.ctl("scontrol", "show", "job", job).stdout
            if re.search(r"JobState=(COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL)", st):
                break
            time.sleep(next(pause))
        state = re.search(r"JobState=(\S+)", st)
        body = out.read_text() if out.exists() else "(no output file)"
        return f"job {job}: {state.group(1) if state else '?'}\n{body}"

    def validation_dir(self) -> Path:
        # the host side of the nodes' shared /fsx: the same relative path as on a node
        return self.c.fsx_dir / Path(layout.validation_results(self.name)).relative_to(layout.FSX_MOUNTPOINT)

    def validation_job(self, timeout: float = 300) -> str | None:
        """Wait for the first-boot validation job (submitted by the controller's hand-off) to end."""
        record = self.validation_dir() / "first-boot.jobid"
        deadline = time.monotonic() + timeout
        pause = pauses(0.1, 1.0)
        while time.monotonic() < deadline:
            if record.exists() and record.read_text().strip():
                job = record.read_text().strip()
                st = self.ctl("scontrol", "show", "job", job).stdout
                if not st or re.search(r"JobState=(COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_ME)", st):
                    return job
            time.sleep(next(pause))
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
            raise UsageError(f"no node {hostname} in local cluster '{self.name}'")
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

    def forget_node(self, hostname: str, timeout: float = 90) -> bool:
        """Remove a destroyed node from slurmctld (down first if a job still holds it).

        A node inside a join-gate run's reservation cannot be deleted ("Requested nodes are
        busy"); once it is down the controller's next join tick (every 30 s) ends that run
        and removes the reservation (nodeside/lib/join-gate.sh), hence the bound."""
        deadline = time.monotonic() + timeout
        pause = pauses(0.1, 1.0)
        while True:
            r = self.ctl("scontrol", "delete", f"nodename={hostname}")
            if r.returncode == 0 or "Invalid node name" in r.stderr:
                self.out(f"removed {hostname} from Slurm (scontrol delete nodename={hostname})")
                return True
            if time.monotonic() > deadline:
                self.out(f"could not remove {hostname} from Slurm: {r.stderr.strip()}")
                return False
            self.ctl("scontrol", "update", f"nodename={hostname}", "state=down", "reason=instance destroyed")
            time.sleep(next(pause))

    def status(self) -> None:
        if not self.c.nodes:
            self.out(f"local cluster '{self.name}': not running")
            return
        self.out(f"local cluster '{self.name}': {len(self.c.nodes)} nodes, lane {self.lane}, state in {self.c.root}")
        for node in self.c.nodes.values():
            status = "-"
            st = node.upper(layout.LOCAL_STATUS)
            if st.exists():
                try:
                    j = json.loads(st.read_text())
                    status = f"{j.get('step')} {j.get('state')}: {j.get('reason')}"
                except ValueError:
                    status = st.read_text().strip()[:200]
            alive = node.leader() is not None if node.is_machine else Path(f"/proc/{node.init_pid}").exists()
            self.out(
                f"  {node.hostname:<16} {node.ip:<12} {node.role:<10} {node.block:<10} {node.instance_id} "
                f"{'up' if alive else 'GONE'}  status: {status}"
            )
        try:
            self.out(self.ctl("sinfo", timeout=10).stdout.rstrip())
        except Exception as e:  # a status view never fails on a half-dead cluster
            self.out(f"sinfo: {e}")


def launch_plan(n: int, dedicated: bool, block: str = node_tags.ON_DEMAND) -> tuple[str, int]:
    """The controller's GpuClusterBlock and the worker count for capacity.nodes = n: as
    model/capacity.py node_groups shapes the groups (a dedicated controller is on demand
    and takes no node of n; a colocated one is one of the block's n)."""
    return (node_tags.ON_DEMAND, n) if dedicated else (block, n - 1)


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
    ("to respond again after the restart", "slurmd restart (Pyxis registered)"),
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
        in_step: dict[str, float] = {}
        for step, _, secs in w.waits:
            in_step[step] = in_step.get(step, 0.0) + secs
        rows[w.node.hostname] = {
            "role": w.node.role,
            "steps": {s.step: s.seconds for s in w.steps},
            # a step's own work: its time less the bounded waits it logged
            "step_work": {s.step: max(0.0, (s.seconds or 0) - in_step.get(s.step, 0.0)) for s in w.steps},
            "boot": total - handoff,
            "waits": waited,
            "handoff": handoff,
            "work": max(0.0, total - handoff - waited),
            "wait_kinds": by_kind,
        }
    return rows


if __name__ == "__main__":
    sys.exit("use: python -m localcluster")
