"""The gate's render context and fake Slurm commands that answer from the real logs in tests/data/verdict."""

from pathlib import Path

from model.catalog import CATALOG

DATA = Path(__file__).parents[1] / "data" / "verdict"


# catalog figures per node, as userdata/render.py's validation_ctx passes them
TYPES = {
    name: dict(
        gpus=CATALOG[name].gpus,
        vcpus=CATALOG[name].vcpus,
        cpus_per_gpu=CATALOG[name].cpus_per_gpu,
        efa_count=CATALOG[name].efa_count,
        efa_gbps=CATALOG[name].efa_gbps,
    )
    for name in ("p5.48xlarge", "p4d.24xlarge", "p6-b200.48xlarge")
}


def ctx(instance_type="p5.48xlarge", **over):
    c = dict(
        cluster_name="demo",
        instance_type=instance_type,
        partition="train",
        fsx_root="/fsx/.gpu-cluster/demo",
        container_image="/fsx/images/pytorch.sqsh",
        time_limit_minutes=60,
        baseline_margin=0.1,
        level_margin=0.1,
        **TYPES.get(instance_type, {}),
    )
    c.update(over)
    return c


FAKE_GPU_SRUN = """#!/usr/bin/env bash
# stands in for srun: answers from the real logs in tests/data/verdict
[ "$*" = "--mpi=pmix -n2 true" ] && exit 0  # the gate's pmix step: PMIx works here
case "$1" in
  --mpi=list) printf 'MPI plugin types are...\\n\\tnone\\n\\tpmix\\n'; exit 0 ;;
  --help) echo '      --container-image=[USER@][REGISTRY#]IMAGE[:TAG]|PATH'; exit 0 ;;
esac
nodes=""; prev=""; n=1
for a in "$@"; do
  [ "$prev" = "-w" ] && nodes=$a
  [ "$prev" = "-N" ] && n=$a
  prev=$a
done
echo "srun $*" >>"$FAKE_LOG"
# Pyxis: run the command once per node (-w, else the first -N of the allocation) with
# that node's name as hostname; FAKE_CONTAINER_DOWN lists nodes where the container fails
pyxis() {
  local node rc=0 host
  while [ $# -gt 0 ]; do
    case $1 in -N | -n | -w) shift 2 ;; -*) shift ;; *) break ;; esac
  done
  [ -n "$nodes" ] || nodes=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n "$n" | paste -sd, -)
  host=$(mktemp -d)
  for node in ${nodes//,/ }; do
    if [[ ",$FAKE_CONTAINER_DOWN," == *",$node,"* ]]; then
      echo "$node: pyxis: couldn't start container" >&2; rc=1; continue
    fi
    printf '#!/bin/sh\necho %s\n' "$node" >"$host/hostname"
    chmod +x "$host/hostname"
    PATH="$host:$PATH" "$@" || rc=1
  done
  rm -rf "$host"
  return "$rc"
}
case "$*" in
  *all_reduce_perf*-e\\ 1G*) cat "$DATA/efa_p5_allreduce_16g.log" ;;
  *_perf*)
    if [[ ",$nodes," == *",$FAKE_BAD,"* ]]; then cat "$DATA/gcp_h100_allreduce_8g.log"
    elif [[ ",$nodes," == *",${FAKE_SLOW:-none},"* ]]; then
      # a node 6% slow at 16 GiB: above the floor, below its peers (an outlier)
      sed 's/  259.78  487.09 /  244.20  457.86 /; s/  259.87  487.26 /  244.30  458.06 /' "$DATA/efa_p5_allreduce_16g.log"
    else cat "$DATA/efa_p5_allreduce_16g.log"; fi ;;
  *torch_comm_bench*--op\\ all_reduce*) sed 's/found 8 nics/found 32 nics/' "$DATA/torch_allreduce_seed_reference.log" ;;
  *torch_comm_bench*) sed 's/found 8 nics/found 32 nics/; s/all_reduce/all_to_all/; s/367.5 GB/95.0 GB/' \\
      "$DATA/torch_allreduce_seed_reference.log" ;;
  *fi_pingpong*10.0.0.*)
    echo 'bytes   #sent   #ack     total       time     MB/sec    usec/xfer   Mxfers/sec'
    echo '64      10k     =10k     1.2m        0.22s      5.90      10.85       0.09' ;;
  *fi_pingpong*) sleep 0.2 ;;
  *--container-image=*) pyxis "$@" ;;
  *) echo "unexpected srun $*" >&2; exit 1 ;;
esac
"""


