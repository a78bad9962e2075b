"""The shell lines `status` and `replace` run on the controller through SSM.

Cluster and node names are validated by the config schema and by `node_ipv4`
(lowercase letters, digits, '-'), so embedding them in the script is safe.
"""

from __future__ import annotations

import shlex
from pathlib import Path

from nodeside import cluster_status
from userdata import layout

STATUS_BEGIN = cluster_status.BEGIN
# The status program is a real file under nodeside/; SSM gets its text as a here-document.
_STATUS_PY = Path(cluster_status.__file__).read_text(encoding="utf-8")


def status_script(cluster: str) -> list[str]:
    root = shlex.quote(layout.fsx_root(cluster))
    return [f"python3 - {root} <<'GPU_CLUSTER_PY'", *_STATUS_PY.splitlines(), "GPU_CLUSTER_PY"]


def drain_script(node: str, reason: str) -> list[str]:
    return [f'scontrol update nodename={node} state=drain reason="{reason}"']


def node_state_script(node: str) -> list[str]:
    # %T: the node's full state (idle, allocated, drained, down ...); empty when unknown.
    return [f"sinfo -h -N -n {node} -o '%T' 2>/dev/null | head -n 1"]


def jobs_script(node: str) -> list[str]:
    # One line per job on the node: id|user|name|state|time used (squeue's %i %u %j %T %M).
    return [f"squeue -h -w {node} -o '%i|%u|%j|%T|%M'"]


def force_script(node: str) -> list[str]:
    """Requeue every job on the node (JobRequeue=1, --requeue); cancel what cannot be."""
    return [
        f"for j in $(squeue -h -w {node} -o %i); do",
        '  if scontrol requeue "$j" 2>/dev/null; then echo "requeued $j"; else scancel "$j" && echo "cancelled $j"; fi',
        "done",
    ]


DCGM_MISSING = 3  # exit status of dcgm_script when the node has no dcgmi
DCGM_BUSY = 4  # ... when jobs run on the node and --busy-ok was not given


def dcgm_script(level: int, busy_ok: bool = False) -> list[str]:
    """`dcgmi diag -r LEVEL` on the node itself; levels 2/3 stress the GPUs, so a node
    running jobs is refused unless asked (the jobs would slow down and the figures lie)."""
    lines = [f"command -v dcgmi >/dev/null || {{ echo 'dcgmi is not installed on this node'; exit {DCGM_MISSING}; }}"]
    if not busy_ok:
        lines += [
            'jobs=$(squeue -h -w "$(hostname -s)" -o %i 2>/dev/null | tr "\\n" " ")',
            f'if [ -n "$jobs" ]; then echo "jobs running on $(hostname -s): $jobs"; exit {DCGM_BUSY}; fi',
        ]
    return [*lines, f"dcgmi diag -r {int(level)}"]
