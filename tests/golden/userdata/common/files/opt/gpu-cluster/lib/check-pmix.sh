#!/usr/bin/env bash
# Runs a real two-task PMIx step: `srun --mpi=pmix -n2 [ARGS...] true`. srun loads Slurm's
# mpi/pmix plugin, which loads the PMIx library (libpmix.so), and slurmstepd starts the
# PMIx server for the tasks. `srun --mpi=list` only lists the plugin files, so a missing
# library shows only in a run like this one; Slurm then says "can not load PMIx library".
# Prerequisites: srun on PATH, a slurmctld that can start the step within CHECK_PMIX_TIMEOUT
# seconds (default 120). Exit 0 when the step ran; otherwise print one line with the exit
# status and Slurm's own error lines, and exit 1.
set -euo pipefail

out=$(timeout --kill-after=10 "${CHECK_PMIX_TIMEOUT:-120}" srun --mpi=pmix -n2 "$@" true 2>&1) && exit 0
rc=$?
errors=$(grep -i 'error' <<<"$out" | paste -sd';' - || true)
((rc != 124)) || errors="timed out after ${CHECK_PMIX_TIMEOUT:-120}s${errors:+; $errors}"
printf 'srun --mpi=pmix -n2 %strue exited %s: %s\n' "${*:+$* }" "$rc" "${errors:-${out//$'\n'/; }}"
exit 1
