"""The daemon tests' order and their shared lane clusters (CONTRIBUTING.md, "Tests and the
CI budget").

Order, so that a cold run (no cached lane root) never waits on a build it could overlap:
1. modules that need no lane root (real Slurm on this host, the namespace lane, root-only
   checks) run first, while `make test` builds the lane roots in the background
   (scripts/test-all.sh; a build in progress holds the cache entry's lock, so a module
   that needs the root waits for it instead of building it twice);
2. modules that read a lane root or its debootstrap base without booting a cluster
   (marker `lane_root`);
3. modules on the shared lane clusters (marker `lane_cluster`, tests/support/lane_clusters.py):
   each (shape, lane) back to back, the lanes other than the nodes' lane first, so the
   nodes' lane cluster goes on to the node-behaviour modules, and the module that ends a
   cluster (`lane_cluster(..., last=True)`: a whole-cluster relaunch) after the others;
4. the remaining machine-lane modules, which boot a stack shape of their own.
Within a group the files keep pytest's order.

Node-behaviour tests in an every-lane module (marker `nodes_lane`) run on the nodes' lane
only; their other-lane copies are deselected, not skipped.
"""

from __future__ import annotations

import pytest

from tests.support import lane_clusters

_POOL_KEY = pytest.StashKey[lane_clusters.LanePool]()
_SECONDS: dict[str, float] = {}  # module -> seconds of setup, calls and teardown, this session


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "lane_root: reads a lane root or base without booting (runs after the modules that need none)"
    )
    config.addinivalue_line(
        "markers",
        "lane_cluster(shape, last=False): uses the session's shared cluster of that shape "
        "(tests/support/lane_clusters.py); last: it ends the cluster",
    )
    config.addinivalue_line(
        "markers", "nodes_lane: node behaviour; in an every-lane module it runs on the nodes' lane only"
    )
    config.stash[_POOL_KEY] = lane_clusters.LanePool()


def _group(item: pytest.Item) -> tuple:
    if "tests/daemons/" not in item.nodeid:
        return (-1,)
    key = lane_clusters.key_of(item)
    if key is not None:
        shape, lane = key
        mark = item.get_closest_marker(lane_clusters.MARK)
        last = bool(mark and mark.kwargs.get("last"))
        return (2, lane == lane_clusters.nodes_lane(), lane, shape, last)
    module = item.getparent(pytest.Module)
    if module is not None and module.get_closest_marker("faithful"):
        return (3,)  # the whole module is on a machine lane: it boots its own cluster
    if item.get_closest_marker("faithful") or item.get_closest_marker("lane_root"):
        return (1,)
    return (0,)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    keep, drop = [], []
    for item in items:
        callspec = getattr(item, "callspec", None)
        lane = callspec.params.get("lane") if callspec else None
        if item.get_closest_marker("nodes_lane") and lane not in (None, lane_clusters.nodes_lane()):
            drop.append(item)
        else:
            keep.append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
    first: dict[object, int] = {}
    module_group: dict[object, tuple] = {}
    for i, item in enumerate(keep):
        first.setdefault(item.module, i)
        if lane_clusters.key_of(item) is None:  # a module's own tests stay together
            module_group[item.module] = max(module_group.get(item.module, (-1,)), _group(item))
    order = {id(item): i for i, item in enumerate(keep)}

    def place(item: pytest.Item) -> tuple:
        group = _group(item) if lane_clusters.key_of(item) else module_group[item.module]
        return (group, first[item.module], order[id(item)])

    keep.sort(key=place)
    items[:] = keep


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    pool = item.config.stash[_POOL_KEY]
    pool.position = pool.index.get(id(item), 0)


@pytest.fixture(scope="session")
def lane_pool(pytestconfig: pytest.Config):
    pool = pytestconfig.stash[_POOL_KEY]
    yield pool
    pool.down_all()


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if "tests/daemons/" in report.nodeid:
        module = report.nodeid.split("::")[0]
        _SECONDS[module] = _SECONDS.get(module, 0.0) + report.duration


def pytest_terminal_summary(terminalreporter, config: pytest.Config) -> None:
    """Each daemon module's cost (setup, calls and teardown; a shared cluster's bring-up
    counts for the module that first used it): what a lane test adds to CI."""
    seconds = _SECONDS
    if not seconds:
        return
    terminalreporter.section("daemon modules: seconds (setup + call + teardown)")
    for module, s in sorted(seconds.items(), key=lambda kv: -kv[1]):
        terminalreporter.write_line(f"{s:8.1f}  {module}")
    terminalreporter.write_line(f"{sum(seconds.values()):8.1f}  total")
