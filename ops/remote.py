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
