# shellcheck shell=bash
# Deep DCGM runs on idle nodes: their turn in the controller's agent loop
# (lib/munge-responder.sh). Sourced, never run. The pass itself is nodeside/dcgm_idle.py
# (docs/health.md, "Deep diagnostics"): it reserves an idle node for DCGM_IDLE_TIME_LIMIT_MINUTES,
# runs `dcgmi diag -r DCGM_IDLE_LEVEL` there as a batch job, drains a failing node with
# `gpu-cluster dcgm: ...`, and yields to jobs that wait for nodes. Level 0: not at all.
# Stdlib Python only: it runs with the system python3.
# Prerequisites: common.sh (log), Slurm clients talking to slurmctld.

DCGM_LAST=-86400

# dcgm_tick: at most every DCGM_IDLE_INTERVAL s (default 60), one bounded pass; its lines
# go to the agent loop's log. DCGM_IDLE_NOW (tests) hands the pass its clock.
dcgm_tick() {
  local line
  [[ ${DCGM_IDLE_LEVEL:-0} == [23] ]] || return 0
  ((SECONDS - DCGM_LAST >= ${DCGM_IDLE_INTERVAL:-60})) || return 0
  DCGM_LAST=$SECONDS
  while IFS= read -r line; do log "$line"; done < <(
    timeout "${DCGM_IDLE_TIMEOUT:-120}" python3 "$DCGM_IDLE_PROGRAM" tick \
      ${DCGM_IDLE_NOW:+--now "$DCGM_IDLE_NOW"} 2>&1 || echo "dcgm: the pass ended with exit $?"
  )
}
