"""What the slurm2311 lane costs a cold CI run: the Slurm 23.11 build, its packaging, the root bake.

Default: times the work for real in a scratch cache (GPU_CLUSTER_CACHE is not touched): the
configure/make/install of Slurm 23.11.4 from the vendored tarball, the packaging under
Ubuntu's names, and the slurm2311 root's bake from the debootstrap base already in the
cache (the base is shared with the bookworm lane, so it is not the new lane's cost).
`--from-logs` prints the same stages from the real cache's logs and manifest instead,
without building anything (the figures of the last cold build on this machine).
The machine's load average is printed with the figures: on 2 busy cores the build is
several times slower than on idle ones.

Usage: python bench/bench_slurm_lane.py [--from-logs]   (root; GPU_CLUSTER_VENDOR_DIR as for make)
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from localcluster import apt_repo, images, mirror, slurm_build  # noqa: E402


def _load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def _log_stages(log: Path) -> dict[str, float]:
    """Seconds between the `=== HH:MM:SS + cmd` lines of a build log (the last until the file's mtime)."""
    marks = [
        (m.group(1), m.group(2).split()[0])
        for m in re.finditer(r"^=== (\d\d:\d\d:\d\d) \+ (.*)$", log.read_text(), re.M)
    ]
    times = [datetime.strptime(t, "%H:%M:%S") for t, _ in marks]
    end = datetime.strptime(time.strftime("%H:%M:%S", time.localtime(log.stat().st_mtime)), "%H:%M:%S")
    out = {}
    for i, (_, cmd) in enumerate(marks):
        nxt = times[i + 1] if i + 1 < len(times) else end
        out[f"{cmd} #{i}"] = (nxt - times[i]).total_seconds() % 86400
    return out


def from_logs() -> None:
    cache = slurm_build.CACHE_ROOT
    builds = sorted((cache / "logs").glob("slurm-build-*.log"), key=lambda p: p.stat().st_mtime)
    if not builds:
        raise SystemExit("no Slurm build log in the cache: run without --from-logs")
    stages = _log_stages(builds[-1])
    print(f"slurm build ({builds[-1].name}): " + ", ".join(f"{k.split(' #')[0]} {v:.0f}s" for k, v in stages.items()))
    print(f"slurm build total: {sum(stages.values()):.0f}s")
    roots = sorted((cache / "roots").glob("slurm2311-*"), key=lambda p: p.stat().st_mtime)
    if roots:
        manifest = json.loads((roots[-1] / images.LANE_RECORD.lstrip("/")).read_text())
        print(f"root bake ({roots[-1].name}): {manifest['stages']} total {sum(manifest['stages'].values()):.0f}s")


def cold() -> None:
    scratch = Path(tempfile.mkdtemp(prefix="bench-slurm-lane-", dir=slurm_build.CACHE_ROOT))
    real_cache = slurm_build.CACHE_ROOT
    try:
        # Only the Slurm build, its .debs and the repository go to the scratch cache.
        slurm_build.CACHE_ROOT = scratch
        apt_repo.CACHE_ROOT = scratch
        print(f"load average before: {_load()}")
        t0 = time.monotonic()
        stage = slurm_build.build_stage()
        t1 = time.monotonic()
        repo = apt_repo.build_repo(slurm_build.REPO_NAME, slurm_build.build_debs())
        t2 = time.monotonic()
        print(f"slurm build (configure, make -j{os.cpu_count()}, install): {t1 - t0:.0f}s  [{stage}]")
        print(f"packaging + repository: {t2 - t1:.0f}s  [{len(repo.packages)} packages]")
        # The root bake with a payload no cached root has (the real roots stay as they are).
        payload = {**images.default_payload(), "/etc/gpu-cluster/bench-marker": str(time.time()).encode()}
        images.local_repo = lambda lane: repo if lane.local_slurm else None
        t3 = time.monotonic()
        root = images.build_root("slurm2311", payload)
        t4 = time.monotonic()
        manifest = json.loads((root / images.LANE_RECORD.lstrip("/")).read_text())
        print(f"root bake from the cached base: {t4 - t3:.0f}s  {manifest['stages']}")
        print(f"the lane's cold share before its tests: {t4 - t0 - (t3 - t2):.0f}s; load average after: {_load()}")
        images._discard(root)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        slurm_build.CACHE_ROOT = real_cache


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--from-logs", action="store_true", help="print the last cold build's stages from the cache")
    args = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("needs root (the cache, chroot)")
    try:
        from_logs() if args.from_logs else cold()
    except (slurm_build.SlurmBuildError, mirror.MirrorError, images.ImageBuildError) as err:
        raise SystemExit(f"bench_slurm_lane: {err}") from err
    return 0


if __name__ == "__main__":
    sys.exit(main())
