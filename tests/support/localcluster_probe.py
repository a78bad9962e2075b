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


# A node that registers into a running cluster stays drained until the controller's join
# gate passes it (nodeside/lib/join-gate.sh): the batch settles for 60 s, the agent ticks
# every 30 s, and the gate's single-node and pair checks run (about 30 s on the lanes).
# Waits for such a node to be idle are bounded by this, not by a registration's 60 s.
JOIN_GATE_WAIT = 360


def wait_joined(state_dir, hostname: str, timeout: float = JOIN_GATE_WAIT) -> None:
    """Until the join gate passed `hostname` (its history on /fsx says so). A node in the
    gate's reservation already shows idle in sinfo, so an idle count alone does not say
    the node takes jobs."""
    import time
    from pathlib import Path

    history = Path(state_dir) / "validation" / "join" / "history"
    deadline = time.monotonic() + timeout
    while f"{hostname} passed" not in (history.read_text() if history.exists() else ""):
        if time.monotonic() > deadline:
            said = history.read_text()[-2000:] if history.exists() else "no join history"
            raise TimeoutError(f"the join gate did not pass {hostname} within {timeout:.0f}s: {said}")
        time.sleep(1)


def settled_marker(state_dir, node, timeout: float = 30) -> dict:
    """The node's /fsx status marker once it says what its local status says. The boot
    writes the local status first (a hung /fsx must not hold it back) and the marker
    right after, so a boot seen ending by its local status may not have written its
    marker yet (a CI run read 'running' there after the fourth failure)."""
    import json
    import time
    from pathlib import Path

    from userdata import layout

    path = Path(state_dir) / "status" / f"{node.hostname}.json"
    deadline = time.monotonic() + timeout
    while True:
        try:
            local = json.loads(node.upper(layout.LOCAL_STATUS).read_text())
            marker = json.loads(path.read_text())
        except (OSError, ValueError):
            local, marker = None, {}
        if marker == local:
            return marker
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} still says {marker!r}, the node's own status {local!r}")
        time.sleep(0.1)


def lifecycle_lane() -> str:
    """The machine lane the lifecycle and dedicated-controller modules run on
    (GPU_CLUSTER_LIFECYCLE_LANE; the Makefile names it, bookworm without it)."""
    import os

    return os.environ.get("GPU_CLUSTER_LIFECYCLE_LANE", "bookworm")


def faithful_lane_unavailable() -> str | None:
    """Why this machine cannot boot faithful-lane machines (systemd-nspawn), or None."""
    import os
    import shutil

    if os.geteuid() != 0:
        return "needs root (namespaces, mounts, cgroups)"
    for tool in ("systemd-nspawn", "nsenter", "ip", "mksquashfs"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (make deps installs systemd-container and squashfs-tools)"
    return None
