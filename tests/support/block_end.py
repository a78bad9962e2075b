"""block-end.sh driven from Python: ISO and epoch conversions and a shell that sources it."""

from __future__ import annotations

import subprocess
from datetime import UTC, datetime
from pathlib import Path

LIB = Path(__file__).resolve().parents[2] / "nodeside/lib"


BLOCK_END = LIB / "block-end.sh"


COMMON = LIB / "common.sh"


def _epoch(iso: str) -> int:
    return int(datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp())


def _iso(epoch: int) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


SYSTEM_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"


def _sh(
    script: str,
    env: dict[str, str] | None = None,
    tz: str = "UTC",
    check: bool = True,
    timeout: float = 60,
    path_first: str | None = None,
) -> subprocess.CompletedProcess:
    """Run SCRIPT as the agent loop runs it: strict mode, common.sh and block-end.sh sourced.
    `path_first`: a directory searched before the system's (fake commands)."""
    full = f'set -euo pipefail; . "{COMMON}"; . "{BLOCK_END}"; {script}'
    path = f"{path_first}:{SYSTEM_PATH}" if path_first else SYSTEM_PATH
    return subprocess.run(
        ["bash", "-c", full],
        env={**(env or {}), "TZ": tz, "PATH": path},
        capture_output=True,
        text=True,
        check=check,
        timeout=timeout,
    )


def block_end_tick(cluster, fsx_root: Path, margin: str) -> list[str]:
    """One turn of the controller's agent-loop hook against a real slurmctld
    (`cluster`: a tests.support.slurm_harness.SlurmTestCluster); the logged messages
    without time stamps. Run in another time zone than the harness, so a local/UTC mixup
    shows."""
    import re

    env = {**cluster.env, "FSX_ROOT": str(fsx_root), "BLOCK_END_MARGIN_MINUTES": margin, "GC_STEP": "agent"}
    out = _sh("block_end_tick", env=env, tz="Asia/Kolkata").stdout
    return [re.sub(r"^\S+ \[agent\] ", "", ln) for ln in out.splitlines()]


def publish_block_end(fsx_root: Path, block: str, end: int) -> None:
    """What step 50 leaves on /fsx: the block's end, read by the controller's pass."""
    (fsx_root / "blocks").mkdir(parents=True, exist_ok=True)
    (fsx_root / "blocks" / f"{block}.end").write_text(_iso(end) + "\n")


def reservation_fields(cluster, name: str) -> dict[str, str]:
    """`scontrol -o show reservation NAME` as a dict."""
    out = cluster.run("scontrol", "-o", "show", "reservation", name).stdout
    return dict(tok.split("=", 1) for tok in out.split() if "=" in tok)
