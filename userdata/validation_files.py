"""Pure renderer of the first-boot validation job (no pulumi, no I/O beyond templates).

    validation_files(ctx) -> {absolute node path: file content}

ctx keys (plain values, e.g. from the stack config and model/catalog.py):
  cluster_name        str   cluster name
  instance_type       str   e.g. "p5.48xlarge"
  gpus                int   GPUs per node (0 on the CPU-only local cluster)
  vcpus               int   vCPUs per node
  cpus_per_gpu        int   --cpus-per-task of a rank (InstanceSpec.cpus_per_gpu)
  efa_count           int   EFA devices per node (NCCL's "found N nics")
  efa_gbps            float physical per-node EFA bandwidth, Gbit/s (3200 p5/p6, 400 p4d)
  partition           str   Slurm partition the job runs in
  fsx_root            str   the cluster's directory on /fsx; results go to <fsx_root>/validation/
  container_image     str   Pyxis image for the in-container check ("" skips that step)
  time_limit_minutes  int   Slurm time limit of the job
  baseline_margin     float drop against the baseline that turns a run NO-GO (e.g. 0.10)

The bootstrap ships every returned file; the controller submits the job with
`gpu-cluster-validation run` (sbatch -N <idle nodes> first-boot.sbatch) once nodes are idle.
Rendering is byte-stable: no timestamps; the run id is made on the node at run time.
"""

from __future__ import annotations

import ast
import json
import shlex
from pathlib import Path

from model.catalog import CATALOG
from nodeside.verdict import thresholds
from userdata import layout, templating

NODESIDE = Path(__file__).resolve().parent.parent / "nodeside"
# What config.json on the node carries (validation_report.py reads it).
REPORTED = (
    "cluster_name",
    "instance_type",
    "gpus",
    "vcpus",
    "efa_count",
    "efa_gbps",
    "partition",
    "fsx_root",
    "container_image",
    "time_limit_minutes",
    "baseline_margin",
)
REQUIRED = (*REPORTED, "cpus_per_gpu")
# reference sweeps: 2 nodes 8 B..16 GiB, factor 2, one GPU per rank, check on, 50 iterations;
# the single-node NVLink pre-check stops at 1 GiB
SWEEP = "-b 8 -e 16G -f 2 -g 1 -c 1 -n 50"
SINGLE_SWEEP = "-b 8 -e 1G -f 2 -g 1 -c 1 -n 50"
TORCH_MAX_BYTES = 8 << 30  # the container reference figures are at 8 GiB
# seconds; the 16 GiB sweep takes ~1-2 min on p4d/p5; a torch step may first unpack the
# image on every node; the container step starts the (already imported) squash file on
# every node, which Pyxis unpacks there: minutes for a 20 GB image, not half an hour,
# so a short job (a small time_limit_minutes) still reaches it; RESERVE keeps time to
# write the report
TIMEOUTS = {"nccl": 900, "torch": 1800, "container": 600, "pingpong": 120, "reserve": 120}


def job_values(ctx: dict) -> dict:
    """Every value the templates place, computed here (layout only in templates)."""
    missing = [k for k in REQUIRED if k not in ctx]
    if missing:
        raise KeyError(f"validation ctx misses: {', '.join(missing)}")
    gpus = int(ctx["gpus"])
    if ctx["time_limit_minutes"] * 60 <= TIMEOUTS["reserve"]:
        raise ValueError("time_limit_minutes leaves no time for any step")
    results = f"{ctx['fsx_root'].rstrip('/')}/validation"
    return {
        "cluster_name": ctx["cluster_name"],
        "instance_type": ctx["instance_type"],
        "gpus": gpus,
        "tasks_per_node": gpus or 1,
        "cpus_per_task": int(ctx["cpus_per_gpu"]),
        "partition": ctx["partition"],
        "time_limit_minutes": int(ctx["time_limit_minutes"]),
        "results_dir": results,
        "lib_dir": layout.LIB,
        "config_path": f"{layout.VALIDATION}/config.json",
        "job_path": layout.VALIDATION_JOB,
        "gate_path": f"{layout.VALIDATION}/gate.sh",
        "bench_path": f"{layout.VALIDATION}/torch_comm_bench.py",
        "container_image_q": shlex.quote(ctx["container_image"]),
        "sweep": SWEEP,
        "single_sweep": SINGLE_SWEEP,
        "torch_max_bytes": TORCH_MAX_BYTES,
        "timeouts": TIMEOUTS,
    }


