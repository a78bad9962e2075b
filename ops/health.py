"""health NODE --level N: DCGM diagnostics on one node, on request, through SSM.

`dcgmi diag -r 1` runs in every health-program run (seconds); levels 2 and 3 stress the
GPUs for minutes (published: level 2 about 2.5-10.5 minutes [DCGM-DIAG]), so they never
run on the boot or replacement path, only here, and by default only on a node without
jobs (`--busy-ok` overrides). The command runs on the node itself (its SSM agent), not on
the controller: dcgmi talks to the node's own host engine.
"""

from __future__ import annotations

import json
from typing import Any

from ops.context import Context
from ops.remote import DCGM_BUSY, DCGM_MISSING, dcgm_script
from ops.replace import resolve
from ops.ssm import run_shell

# Bounds of the whole SSM command per level, seconds: well over the published run times.
LEVEL_TIMEOUT = {1: 300, 2: 1200, 3: 3600}


def diagnose(ctx: Context, cluster: str, node: str, level: int, busy_ok: bool = False) -> dict[str, Any]:
    instance_id, slurm_node, _ = resolve(ctx, cluster, node)
    ctx.progress(f"running dcgmi diag -r {level} on {slurm_node} ({instance_id}) through SSM ...")
    res = run_shell(
        ctx,
        instance_id,
        dcgm_script(level, busy_ok),
        f"dcgmi diag -r {level}",
        timeout=LEVEL_TIMEOUT[level],
        poll=10,
    )
    out = res.stdout.strip()
    if res.exit_code == DCGM_MISSING:
        verdict = "skipped"
    elif res.exit_code == DCGM_BUSY:
        verdict = "refused"
    elif res.status == "Success":
        verdict = "pass"
    else:
        verdict = "fail"
    return {
        "node": slurm_node,
        "instance_id": instance_id,
        "level": level,
        "verdict": verdict,
        "exit_code": res.exit_code,
        "output": out,
        "stderr": res.stderr.strip(),
    }


def render(doc: dict[str, Any]) -> str:
    head = f"dcgmi diag -r {doc['level']} on {doc['node']} ({doc['instance_id']}): {doc['verdict']}"
    if doc["verdict"] == "refused":
        head += " (pass --busy-ok to run it anyway)"
    if doc["verdict"] == "fail":
        head += f" (exit {doc['exit_code']}); drain and replace it: gpu-cluster-ops replace {doc['node']}"
    return "\n".join([head, doc["output"], doc["stderr"]]).rstrip()


def run(ctx: Context, args: Any, cluster: str) -> int:
    doc = diagnose(ctx, cluster, args.node, args.level, args.busy_ok)
    ctx.print(json.dumps(doc, indent=2, sort_keys=True) if args.json else render(doc))
    return 0 if doc["verdict"] == "pass" else 1
