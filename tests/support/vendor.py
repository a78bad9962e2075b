"""The vendored upstream release tarballs, where this machine has them."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def vendor_file(name: str) -> tuple[Path | None, str]:
    """(path, "") of a vendored tarball, or (None, why it is not here): GPU_CLUSTER_VENDOR_DIR,
    else what scripts/vendor-dir.sh finds (./vendor or a vendor/ beside the clone)."""
    given = os.environ.get("GPU_CLUSTER_VENDOR_DIR")
    if given:
        where = Path(given)
    else:
        r = subprocess.run([str(ROOT / "scripts/vendor-dir.sh")], capture_output=True, text=True)
        if r.returncode != 0 or not r.stdout.strip():
            return (
                None,
                f"no vendor directory (GPU_CLUSTER_VENDOR_DIR unset; scripts/vendor-dir.sh found none) for {name}",
            )
        where = Path(r.stdout.strip())
    path = where / name
    return (path, "") if path.is_file() else (None, f"{path} is not there")