# FAKE_NODES: the allocation's nodes (4 unless a test needs fewer)
FAKE_GPU_SCONTROL = """#!/usr/bin/env bash
case "$1 $2" in
  "show hostnames") printf '%s\\n' ${FAKE_NODES:-n1 n2 n3 n4} ;;
  "show node") echo "NodeName=$3 Arch=x86_64 NodeAddr=10.0.0.${3#n} NodeHostName=$3" ;;
  *) echo "scontrol $*" >>"$FAKE_LOG" ;;
esac
"""


FAKE_SINFO = """#!/usr/bin/env bash
printf '%s block-a,p5.48xlarge\\n' ${FAKE_NODES:-n1 n2 n3 n4}
"""


def run_fake_gpu_gate(
    tmp_path, nodes: list[str], cuda: tuple[str, ...] = ("12.8",), **env_over: str
) -> tuple[object, dict]:
    """gate.sh as shipped, against the fake srun/scontrol/sinfo and fake GPU tools above,
    on `nodes` (n1, n2, ...: FAKE_GPU_SCONTROL gives node nK the address 10.0.0.K).
    Returns (the finished process, report.json)."""
    import json
    import os
    import subprocess

    from userdata.validation_files import validation_files

    base = tmp_path / "opt"
    for path, content in validation_files(ctx(fsx_root=str(tmp_path / "fsx"))).items():
        f = base / path.lstrip("/").replace("opt/gpu-cluster/", "", 1)
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(content.replace("/opt/gpu-cluster", str(base)))
    fakebin = tmp_path / "bin"
    fakebin.mkdir()
    for name, body in (
        ("srun", FAKE_GPU_SRUN),
        ("scontrol", FAKE_GPU_SCONTROL),
        ("sinfo", FAKE_SINFO),
        ("nvidia-smi", "#!/bin/sh\nexit 0\n"),
        ("fi_pingpong", "#!/bin/sh\nexit 0\n"),
    ):
        (fakebin / name).write_text(body)
        (fakebin / name).chmod(0o755)
    for version in cuda:  # one nccl-tests build per CUDA, as on the DLAMI
        d = tmp_path / "usr" / f"cuda-{version}" / "efa" / f"test-cuda-{version}"
        d.mkdir(parents=True)
        for exe in ("all_reduce_perf", "alltoall_perf"):
            (d / exe).write_text("")
            (d / exe).chmod(0o755)
    env = {
        **os.environ,
        "PATH": f"{fakebin}:{os.environ['PATH']}",
        "SLURM_JOB_ID": "7",
        "SLURM_JOB_NODELIST": ",".join(nodes),
        "FAKE_NODES": " ".join(nodes),
        "FAKE_BAD": "",
        "FAKE_LOG": str(tmp_path / "calls.log"),
        "DATA": str(DATA),
        "VALIDATION_CUDA_ROOT": str(tmp_path / "usr"),
        "VALIDATION_PINGPONG_SERVER_WAIT": "0",
        **env_over,
    }
    proc = subprocess.run(
        ["bash", str(base / "validation" / "gate.sh")], env=env, capture_output=True, text=True, timeout=300
    )
    root = tmp_path / "fsx" / "validation"
    report = json.loads((root / (root / "latest").read_text().strip() / "report.json").read_text())
    return proc, report
