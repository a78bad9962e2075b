"""Run the shell helpers that ship to nodes, from their rendered bytes, in tests.

Tests that need a value the nodes compute (MaxNodeCount) source the very lib/common.sh
the renderer ships, so the test guards the line nodes run, not a copy of its formula.
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path

from userdata import layout
from userdata import slurm_conf as sc
from userdata.render import boot_files

_PLACEHOLDER = re.compile(r"@([A-Z][A-Z0-9_]*)@")


def run_common(snippet: str, env: dict[str, str] | None = None) -> str:
    """stdout of `snippet` run by bash after sourcing the shipped lib/common.sh."""
    common = boot_files()[f"{layout.LIB}/common.sh"]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "common.sh"
        path.write_text(common)
        run_env = {**os.environ, "GPU_CLUSTER_STATE": tmp, "GPU_CLUSTER_RUN": tmp, **(env or {})}
        out = subprocess.run(
            ["bash", "-c", f'. "{path}"; {snippet}'], capture_output=True, text=True, check=True, env=run_env
        )
    return out.stdout


def max_node_count(expected_nodes: int) -> int:
    """MaxNodeCount as step 50 computes it, with cluster.env's factor and spare."""
    env = {"SLURM_MAX_NODES_FACTOR": str(sc.MAX_NODES_FACTOR), "SLURM_MAX_NODES_SPARE": str(sc.MAX_NODES_SPARE)}
    return int(run_common(f"max_node_count {int(expected_nodes)}", env).strip())


def fill_placeholders(text: str, values: Mapping[str, object]) -> str:
    """Replace `@NAME@` with values[NAME], as the boot's sed does.

    Raises ValueError for a placeholder left without a value, and for a value the
    boot's `sed 's|@NAME@|value|g'` could not carry (`|`, `&`, `\\`, newline).
    """
    for name, value in values.items():
        if re.search(r"[|&\\\n]", str(value)):
            raise ValueError(f"value for @{name}@ is not sed-safe: {value!r}")
    missing = sorted({m for m in _PLACEHOLDER.findall(text) if m not in values})
    if missing:
        raise ValueError("no value for " + ", ".join(f"@{m}@" for m in missing))
    return _PLACEHOLDER.sub(lambda m: str(values[m.group(1)]), text)
