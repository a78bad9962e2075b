"""The first-boot validation files a node gets (pure: no pulumi, no I/O beyond reading sources).

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
  level_margin        float drop of a topology level's median against the same-leaf median
                            that flags the level (e.g. 0.10)

Only the job (first-boot.sbatch: its #SBATCH lines must be literal) is rendered from a
template; the gate, its CLI, the container benchmark and the Python programs ship verbatim
from nodeside/ and read their per-cluster values from config.json at run time
(`validation_report.py settings KEY...`), next to them. verdict.py reads its instance
table from lib/instance_types.json, rendered here from model/catalog.py.

The bootstrap ships every returned file; the controller submits the job with
`gpu-cluster-validation run` (sbatch -N <idle nodes> first-boot.sbatch) once nodes are idle.
Rendering is byte-stable: no timestamps; the run id is made on the node at run time.
"""

from __future__ import annotations

import ast
import functools
import json

from model.catalog import CATALOG
from model.version import VERSION
from nodeside.verdict import INSTANCE_TYPES_FILE, VERSION_FILE, thresholds
from userdata import layout, templating

# What config.json on the node carries at its top level (validation_report.py reads it).
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
    "level_margin",
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
# nodeside/ file -> node path: shipped as they are
_VERBATIM = {
    "validation/gate.sh": f"{layout.VALIDATION}/gate.sh",
    "validation/gpu-cluster-validation": layout.VALIDATION_CLI,
}
_PYTHON = {
    "validation/torch_comm_bench.py": f"{layout.VALIDATION}/torch_comm_bench.py",
    "verdict.py": f"{layout.LIB}/verdict.py",
    "validation_report.py": f"{layout.LIB}/validation_report.py",
    "pair_topology.py": f"{layout.LIB}/pair_topology.py",
}


def _checked(ctx: dict) -> dict:
    missing = [k for k in REQUIRED if k not in ctx]
    if missing:
        raise KeyError(f"validation ctx misses: {', '.join(missing)}")
    if ctx["time_limit_minutes"] * 60 <= TIMEOUTS["reserve"]:
        raise ValueError("time_limit_minutes leaves no time for any step")
    return ctx


def _results_dir(ctx: dict) -> str:
    return f"{ctx['fsx_root'].rstrip('/')}/validation"


def job_values(ctx: dict) -> dict:
    """Every value the job template places, computed here (layout only in the template)."""
    gpus = int(_checked(ctx)["gpus"])
    return {
        "cluster_name": ctx["cluster_name"],
        "instance_type": ctx["instance_type"],
        "gpus": gpus,
        "tasks_per_node": gpus or 1,
        "cpus_per_task": int(ctx["cpus_per_gpu"]),
        "partition": ctx["partition"],
        "time_limit_minutes": int(ctx["time_limit_minutes"]),
        "results_dir": _results_dir(ctx),
        "job_path": layout.VALIDATION_JOB,
        "gate_path": f"{layout.VALIDATION}/gate.sh",
    }


def gate_settings(ctx: dict) -> dict:
    """What gate.sh reads from config.json (`gate.*`) besides the reported values."""
    return {
        "results_dir": _results_dir(ctx),
        "tasks_per_node": int(ctx["gpus"]) or 1,
        "cpus_per_task": int(ctx["cpus_per_gpu"]),
        "sweep": SWEEP,
        "single_sweep": SINGLE_SWEEP,
        "torch_max_bytes": TORCH_MAX_BYTES,
        "timeouts": dict(TIMEOUTS),
    }


def config_json(ctx: dict) -> str:
    """What validation_report.py and gate.sh read on the node: identity, thresholds,
    margin, the gate's settings."""
    cfg = {k: _checked(ctx)[k] for k in REPORTED}
    cfg["thresholds"] = thresholds(float(ctx["efa_gbps"]), max(int(ctx["gpus"]), 1), int(ctx["efa_count"]))
    cfg["gate"] = gate_settings(ctx)
    return json.dumps(cfg, indent=2, sort_keys=True) + "\n"


def instance_types_json() -> str:
    """The instance table verdict.py reads (its `--instance-type` floors), from the
    catalog: the catalog stays the one home of the figures, the nodes get them as data.
    nodeside/instance_types.json is the same bytes, for runs from a checkout (a test
    keeps the two equal)."""
    table = {
        name: {"efa_gbps": spec.efa_gbps, "gpus": spec.gpus, "efa_count": spec.efa_count}
        for name, spec in sorted(CATALOG.items())
    }
    return json.dumps(table, indent=2, sort_keys=True) + "\n"


@functools.lru_cache(maxsize=16)
def compact_python(source: str, origin: str) -> str:
    """The same program without docstrings and comments: the repository copy is the
    documented one, the node copy is what the nodes download. Kept per source text: the
    parse and unparse were a third of a whole program run, and every run renders the same
    few files."""
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
    return (
        f"# Generated by gpu-cluster from {origin} (docstrings and comments stripped); "
        f"do not edit\n{ast.unparse(tree)}\n"
    )


def _render(name: str, values: dict) -> str:
    header = f"Generated by gpu-cluster from userdata/templates/validation/{name}; do not edit"
    return templating.render(f"validation/{name}", header=header, **values)


def validation_files(ctx: dict) -> dict[str, str]:
    out = {
        layout.VALIDATION_JOB: _render("first-boot.sbatch.j2", job_values(ctx)),
        f"{layout.VALIDATION}/config.json": config_json(ctx),
        f"{layout.LIB}/{INSTANCE_TYPES_FILE}": instance_types_json(),
        # What every node program's --version prints (gpu-cluster-health and
        # gpu-cluster-run read it from ../lib beside their bin/).
        f"{layout.LIB}/{VERSION_FILE}": VERSION + "\n",
    }
    out.update({dest: templating.verbatim(rel) for rel, dest in _VERBATIM.items()})
    for rel, dest in _PYTHON.items():
        out[dest] = compact_python(templating.verbatim(rel), f"nodeside/{rel}")
    return dict(sorted(out.items()))
