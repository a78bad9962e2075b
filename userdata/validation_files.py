"""Pure renderer of the first-boot validation job (no pulumi, no I/O beyond templates).

    validation_files(ctx) -> {absolute node path: file content}

ctx keys (plain values, e.g. from the stack config and infra/catalog.py):
  cluster_name        str   cluster name
  instance_type       str   e.g. "p5.48xlarge"
  gpus                int   GPUs per node (0 on the CPU-only local cluster)
  vcpus               int   vCPUs per node
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
from functools import lru_cache
from pathlib import Path

import jinja2

from userdata.verdict import thresholds

HERE = Path(__file__).resolve().parent
TEMPLATE_DIR = HERE / "templates" / "validation"
BASE = "/opt/gpu-cluster"
LIB = f"{BASE}/lib"
JOB_DIR = f"{BASE}/validation"
REQUIRED = ("cluster_name", "instance_type", "gpus", "vcpus", "efa_count", "efa_gbps", "partition",
            "fsx_root", "container_image", "time_limit_minutes", "baseline_margin")
# seed sweeps: 2 nodes 8 B..16 GiB, factor 2, one GPU per rank, check on, 50 iterations;
# the single-node NVLink pre-check stops at 1 GiB
SWEEP = "-b 8 -e 16G -f 2 -g 1 -c 1 -n 50"
SINGLE_SWEEP = "-b 8 -e 1G -f 2 -g 1 -c 1 -n 50"
TORCH_MAX_BYTES = 8 << 30  # seed's container reference is at 8 GiB
# seconds; the 16 GiB sweep takes ~1-2 min on p4d/p5, the container step may first
# import the image on every node; RESERVE keeps time to write the report
TIMEOUTS = {"nccl": 900, "torch": 1800, "pingpong": 120, "reserve": 120}


@lru_cache(maxsize=1)
def _env() -> jinja2.Environment:
    return jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATE_DIR)),
                              undefined=jinja2.StrictUndefined, keep_trailing_newline=True,
                              trim_blocks=True, lstrip_blocks=True, autoescape=False,
                              # bash's ${#array[@]} would open a Jinja comment
                              comment_start_string="{##", comment_end_string="##}")


def job_values(ctx: dict) -> dict:
    """Every value the templates place, computed here (layout only in templates)."""
    missing = [k for k in REQUIRED if k not in ctx]
    if missing:
        raise KeyError(f"validation ctx misses: {', '.join(missing)}")
    gpus = int(ctx["gpus"])
    tasks = gpus or 1
    if ctx["time_limit_minutes"] * 60 <= TIMEOUTS["reserve"]:
        raise ValueError("time_limit_minutes leaves no time for any step")
    results = f"{ctx['fsx_root'].rstrip('/')}/validation"
    return {
        "cluster_name": ctx["cluster_name"], "instance_type": ctx["instance_type"], "gpus": gpus,
        "tasks_per_node": tasks,
        # vCPUs / GPUs per rank (seed: 192 / 8 = 24)
        "cpus_per_task": max(1, int(ctx["vcpus"]) // tasks),
        "partition": ctx["partition"], "time_limit_minutes": int(ctx["time_limit_minutes"]),
        "results_dir": results, "lib_dir": LIB, "config_path": f"{JOB_DIR}/config.json",
        "job_path": f"{JOB_DIR}/first-boot.sbatch", "gate_path": f"{JOB_DIR}/gate.sh",
        "bench_path": f"{JOB_DIR}/torch_comm_bench.py",
        "container_image_q": shlex.quote(ctx["container_image"]),
        "sweep": SWEEP, "single_sweep": SINGLE_SWEEP, "torch_max_bytes": TORCH_MAX_BYTES,
        "timeouts": TIMEOUTS,
    }


def config_json(ctx: dict) -> str:
    """What validation_report.py reads on the node: identity, thresholds, margin."""
    cfg = {k: ctx[k] for k in REQUIRED}
    cfg["thresholds"] = thresholds(float(ctx["efa_gbps"]), max(int(ctx["gpus"]), 1), int(ctx["efa_count"]))
    return json.dumps(cfg, indent=2, sort_keys=True) + "\n"


def compact_python(source: str, origin: str) -> str:
    """The same program without docstrings and comments: the repository copy is the
    documented one, the node copy must fit EC2 user data (16 KB gzipped in total)."""
    tree = ast.parse(source)
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef)) and body
                and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)):
            node.body = body[1:] or [ast.Pass()]
    return (f"# Generated by gpu-cluster from {origin} (docstrings and comments stripped); "
            f"do not edit\n{ast.unparse(tree)}\n")


def _render(name: str, values: dict) -> str:
    header = f"Generated by gpu-cluster from userdata/templates/validation/{name}; do not edit"
    return _env().get_template(name).render(header=header, **values)


def validation_files(ctx: dict) -> dict[str, str]:
    v = job_values(ctx)
    return {
        f"{JOB_DIR}/first-boot.sbatch": _render("first-boot.sbatch.j2", v),
        f"{JOB_DIR}/gate.sh": _render("gate.sh.j2", v),
        f"{JOB_DIR}/torch_comm_bench.py": compact_python(
            _render("torch_comm_bench.py.j2", v), "userdata/templates/validation/torch_comm_bench.py.j2"),
        f"{JOB_DIR}/config.json": config_json(ctx),
        f"{BASE}/bin/gpu-cluster-validation": _render("gpu-cluster-validation.j2", v),
        f"{LIB}/verdict.py": compact_python((HERE / "verdict.py").read_text(encoding="utf-8"),
                                            "userdata/verdict.py"),
        f"{LIB}/validation_report.py": compact_python(
            (HERE / "validation_report.py").read_text(encoding="utf-8"), "userdata/validation_report.py"),
    }
