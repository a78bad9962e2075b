#!/usr/bin/env bash
# First-boot validation gate, bottom up:
#   1 a two-task `srun --mpi=pmix` step  2 single-node all_reduce_perf per node (NVLink, GPUs)
#   3 host nccl-tests per node pair      4 PyTorch measurement in the image through Pyxis
#   5 fi_pingpong latency per node pair
# A failed step stops the steps above it; absent tools make steps SKIPPED with the
# reason. Verdicts, report, baseline and drains live in validation_report.py.
# Runs inside the allocation of first-boot.sbatch. Prerequisites: Slurm, python3,
# <fsx_root>/validation writable. Per-cluster values come from config.json (rendered by
# userdata/validation_files.py), so this file is the same on every cluster.
set -euo pipefail

readonly LIB=/opt/gpu-cluster/lib
readonly CONFIG=/opt/gpu-cluster/validation/config.json
readonly BENCH=/opt/gpu-cluster/validation/torch_comm_bench.py
# The image is imported once per cluster into /fsx as a squash file (or used as it is
# when IMAGE is one); the torch steps name their container, so Pyxis unpacks it once
# per node for both ops instead of pulling the image from the registry for each.
readonly IMAGE_TOOL=/opt/gpu-cluster/bin/gpu-cluster-image
readonly CONTAINER="gpu-cluster-validation-${SLURM_JOB_ID:-manual}"
# The report program runs as a module of $LIB, not as a script: Python keeps a module's
# compiled form but compiles a script at every start, a quarter of each of the gate's
# ~25 starts. PYTHONSAFEPATH keeps the working directory off the module path.
validation_report() { PYTHONSAFEPATH=1 PYTHONPATH="$LIB" python3 -m validation_report "$@"; }
# One python3 call prints the values one per line, in the order read here; a missing
# key fails that call, and the short read then stops the gate under `set -e`.
{
  IFS= read -r RESULTS
  IFS= read -r GPUS
  IFS= read -r TASKS
  IFS= read -r CPT
  IFS= read -r IMAGE
  IFS= read -r TIME_LIMIT_MINUTES
  # reference size sweep and correctness check (-c 1); single node stops at 1 GiB
  read -r -a SWEEP
  read -r -a SINGLE_SWEEP
  IFS= read -r TORCH_MAX_BYTES
  IFS= read -r T_NCCL
  IFS= read -r T_TORCH
  IFS= read -r T_CONTAINER
  IFS= read -r T_PING
  IFS= read -r T_RESERVE
} < <(validation_report --config "$CONFIG" settings gate.results_dir gpus gate.tasks_per_node \
  gate.cpus_per_task container_image time_limit_minutes gate.sweep gate.single_sweep gate.torch_max_bytes \
  gate.timeouts.nccl gate.timeouts.torch gate.timeouts.container gate.timeouts.pingpong gate.timeouts.reserve)
readonly RESULTS GPUS TASKS CPT IMAGE TIME_LIMIT_MINUTES SWEEP SINGLE_SWEEP TORCH_MAX_BYTES T_NCCL T_TORCH T_CONTAINER
readonly T_PING T_RESERVE
# A join run (lib/join-gate.sh: nodes that registered into a running cluster) names its
# newcomers and healthy partner, and has its own, shorter time limit.
readonly NEWCOMERS=${VALIDATION_NEWCOMERS:-} PARTNER=${VALIDATION_PARTNER:-}
# leave time to write the report before Slurm's own limit kills the job
readonly BUDGET=$((${VALIDATION_TIME_LIMIT_MINUTES:-$TIME_LIMIT_MINUTES} * 60 - T_RESERVE))
RUN_ID="$(date -u +%Y%m%dT%H%M%SZ)-${SLURM_JOB_ID:-manual}"
readonly RUN_ID
readonly RUN="$RESULTS/$RUN_ID"
readonly LOGS="$RUN/logs"
# where the DLAMI keeps CUDA; only tests point it elsewhere
readonly CUDA_ROOT=${VALIDATION_CUDA_ROOT:-/usr/local}
# seconds the fi_pingpong server gets to open its endpoint before the client starts;
# only tests set it lower (their fake server is up at once)
readonly PP_SERVER_WAIT=${VALIDATION_PINGPONG_SERVER_WAIT:-5}

