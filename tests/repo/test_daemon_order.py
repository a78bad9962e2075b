"""The daemon tests' order and lane selection (tests/daemons/conftest.py), from pytest's own
collection: what `make test` runs when, without running a daemon."""

from __future__ import annotations

import functools
import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from offline import review as rv

ROOT = Path(__file__).resolve().parents[2]


# What pytest's collection of tests/daemons depends on: the Python in the tree (test
# modules, conftests, helpers and the product code that parametrizes them), pytest's
# configuration and version, and the lane settings. The same inputs collect the same ids,
# so a collection is kept by their hash (`collection_cache`, tests/conftest.py), taken
# over the working tree as the review diff's render cache takes it (offline/review.py).
def _inputs_digest(faithful: str, lifecycle: str) -> str:
    files = [f for f in rv.head_files(ROOT) if f.endswith(".py") or f == "pyproject.toml"]
    key = f"{rv.tree_digest(ROOT, files)}\0{pytest.__version__}\0{sys.version}\0{faithful}\0{lifecycle}"
    return hashlib.sha256(key.encode()).hexdigest()


@functools.cache  # one collection per lane setting (a few seconds each, unless kept)
def _collected(faithful: str, lifecycle: str, cache: Path | None) -> tuple[list[str], str]:
    kept = cache / _inputs_digest(faithful, lifecycle) if cache is not None else None
    if kept is not None and kept.is_file():
        out = kept.read_text()
    else:
        env = {**os.environ, "GPU_CLUSTER_FAITHFUL_LANES": faithful, "GPU_CLUSTER_LIFECYCLE_LANE": lifecycle}
        r = subprocess.run(
            [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "tests/daemons"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
        )
        assert r.returncode == 0, r.stdout + r.stderr
        out = r.stdout
        if kept is not None:
            tmp = kept.with_suffix(".tmp")
            tmp.write_text(out)
            tmp.replace(kept)
    ids = [line for line in out.splitlines() if line.startswith("tests/daemons/")]
    return ids, out


def _module(nodeid: str) -> str:
    return nodeid.split("::")[0].removeprefix("tests/daemons/")


def test_modules_needing_no_lane_root_run_first_and_shared_clusters_run_back_to_back(collection_cache):
    ids, _ = _collected("bookworm,trixie", "bookworm", collection_cache)
    modules = [_module(i) for i in ids]
    first_root = min(modules.index(m) for m in ("test_images_root.py", "test_install_debian.py"))
    for m in ("test_localcluster.py", "test_slurm_oracle.py", "test_block_end_daemons.py", "test_munge_recovery.py"):
        assert max(i for i, x in enumerate(modules) if x == m) < first_root, m
    shared = [i for i in ids if _module(i) in ("test_localcluster_faithful.py", "test_lifecycle_faithful.py")]
    start = ids.index(shared[0])
    assert ids[start : start + len(shared)] == shared  # nothing boots in between
    lanes = ["trixie" if "[trixie]" in i else "bookworm" for i in shared]
    assert lanes == sorted(lanes, key=lambda x: x == "bookworm")  # the other lane first, then the nodes' lane
    assert _module(shared[-1]) == "test_lifecycle_faithful.py"  # the relaunch ends the nodes' lane cluster
    assert shared[-1].endswith("test_whole_cluster_relaunch_keeps_the_queue_and_rotates_the_munge_key")
    # a module stays together (its fixtures are set up once)
    for m in set(modules) - {"test_localcluster_faithful.py"}:
        where = [i for i, x in enumerate(modules) if x == m]
        assert where == list(range(where[0], where[-1] + 1)), m


def test_node_behaviour_runs_on_the_nodes_lane_only(collection_cache):
    ids, out = _collected("bookworm,trixie", "bookworm", collection_cache)
    faithful = [i for i in ids if _module(i) == "test_localcluster_faithful.py"]
    assert [i for i in faithful if "[trixie]" in i and ("reboot" in i or "fsx_attached_late" in i)] == []
    assert [i for i in faithful if "[bookworm]" in i and ("reboot" in i or "fsx_attached_late" in i)] != []
    assert {i.split("[")[1] for i in faithful} == {"bookworm]", "trixie]"}
    assert "deselected" in out
    # The nodes' lane is booted even when the faithful lanes leave it out.
    ids, _ = _collected("trixie", "bookworm", collection_cache)
    lanes = {i.split("[")[1].rstrip("]") for i in ids if _module(i) == "test_localcluster_faithful.py"}
    assert lanes == {"trixie", "bookworm"}
