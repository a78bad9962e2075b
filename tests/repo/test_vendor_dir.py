"""scripts/vendor-dir.sh: where the lanes find the vendored release tarballs, for a
checkout beside the workplace's vendor/ and for a scratch clone made elsewhere from it."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _git(*args: str, cwd: Path) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


def _vendor_dir(checkout: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "GPU_CLUSTER_VENDOR_DIR"}
    return subprocess.run(
        [str(checkout / "scripts/vendor-dir.sh")], capture_output=True, text=True, env=env, check=False
    )


def _workplace(tmp_path: Path) -> tuple[Path, Path]:
    """place/checkout (holding the script) beside place/mirrors/vendor (both tarballs)."""
    src, vendor = tmp_path / "place/checkout", tmp_path / "place/mirrors/vendor"
    (src / "scripts").mkdir(parents=True)
    shutil.copy(ROOT / "scripts/vendor-dir.sh", src / "scripts/vendor-dir.sh")
    _git("init", "-q", cwd=src)
    _git("add", ".", cwd=src)
    _git("-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "-m", "x", cwd=src)
    vendor.mkdir(parents=True)
    for name in ("enroot-4.1.2.tar.gz", "pyxis-0.24.0.tar.gz"):
        (vendor / name).write_bytes(b"")
    return src, vendor


def test_a_checkout_and_a_scratch_clone_of_it_find_the_vendor_dir_beside_the_checkout(tmp_path):
    src, vendor = _workplace(tmp_path)
    assert _vendor_dir(src).stdout.strip() == str(vendor)
    # A clone made elsewhere (CI: `git clone -q . /tmp/fresh-N`) has nothing beside it,
    # but its origin is the checkout: it finds what the checkout finds.
    clone = tmp_path / "scratch/clone"
    _git("clone", "-q", str(src), str(clone), cwd=tmp_path)
    r = _vendor_dir(clone)
    assert (r.returncode, r.stdout.strip()) == (0, str(vendor)), r.stderr


def test_no_vendor_dir_anywhere_prints_nothing_and_exits_1(tmp_path):
    src, vendor = _workplace(tmp_path)
    shutil.rmtree(vendor)
    clone = tmp_path / "scratch/clone"
    _git("clone", "-q", str(src), str(clone), cwd=tmp_path)
    # an origin that is not a local directory is not looked at
    _git("remote", "set-url", "origin", "https://example.com/x.git", cwd=clone)
    for checkout in (src, clone):
        r = _vendor_dir(checkout)
        assert (r.returncode, r.stdout) == (1, ""), r.stderr
