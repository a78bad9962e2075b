"""A second Slurm for the oracle tests: the faithful lane's baked root (Debian 13, Slurm
24.11), mounted as a writable overlay with /proc, /dev and /sys for slurm_harness's
sysroot mode. Any root the image cache holds for the lane will do (only its Slurm
matters), newest first; without one, `localcluster.images.build_root` builds the lane's
current root, the one the faithful lane boots, so a test run builds it at most once.

Needs root. Everything mounted is unmounted again, innermost first.
"""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator
from pathlib import Path


def _mount(*argv: str) -> None:
    subprocess.run(["mount", *argv], check=True, capture_output=True, text=True)


@contextlib.contextmanager
def lane_sysroot(lane: str, workdir: Path) -> Iterator[Path]:
    """Yield a writable chroot of the lane's baked root, mounts in place."""
    from localcluster import images

    cached = sorted((images.CACHE_ROOT / "roots").glob(f"{lane}-*"), key=lambda p: p.stat().st_mtime)
    cached = [p for p in cached if (p / "usr/sbin/slurmctld").exists()]
    base = cached[-1] if cached else Path(images.build_root(lane))
    upper, work, merged = workdir / "upper", workdir / "work", workdir / "root"
    for d in (upper, work, merged):
        d.mkdir(parents=True, exist_ok=True)
    _mount("-t", "overlay", "overlay", "-o", f"lowerdir={base},upperdir={upper},workdir={work}", str(merged))
    try:
        _mount("--bind", "/proc", str(merged / "proc"))
        _mount("--bind", "/dev", str(merged / "dev"))
        _mount("--rbind", "/sys", str(merged / "sys"))
        _mount("--make-rslave", str(merged / "sys"))
        yield merged
    finally:
        subprocess.run(["umount", "-R", str(merged)], capture_output=True)
        if merged.is_mount():
            subprocess.run(["umount", "-R", "-l", str(merged)], capture_output=True)