def config_json(ctx: dict) -> str:
    """What validation_report.py reads on the node: identity, thresholds, margin."""
    cfg = {k: ctx[k] for k in REPORTED}
    cfg["thresholds"] = thresholds(float(ctx["efa_gbps"]), max(int(ctx["gpus"]), 1), int(ctx["efa_count"]))
    return json.dumps(cfg, indent=2, sort_keys=True) + "\n"


def verdict_instance_types() -> dict[str, tuple[int, int, int]]:
    """The instance table the node copy of verdict.py carries (its `--instance-type`
    floors), read from the catalog: the catalog stays the one home of the figures."""
    return {name: (spec.efa_gbps, spec.gpus, spec.efa_count) for name, spec in sorted(CATALOG.items())}


def compact_python(source: str, origin: str, embed: dict | None = None) -> str:
    """The same program without docstrings and comments: the repository copy is the
    documented one, the node copy is what the nodes download.

    embed: module-level `NAME = f()` assignments whose value is written in as a
    literal (the node has none of our modules); a function left unused is dropped."""
    tree = ast.parse(source)
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (
            isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef))
            and body
            and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)
            and isinstance(body[0].value.value, str)
        ):
            node.body = body[1:] or [ast.Pass()]
    if embed:
        tree.body = _embed(tree.body, embed, origin)
    return (
        f"# Generated by gpu-cluster from {origin} (docstrings and comments stripped); "
        f"do not edit\n{ast.unparse(tree)}\n"
    )


def _embed(body: list, values: dict, origin: str) -> list:
    replaced, callers = set(), set()
    for stmt in body:
        if (
            isinstance(stmt, ast.Assign)
            and len(stmt.targets) == 1
            and isinstance(stmt.targets[0], ast.Name)
            and stmt.targets[0].id in values
        ):
            if isinstance(stmt.value, ast.Call) and isinstance(stmt.value.func, ast.Name):
                callers.add(stmt.value.func.id)
            stmt.value = ast.parse(repr(values[stmt.targets[0].id]), mode="eval").body
            replaced.add(stmt.targets[0].id)
    missing = set(values) - replaced
    if missing:
        raise ValueError(f"{origin}: no module-level assignment to {', '.join(sorted(missing))} to embed")
    used = {n.id for stmt in body for n in ast.walk(stmt) if isinstance(n, ast.Name)}
    return [s for s in body if not (isinstance(s, ast.FunctionDef) and s.name in callers and s.name not in used)]


def _render(name: str, values: dict) -> str:
    header = f"Generated by gpu-cluster from userdata/templates/validation/{name}; do not edit"
    return templating.render(f"validation/{name}", header=header, **values)


def validation_files(ctx: dict) -> dict[str, str]:
    v = job_values(ctx)
    return {
        layout.VALIDATION_JOB: _render("first-boot.sbatch.j2", v),
        f"{layout.VALIDATION}/gate.sh": _render("gate.sh.j2", v),
        f"{layout.VALIDATION}/torch_comm_bench.py": compact_python(
            _render("torch_comm_bench.py.j2", v), "userdata/templates/validation/torch_comm_bench.py.j2"
        ),
        f"{layout.VALIDATION}/config.json": config_json(ctx),
        layout.VALIDATION_CLI: _render("gpu-cluster-validation.j2", v),
        f"{layout.LIB}/verdict.py": compact_python(
            (NODESIDE / "verdict.py").read_text(encoding="utf-8"),
            "nodeside/verdict.py",
            embed={"INSTANCE_TYPES": verdict_instance_types()},
        ),
        f"{layout.LIB}/validation_report.py": compact_python(
            (NODESIDE / "validation_report.py").read_text(encoding="utf-8"), "nodeside/validation_report.py"
        ),
    }
