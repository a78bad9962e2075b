"""Booted lane clusters shared by the daemon test modules, and which lanes run what.

A machine lane's bring-up (2 machines booted by cloud-init, every step, then the first-boot
validation job with its container step) is the biggest single cost of a lane test. So a
cluster of one *shape* (the stack it was rendered from) on one lane is booted once per
pytest session and handed to every module that asks for that (shape, lane); it goes down
as soon as the last module collected for it is done (tests/daemons/conftest.py orders the
modules so each shape's users run back to back). A module that needs a state the others
must not see resets it itself (a test that adds a machine removes it and forgets its node;
a whole-cluster relaunch is the last user of its cluster): it never re-boots a fresh one.

Which lanes run what (CONTRIBUTING.md, "Tests and the CI budget"):
- every lane in GPU_CLUSTER_FAITHFUL_LANES (the Makefile's FAITHFUL_LANES) shows what a
  lane's own OS and Slurm must accept: the machines boot our exact user data through every
  step, slurmctld/slurmd of that release take the rendered config and run jobs, container
  jobs run through that lane's Pyxis/Enroot build, the gate's container step passes;
- the nodes' behaviour (reboots, late /fsx, failed fetches and boots, relaunch, controller
  and team scenarios) is the same shipped scripts on every lane, so it runs once, on the
  nodes' lane: GPU_CLUSTER_LIFECYCLE_LANE (the Makefile's LIFECYCLE_LANE).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import pytest

MARK = "lane_cluster"  # pytest.mark.lane_cluster("<shape>"): the module boots nothing itself


def faithful_lanes() -> list[str]:
    """The lanes the broad faithful module runs on (the Makefile's FAITHFUL_LANES)."""
    return [x for x in os.environ.get("GPU_CLUSTER_FAITHFUL_LANES", "bookworm").split(",") if x]


def nodes_lane() -> str:
    """The one machine lane that runs the nodes' behaviour (lifecycle, controller)."""
    from tests.support.localcluster_probe import lifecycle_lane

    return lifecycle_lane()


def machine_lanes() -> list[str]:
    """The lanes an every-lane module runs on: every faithful lane, and the nodes' lane
    (its node-behaviour tests run there even when the faithful lanes leave it out)."""
    lanes = faithful_lanes()
    return lanes + [nodes_lane()] if nodes_lane() not in lanes else lanes


def prebuild_plan() -> list[str]:
    """What `make test` builds in the background (scripts/test-all.sh): `slurm-build` when
    a lane installs the locally built Slurm (its build is the longest part, so it starts
    at once, beside the debootstrap bases), then every lane root: the lanes that boot
    first, then the rest (tests/daemons/test_images_root.py bakes each lane)."""
    from localcluster import images

    lanes = machine_lanes() + [x for x in images.LANES if x not in machine_lanes()]
    return (["slurm-build"] if any(images.LANES[x].local_slurm for x in lanes) else []) + lanes


@dataclass(frozen=True)
class Shape:
    """A stack shape: what the cluster is rendered and booted from."""

    name: str  # the cluster's name (its /fsx state directory, gcl-<name>-* namespaces)
    subnet: int  # 10.77.<subnet>.0/24, apart from the per-module clusters' subnets
    nodes: int = 2
    up_timeout: float = 300
    gate_timeout: float = 300  # the first-boot validation job (container step on every node)
    swaps: dict[str, dict[str, str]] = field(default_factory=dict)  # overrides.env lines per role


# The controller's join gate in lane tests that add one machine at a time: the gate batches
# newcomers that register together and starts once none arrived for JOIN_SETTLE (60 s),
# looking every JOIN_GATE_INTERVAL (30 s); with one newcomer there is no batch to wait for,
# so those ~75 s per added machine are idle time. The gate's own run, drain and resume are
# unchanged; the batching at the product's 60 s stays proven where two machines arrive
# together (tests/daemons/test_controller_faithful.py: block b's two workers in one run).
# overrides.env lines, a test's shorter bounded waits (docs/node-contract.md).
JOIN_WAITS = {"JOIN_SETTLE": "10", "JOIN_GATE_INTERVAL": "5"}

SHAPES = {
    # The local stack as `make local-cluster` boots it (localcluster/profile.py local_config).
    "plain": Shape("fttest", 6, swaps={"controller": JOIN_WAITS}),
}


def key_of(item: pytest.Item) -> tuple[str, str] | None:
    """(shape, lane) of the shared cluster an item uses, or None."""
    mark = item.get_closest_marker(MARK)
    if mark is None:
        return None
    callspec = getattr(item, "callspec", None)
    lane = callspec.params.get("lane") if callspec else None
    return mark.args[0], lane or nodes_lane()


class LanePool:
    """The session's shared clusters, keyed by (shape, lane)."""

    def __init__(self) -> None:
        self.live: dict[tuple[str, str], object] = {}
        self.failed: dict[tuple[str, str], str] = {}
        self.lines: dict[tuple[str, str], list[str]] = {}
        self.supervisors: dict[tuple[str, str], list[int]] = {}
        self.position = 0  # index in session.items of the item being run (conftest sets it)
        self.index: dict[int, int] = {}  # id(item) -> its index in session.items

    def get(self, shape_name: str, lane: str):
        key = (shape_name, lane)
        if key in self.failed:
            pytest.fail(f"the shared {shape_name} cluster on {lane} did not come up: {self.failed[key]}")
        if key not in self.live:
            for other in [k for k in self.live if k[0] == shape_name]:
                self.down(other)  # one name and subnet per shape: one lane's cluster at a time
            self.live[key] = self._bring_up(shape_name, lane)
        lc = self.live[key]
        self.supervisors[key] += [n.init_pid for n in lc.c.nodes.values()]
        return lc

    def _bring_up(self, shape_name: str, lane: str):
        from localcluster.cluster import LocalCluster

        shape, key = SHAPES[shape_name], (shape_name, lane)
        name, subnet = shape.name, shape.subnet
        lines: list[str] = []
        self.lines[key], self.supervisors[key] = lines, []
        LocalCluster(name, subnet, out=lines.append).c.down()  # leftovers of an aborted run
        lc = LocalCluster(name, subnet, out=lines.append, lane=lane, swaps=shape.swaps)
        try:
            lc.up(shape.nodes, timeout=shape.up_timeout)
            # The controller submits the first-boot gate once every node is idle; its
            # container step holds the nodes for a while. The cluster is ready when it is done.
            if lc.validation_job(timeout=shape.gate_timeout) is None:
                raise RuntimeError("first-boot validation job did not finish")
        except BaseException as err:
            print("\n".join(lines))
            self.failed[key] = f"{type(err).__name__}: {err}"
            lc.c.down()
            raise
        return lc

    def release(self, request: pytest.FixtureRequest, shape_name: str, lane: str) -> None:
        """A module's fixture is done with it (its run of items ended): down, unless a
        later item uses the same (shape, lane)."""
        key = (shape_name, lane)
        if any(key_of(item) == key for item in request.session.items[self.position + 1 :]):
            return
        self.down(key)

    def down(self, key: tuple[str, str]) -> None:
        lc = self.live.pop(key, None)
        if lc is None:
            return
        supervisors = self.supervisors[key] + [n.init_pid for n in lc.c.nodes.values()]
        lc.c.down()
        assert_nothing_left(lc, supervisors)

    def down_all(self) -> None:
        for key in list(self.live):
            self.down(key)


def assert_nothing_left(lc, supervisors: list[int]) -> None:
    from localcluster.nodes import NETNS_DIR

    prefix = f"gcl-{lc.name}-"
    leftovers = [ns for ns in (os.listdir(NETNS_DIR) if NETNS_DIR.is_dir() else []) if ns.startswith(prefix)]
    assert leftovers == [], f"network namespaces left: {leftovers}"
    assert not lc.c.root.exists(), f"{lc.c.root} left behind"
    cg = [str(p) for p in Path("/sys/fs/cgroup").glob(f"*/{prefix}*")]
    assert cg == [], f"cgroups left (slurm_<node> and the machines' own): {cg}"
    with open("/proc/self/mountinfo") as f:
        mounts = [line.split()[4] for line in f if str(lc.c.root) in line.split()[4]]
    assert mounts == [], f"mounts left: {mounts}"
    alive = [
        p
        for p in supervisors
        if p and Path(f"/proc/{p}").exists() and b"supervisor.sh" in Path(f"/proc/{p}/cmdline").read_bytes()
    ]
    assert alive == [], f"machine supervisors still running: {alive}"


def shared_cluster(request: pytest.FixtureRequest, pool: LanePool, lane: str | None = None):
    """The body of a module's `cluster` fixture on a shared lane cluster (`yield from` it):
    the module is marked `pytest.mark.lane_cluster("<shape>")`; `lane` is the module's
    `lane` parameter (every-lane modules), else the nodes' lane."""
    mark = request.node.get_closest_marker(MARK)
    if mark is None:
        raise RuntimeError(f"{request.node.nodeid}: mark the module pytest.mark.lane_cluster('<shape>')")
    lane = lane or nodes_lane()
    yield pool.get(mark.args[0], lane)
    pool.release(request, mark.args[0], lane)


def boot_steps() -> list[str]:
    """The steps a lane node's boot runs, in order: every shipped step but the hook step
    (99-on-node-ready ships only with `hooks.on_node_ready`, which no lane stack sets)."""
    steps = Path(__file__).resolve().parents[2] / "nodeside" / "steps"
    return sorted(p.stem for p in steps.glob("*.sh") if not p.name.startswith("99-"))
