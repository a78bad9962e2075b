#!/usr/bin/env bash
# Compares the hardware slurmd sees (`slurmd -C`) with the node line this node
# registers with. Slurm drains a node whose configured topology differs from what
# slurmd finds, or whose RealMemory exceeds the memory it finds, so the boot stops
# here instead, printing both lines.
# Prerequisites: slurmd on PATH. Exit 0 when they agree, 1 otherwise.
set -euo pipefail

# SLURM_NODE_HARDWARE (cluster.env, from the catalog): `CPUs=.. Boards=.. SocketsPerBoard=..
# CoresPerSocket=.. ThreadsPerCore=.. RealMemory=..`. Step 50 has it in its environment;
# run by hand, the script reads cluster.env itself. Every key must match exactly except
# RealMemory, which slurmd -C may exceed.
if [[ -z ${SLURM_NODE_HARDWARE:-} ]]; then
  # shellcheck source=/dev/null
  . "${GPU_CLUSTER_ETC:-/etc/gpu-cluster}/cluster.env"
fi
readonly CONFIGURED=${SLURM_NODE_HARDWARE:?SLURM_NODE_HARDWARE is not set (cluster.env)}
EXACT_KEYS=
for token in $CONFIGURED; do
  if [[ ${token%%=*} != RealMemory ]]; then EXACT_KEYS+="${EXACT_KEYS:+ }${token%%=*}"; fi
done
readonly EXACT_KEYS

# value KEY LINE: print the value of KEY=value in a slurm.conf-style line.
value() {
  local key=$1 token tokens
  read -r -a tokens <<<"$2"
  for token in "${tokens[@]}"; do
    if [[ $token == "$key="* ]]; then
      printf '%s\n' "${token#*=}"
      return 0
    fi
  done
  return 1
}

fail() {
  printf 'check-slurmd-c: %s\n  configured: %s\n  slurmd -C:  %s\n' "$1" "$CONFIGURED" "$2" >&2
  exit 1
}

main() {
  local output found key want have
  if ! output=$(slurmd -C 2>&1); then
    fail "slurmd -C failed" "$output"
  fi
  found=${output%%$'\n'*}
  for key in $EXACT_KEYS; do
    want=$(value "$key" "$CONFIGURED")
    have=$(value "$key" "$found") || fail "slurmd -C does not report $key" "$found"
    [[ $have == "$want" ]] || fail "$key differs ($have found, $want configured)" "$found"
  done
  want=$(value RealMemory "$CONFIGURED")
  have=$(value RealMemory "$found") || fail "slurmd -C does not report RealMemory" "$found"
  [[ $have =~ ^[0-9]+$ ]] || fail "RealMemory is not a number" "$found"
  if ((have < want)); then
    fail "RealMemory ${have} MiB found is below the ${want} MiB configured" "$found"
  fi
  printf 'check-slurmd-c: ok\n  configured: %s\n  slurmd -C:  %s\n' "$CONFIGURED" "$found"
}

main "$@"
