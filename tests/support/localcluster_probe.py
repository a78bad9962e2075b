"""Whether this machine can run the local cluster's namespace lane."""

from __future__ import annotations

import os
import shutil


def _can_run_cluster() -> str | None:
    if os.geteuid() != 0:
        return "needs root (namespaces, mounts)"
    for tool in ("slurmctld", "slurmd", "srun", "munged", "unshare", "nsenter", "ip", "openssl", "curl"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (make deps installs Debian's packages)"
    return None