log() { printf '%s validation: %s\n' "$(date -u +%FT%TZ)" "$*"; }
report() { validation_report --config "$CONFIG" --run "$RUN" "$@"; }
skip() { report skip --step "$1" --nodes "$2" --kind "$3" --reason "$4"; }
have_time() { [ $(( BUDGET - SECONDS )) -ge "$1" ]; }

# The current pair's topology level (`plan`'s LEVEL, `-` unknown) and, for a re-test,
# the suspect pair it measures again: recorded with each step of the pair.
PAIR_LEVEL=- PAIR_RETEST=""
placed() {
  [ "$PAIR_LEVEL" = - ] || printf -- '--level\n%s\n' "$PAIR_LEVEL"
  [ -z "$PAIR_RETEST" ] || printf -- '--retest-of\n%s\n' "$PAIR_RETEST"
}

# run_step STEP NODES KIND TIMEOUT LOG -- command...: bounded run, then the verdict
run_step() {
  local step=$1 nodes=$2 kind=$3 limit=$4 out=$5 where
  shift 6
  mapfile -t where < <(placed)
  if ! have_time "$limit"; then
    report skip --step "$step" --nodes "$nodes" --kind "$kind" "${where[@]}" \
      --reason "job time budget exhausted before this step"
    return 1
  fi
  log "start $step $nodes $kind ${where[*]}"
  timeout --kill-after=30 "$limit" "$@" </dev/null >>"$out" 2>&1 ||
    echo "gate: command exit status $? (124: killed after ${limit}s)" >>"$out"
  report check --step "$step" --nodes "$nodes" --kind "$kind" "${where[@]}" --log "$out"
}

testdir() {
  # the DLAMI keeps one nccl-tests build per CUDA version: take the newest
  local d
  d=$(find "$CUDA_ROOT" -maxdepth 3 -path "$CUDA_ROOT/cuda-*/efa/test-cuda-*" -type d 2>/dev/null |
    sort -V | tail -n 1)
  [ -n "$d" ] && [ -x "$d/all_reduce_perf" ] && [ -x "$d/alltoall_perf" ] && echo "$d"
}

node_addr() {
  scontrol show node "$1" | grep -o 'NodeAddr=[^ ]*' | cut -d= -f2
}

host_pair() {
  local a=$1 b=$2 kind=$3 dir=$4 libs=$5 tag=${6:-} ok=0 coll log
  for coll in all_reduce alltoall; do
    log="$LOGS/$coll-$a-$b$tag.log"
    echo "# ${coll}_perf ${SWEEP[*]} on $a,$b ($kind)" >"$log"
    # --export=ALL,...: a bare list drops PATH [SRUN]; no NCCL_NET or IB variables on EFA
    run_step "$coll" "$a,$b" "$kind" "$T_NCCL" "$log" -- \
      srun -N 2 -w "$a,$b" --ntasks-per-node="$TASKS" --cpus-per-task="$CPT" --gres="gpu:$GPUS" \
      --mpi=pmix --export="ALL,LD_LIBRARY_PATH=$libs,NCCL_DEBUG=INFO" \
      "$dir/${coll}_perf" "${SWEEP[@]}" || ok=1
  done
  return "$ok"
}

# squash_image: IMAGE as a squash file path (imported into /fsx once per cluster).
squash_image() {
  case $IMAGE in
    /* | ./*) printf '%s\n' "$IMAGE" ;;
    *) timeout --kill-after=30 "$T_TORCH" "$IMAGE_TOOL" "$IMAGE" 2>>"$LOGS/image-import.log" </dev/null ;;
  esac
}

torch_pair() {
  local a=$1 b=$2 kind=$3 sqsh=$4 ok=0 op
  for op in all_reduce all_to_all; do
    echo "# torch_comm_bench $op in $IMAGE ($sqsh) on $a,$b" >"$LOGS/torch_$op-$a-$b.log"
    run_step "torch_$op" "$a,$b" "$kind" "$T_TORCH" "$LOGS/torch_$op-$a-$b.log" -- \
      srun -N 2 -w "$a,$b" --ntasks-per-node="$TASKS" --cpus-per-task="$CPT" --gres="gpu:$GPUS" \
      --container-image="$sqsh" --container-name="$CONTAINER" --container-mounts="$BENCH:$BENCH:ro" \
      --export="ALL,MASTER_ADDR=$a,MASTER_PORT=29500,NCCL_DEBUG=INFO" \
      python "$BENCH" --op "$op" --max-bytes "$TORCH_MAX_BYTES" || ok=1
  done
  # Pyxis keeps named containers after the job (container_scope=global, its default):
  # drop this run's unpacked copy, it is tens of GB on the node-local disk.
  timeout --kill-after=10 120 srun -N 2 -w "$a,$b" --ntasks-per-node=1 \
    enroot remove -f "pyxis_$CONTAINER" </dev/null >>"$LOGS/container-cleanup.log" 2>&1 || true
  return "$ok"
}

pingpong_pair() {
  local a=$1 b=$2 kind=$3 pp=$4 addr server rc=0
  local out="$LOGS/pingpong-$a-$b.log"
  addr=$(node_addr "$a")
  echo "# $pp -p efa -e rdm -I 10000 -S 64 $addr (server $a, client $b)" >"$out"
  # server first, in the background, bounded by the same timeout as the client
  timeout --kill-after=10 "$T_PING" srun --overlap -N 1 -n 1 -w "$a" \
    "$pp" -p efa -e rdm -I 10000 -S 64 </dev/null >"$LOGS/pingpong-server-$a.log" 2>&1 &
  server=$!
  sleep "$PP_SERVER_WAIT"
  run_step pingpong "$a,$b" "$kind" "$T_PING" "$out" -- \
    srun --overlap -N 1 -n 1 -w "$b" "$pp" -p efa -e rdm -I 10000 -S 64 "$addr" || rc=1
  wait "$server" || true
  return "$rc"
}

gpu_steps() {
  local nodes=$1 node dir libs cuda pp a b kind pair sqsh
  local -a good=() passed=()
  if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
    skip single "$nodes" "" "no nvidia-smi or no GPU on $(hostname -s)"
    skip all_reduce "$nodes" "" "no GPU"
    skip torch_all_reduce "$nodes" "" "no GPU"
    skip pingpong "$nodes" "" "no GPU (fi_pingpong runs after the host nccl-tests)"
    return 0
  fi
  if ! dir=$(testdir); then
    skip single "$nodes" "" "no nccl-tests under /usr/local/cuda-*/efa/test-cuda-*/"
    skip all_reduce "$nodes" "" "no nccl-tests directory"
    return 0
  fi
  cuda=${dir%%/efa/*}
  libs="$cuda/lib:$cuda/lib64:/opt/amazon/efa/lib:/opt/amazon/ofi-nccl/lib:/opt/amazon/openmpi/lib"
  for node in ${nodes//,/ }; do
    echo "# all_reduce_perf ${SINGLE_SWEEP[*]} on $node" >"$LOGS/single-$node.log"
    if run_step single "$node" "" "$T_NCCL" "$LOGS/single-$node.log" -- \
      srun -N 1 -w "$node" --ntasks-per-node="$TASKS" --cpus-per-task="$CPT" --gres="gpu:$GPUS" \
      --mpi=pmix --export="ALL,LD_LIBRARY_PATH=$libs,NCCL_DEBUG=INFO" \
      "$dir/all_reduce_perf" "${SINGLE_SWEEP[@]}"; then
      good+=("$node")
    fi
  done
  if [ "${#good[@]}" -lt 2 ]; then
    skip all_reduce "$nodes" "" "fewer than 2 nodes passed the single-node check"
    return 0
  fi
  nodes=$(IFS=,; echo "${good[*]}")
  sinfo -h -N -n "$nodes" -o '%N %f' >"$LOGS/features.txt"
  report plan --nodes "$nodes" --features "$LOGS/features.txt" >"$LOGS/pairs.txt"
  # fd 3: srun forwards stdin to its tasks and would eat the pair list
  while read -r a b kind PAIR_LEVEL <&3; do
    if host_pair "$a" "$b" "$kind" "$dir" "$libs"; then
      passed+=("$a|$b|$kind|$PAIR_LEVEL")
    fi
  done 3<"$LOGS/pairs.txt"
  # Outlier and failed pairs: each of their nodes once more with a partner that measured
  # well, so the one bad node is named, not both (validation_report.py retest-plan).
  report retest-plan >"$LOGS/retests.txt"
  while read -r a b kind PAIR_LEVEL PAIR_RETEST <&3; do
    host_pair "$a" "$b" "$kind" "$dir" "$libs" "-retest" || true
  done 3<"$LOGS/retests.txt"
  PAIR_LEVEL=- PAIR_RETEST=""
  if [ "${#passed[@]}" -eq 0 ]; then
    skip torch_all_reduce "$nodes" "" "host nccl-tests failed on every pair"
    skip pingpong "$nodes" "" "host nccl-tests failed on every pair"
    return 0
  fi
  IFS='|' read -r a b kind PAIR_LEVEL <<<"${passed[0]}"
  if [ -z "$IMAGE" ]; then
    skip torch_all_reduce "$a,$b" "$kind" "no container_image configured"
  elif ! srun --help 2>&1 | grep -q -- '--container-image'; then
    skip torch_all_reduce "$a,$b" "$kind" "pyxis not loaded: srun --help has no --container-image"
  elif ! sqsh=$(squash_image); then
    skip torch_all_reduce "$a,$b" "$kind" "cannot import $IMAGE into a squash file on /fsx: $(tail -n 1 "$LOGS/image-import.log" 2>/dev/null)"
  else
    torch_pair "$a" "$b" "$kind" "$sqsh" || true
  fi
  pp=$(command -v fi_pingpong || echo /opt/amazon/efa/bin/fi_pingpong)
  if [ ! -x "$pp" ]; then
    skip pingpong "$nodes" "" "no fi_pingpong (EFA installer's /opt/amazon/efa/bin)"
    return 0
  fi
  for pair in "${passed[@]}"; do
    IFS='|' read -r a b kind PAIR_LEVEL <<<"$pair"
    pingpong_pair "$a" "$b" "$kind" "$pp" || true
  done
}

# container_step NODES: the image runs through Pyxis + Enroot on every node (no GPU
# needed): the squash file imported once, one task per node.
container_step() {
  local nodes=$1 n sqsh
  n=$(tr ',' '\n' <<<"$nodes" | grep -c .)
  if [ -z "$IMAGE" ]; then skip container "$nodes" "" "no container_image configured"; return 0; fi
  if ! srun --help 2>&1 | grep -q -- '--container-image'; then
    skip container "$nodes" "" "pyxis not loaded: srun --help has no --container-image"; return 0
  fi
  if ! sqsh=$(squash_image); then
    skip container "$nodes" "" "cannot import $IMAGE into a squash file on /fsx: $(tail -n 1 "$LOGS/image-import.log" 2>/dev/null)"
    return 0
  fi
  echo "# nodes=$n image=$IMAGE ($sqsh)" >"$LOGS/container.log"
  # shellcheck disable=SC2016 # $(hostname -s) expands inside the container, on each node
  run_step container "$nodes" "" "$T_CONTAINER" "$LOGS/container.log" -- \
    srun -N "$n" --ntasks-per-node=1 --container-image="$sqsh" --container-name="$CONTAINER" \
    --container-mounts=/fsx:/fsx sh -c 'echo "container-ok $(hostname -s)"' || true
}

# pmix_step NODES: a real two-task PMIx step. It loads Slurm's mpi/pmix plugin and the
# PMIx library in srun and slurmstepd; `srun --mpi=list` only lists plugin files, so a
# missing libpmix shows only here ("can not load PMIx library"), as Slurm's own error.
pmix_step() {
  echo "# two-task PMIx step on $1" >"$LOGS/pmix.log"
  run_step pmix "$1" "" 60 "$LOGS/pmix.log" -- \
    srun --mpi=pmix -n2 true
}

finish() {
  # always leave a report, also when a step above died under set -e
  report build --drain || true
}

main() {
  local nodes
  mkdir -p "$LOGS"
  # By name: Slurm lists a job's nodes in its node-table order, and dynamic nodes enter
  # that table as they register (seen: ip-...-12,ip-...-11), so a report would name the
  # same nodes in a different order from one run to the next.
  nodes=$(scontrol show hostnames "${SLURM_JOB_NODELIST:-$(hostname -s)}" | sort -V | paste -sd, -)
  report start --nodes "$nodes" --job-id "${SLURM_JOB_ID:-}" ${NEWCOMERS:+--newcomers "$NEWCOMERS" --partner "$PARTNER"}
  trap finish EXIT
  log "run $RUN_ID on $nodes"
  container_step "$nodes"
  if pmix_step "$nodes"; then
    gpu_steps "$nodes"
  else
    skip single "$nodes" "" "pmix missing: srun --mpi=pmix cannot start the tests"
  fi
}

main "$@"
