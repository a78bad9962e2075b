# shellcheck shell=bash
# The join gate: nodes that register into a running cluster (a new block's nodes, a
# replacement from the Auto Scaling group) take no job before a bounded validation
# run passes on them. Sourced, never run.
# Why: the first-boot gate (steps/95-handoff.sh) runs once per cluster; without this a
# newcomer takes jobs as soon as its slurmd registers.
# How, without a window in which a job can land on a newcomer:
#   - once the controller has handed the cluster to its first-boot gate it writes
#     JOIN_OPEN (join_gate_open, step 95); a node whose first step 50 finds it
#     registers with State=DRAIN in its `slurmd -Z --conf` line (join_state_arg), so it
#     exists in slurmctld drained from its first moment (measured on Slurm 22.05:
#     the state applies when the dynamic node is created and is ignored when an
#     existing node's slurmd restarts) [SLURM-DYN];
#   - the controller's agent loop (lib/munge-responder.sh -> join_gate_tick) names the
#     drain, batches newcomers that arrive together (no new one for JOIN_SETTLE s),
#     reserves them and one healthy in-service partner for root, resumes them (the
#     reservation keeps user jobs off), and submits the same first-boot.sbatch/gate.sh
#     with VALIDATION_NEWCOMERS/VALIDATION_PARTNER: single-node checks and each
#     newcomer paired with the partner (validation_report.py join_pairs), bounded by
#     VALIDATION_JOIN_TIMEOUT_MINUTES from submission;
#   - when the job ends (or the bound passes: the job is cancelled) a newcomer that did
#     not pass is drained with "gpu-cluster join gate: <check> ...; log <path>", then
#     the reservation goes and the passed ones take jobs;
#   - a run whose nodes are gone ends at the next tick instead of at its bound
#     (join_gone, join_gate_abandon): its job cannot finish, and its reservation keeps
#     the reaper from deleting the gone node (slurmctld refuses to delete a reserved
#     node: "Requested nodes are busy", measured on 22.05; the same check is in 23.11's
#     node_mgr.c) and keeps every later newcomer waiting. The job is cancelled, the
#     reservation removed, the outcome written to the history; newcomers still there
#     go back to pending and the next tick starts a new run for them.
# With validation disabled the agent resumes newcomers without a gate (logged).
# Records: the run's report under FSX_ROOT/validation/<run>/ (latest-join names it),
# the current run in JOIN_DIR/run.env, one line per outcome in JOIN_DIR/history.
# Prerequisites: Slurm clients as root with the cluster's munge key; python3; common.sh.

# Every drain reason that means "not gated yet" starts with JOIN_PENDING_PREFIX: the tick
# takes such a drained node as a newcomer, and the reaper (lib/node-reaper.sh) may delete
# it once it stops answering (it never passed, so its entry records nothing to keep).
JOIN_PENDING_PREFIX="gpu-cluster join gate: pending"
JOIN_PENDING_REASON="$JOIN_PENDING_PREFIX (registered into a running cluster)"
JOIN_FAIL_PREFIX="gpu-cluster join gate: "

join_dir() { printf '%s\n' "$FSX_ROOT/validation/join"; }
join_now() { printf '%s\n' "${JOIN_GATE_NOW:-$(date +%s)}"; } # tests pass the clock

# join_gate_open: from now on a node that registers for the first time is a newcomer.
join_gate_open() {
  install -d -m 0700 "$(join_dir)"
  [[ -e "$(join_dir)/open" ]] || { date -u +%FT%TZ >"$(join_dir)/open"; log "join gate open: nodes that register from now on are drained until they pass it"; }
}

# join_state_arg: " State=DRAIN" when this node joins a running cluster, decided at
# its first step 50 and kept (the same line on every later run: no needless restart).
join_state_arg() {
  local mark="$GPU_CLUSTER_STATE/join-drained"
  if [[ ! -e $mark && ! -e $GPU_CLUSTER_STATE/join-first-boot ]]; then
    if [[ -e "$(join_dir)/open" ]]; then : >"$mark"; else : >"$GPU_CLUSTER_STATE/join-first-boot"; fi
  fi
  if [[ -e $mark ]]; then printf ' State=DRAIN\n'; fi
}

# join_newcomers: "node reason" of drained nodes (none running a job, answering: a
# node that stopped answering shows drained*) whose drain is the registration's (no
# reason: scontrol cannot drain without one) or a pending one of ours.
join_newcomers() {
  sinfo -h -N -o '%N|%T|%E' 2>/dev/null | sort -u | while IFS='|' read -r node state reason; do
    [[ $state == drained ]] || continue
    [[ $reason == none || $reason == "$JOIN_PENDING_PREFIX"* ]] && printf '%s %s\n' "$node" "$reason"
  done
}

# join_gone NODES(a,b): "node why" for each of NODES that is gone, as slurmctld sees it:
#   - not listed: deleted (`scontrol delete`, e.g. by the reaper once nothing reserves it);
#   - base state DOWN: slurmd has not answered for SlurmdTimeout (300 s in our
#     slurm.conf), which is how a terminated, stopped or crashed instance shows
#     [SLURM-DYN], or an operator set it down. A node that merely missed a ping
#     (NOT_RESPONDING on a live base state) is not gone yet: a loaded node answers again.
# Prints nothing when slurmctld cannot be asked: a run is never ended on a guess.
join_gone() {
  local listing node line state reason
  listing=$(scontrol -o show node 2>/dev/null) || return 0
  for node in ${1//,/ }; do
    line=$(grep -m 1 -F "NodeName=$node " <<<"$listing") || line=""
    if [[ -z $line ]]; then
      printf '%s removed from Slurm\n' "$node"
      continue
    fi
    state=${line##* State=}
    state=${state%% *}
    [[ $state == DOWN* ]] || continue
    reason=""
    [[ $line == *" Reason="* ]] && reason=${line##* Reason=}
    reason=${reason% \[*}
    printf '%s down: %s\n' "$node" "${reason:-no reason}"
  done
}

# join_gone_why NODE GONE: NODE's "why" in join_gone's lines, or nothing.
join_gone_why() { awk -v n="$1" '$1 == n { sub(/^[^ ]+ /, ""); print; exit }' <<<"$2"; }

# join_partner NEWCOMERS: one healthy node in service, idle first, else busy (the job
# waits for it within the bound); empty when every node is new.
join_partner() {
  local node state best=""
  while IFS='|' read -r node state; do
    [[ ",$1," == *",$node,"* ]] && continue
    if [[ $state == idle ]]; then printf '%s\n' "$node"; return 0; fi
    [[ -z $best && ($state == mixed || $state == allocated) ]] && best=$node
  done < <(sinfo -h -N -p "$SLURM_PARTITION" -o '%N|%T' 2>/dev/null | sort -u)
  [[ -z $best ]] || printf '%s\n' "$best"
}

join_history() { printf '%s %s\n' "$(date -u +%FT%TZ)" "$*" >>"$(join_dir)/history"; log "$*"; }

join_drain() { scontrol update nodename="$1" state=drain reason="${2:0:250}" >/dev/null 2>&1; }

# join_gate_start NEWCOMERS(a,b): reserve, resume, submit; records run.env.
join_gate_start() {
  local newcomers=$1 partner nodes now resv job n limit=$VALIDATION_JOIN_TIMEOUT_MINUTES
  partner=$(join_partner "$newcomers")
  nodes=$newcomers${partner:+,$partner}
  now=$(join_now)
  resv="gpu-cluster-join-$now"
  # IGNORE_JOBS: a busy partner keeps its job; no new user job starts on these nodes
  if ! scontrol create reservation reservationname="$resv" nodes="$nodes" users=root starttime=now \
    duration="$limit" flags=ignore_jobs >/dev/null 2>&1; then
    log "join gate: could not reserve $nodes (scontrol create reservation); will try again"
    return 0
  fi
  for n in ${newcomers//,/ }; do scontrol update nodename="$n" state=resume >/dev/null 2>&1 || true; done
  # Newcomers in topology.conf first: Slurm refuses a job naming a node under no switch.
  if declare -F topology_current >/dev/null; then topology_current; fi
  # The values travel in sbatch's own environment (--export=ALL), not as --export=NAME=value:
  # sbatch splits that list at commas, so "a,b" would hand the job newcomers "a" alone.
  # --no-requeue: with JobRequeue=1 a lost node would requeue the job to wait for it.
  if ! job=$(cd "$FSX_ROOT/validation" && VALIDATION_NEWCOMERS=$newcomers VALIDATION_PARTNER=$partner \
    VALIDATION_TIME_LIMIT_MINUTES=$limit sbatch --parsable --no-requeue --reservation="$resv" -w "$nodes" \
    -N "$(tr ',' '\n' <<<"$nodes" | grep -c .)" --time="$limit" --job-name=gpu-cluster-join-gate \
    --export=ALL "$VALIDATION_JOB" 2>&1); then
    for n in ${newcomers//,/ }; do join_drain "$n" "${JOIN_FAIL_PREFIX}sbatch failed: $job"; done
    scontrol delete reservationname="$resv" >/dev/null 2>&1 || true
    join_history "join gate: sbatch $VALIDATION_JOB failed for $newcomers: $job"
    return 0
  fi
  job=${job%%;*}
  printf "JOIN_JOB='%s'\nJOIN_NEWCOMERS='%s'\nJOIN_PARTNER='%s'\nJOIN_RESV='%s'\nJOIN_DEADLINE='%s'\n" \
    "$job" "$newcomers" "$partner" "$resv" "$((now + limit * 60))" | atomic_write "$(join_dir)/run.env" 0600
  join_history "join gate: job $job on newcomer(s) $newcomers against ${partner:-no partner (every node is new)}, bound ${limit} min, reservation $resv"
}

# join_report: the current run's report.json, or nothing yet. The run directory is
# <run id>-<job id>; the glob sorts as ls would, the last one wins.
join_report() {
  local reports=("$FSX_ROOT/validation/"*"-$JOIN_JOB/report.json")
  if [[ -e ${reports[-1]} ]]; then printf '%s\n' "${reports[-1]}"; fi
}

# join_gate_finish: the job left the queue (or was cancelled at the bound): drain every
# newcomer that did not pass, then release the reservation.
join_gate_finish() {
  local fallback=$1 report node outcome
  # shellcheck source=/dev/null
  . "$(join_dir)/run.env"
  report=$(join_report)
  while read -r node outcome; do
    if [[ $outcome == GO ]]; then
      join_history "join gate: $node passed (job $JOIN_JOB); it takes jobs"
    else
      join_drain "$node" "$JOIN_FAIL_PREFIX$outcome"
      join_history "join gate: $node stays drained: $outcome"
    fi
  done < <(python3 "$GPU_CLUSTER_HOME/lib/validation_report.py" --config "$GPU_CLUSTER_HOME/validation/config.json" \
    joined --report "${report:-none}" --newcomers "$JOIN_NEWCOMERS" --fallback "$fallback")
  scontrol delete reservationname="$JOIN_RESV" >/dev/null 2>&1 || true
  rm -f "$(join_dir)/run.env"
}

# join_gate_abandon GONE: end the current run because nodes of it are gone ("node why"
# lines from join_gone). Every newcomer is drained first (no moment unreserved and
# undrained): a gone one with a pending reason, so that if it answers again it comes
# back drained (ReturnToService=2 keeps the DRAIN flag) and is gated, and the reaper may
# delete it if it never does; one still there waits for a new run. Then the job is
# cancelled and the reservation removed.
join_gate_abandon() {
  local gone=$1 node why names
  names=$(cut -d ' ' -f 1 <<<"$gone" | paste -sd, -)
  for node in ${JOIN_NEWCOMERS//,/ }; do
    why=$(join_gone_why "$node" "$gone")
    if [[ -z $why ]]; then
      join_drain "$node" "$JOIN_PENDING_PREFIX (its join run ended: $names gone)"
      join_history "join gate: $node waits for a new run (run $JOIN_RESV ended: $names gone)"
    elif [[ $why == removed* ]]; then
      join_history "join gate: $node is gone ($why); run $JOIN_RESV ended, job $JOIN_JOB cancelled"
    else
      join_drain "$node" "$JOIN_PENDING_PREFIX (down during its join run: ${why#down: })"
      join_history "join gate: $node is gone ($why); run $JOIN_RESV ended, job $JOIN_JOB cancelled; drained, so it is gated again if it answers"
    fi
  done
  why=$(join_gone_why "$JOIN_PARTNER" "$gone")
  if [[ -n $JOIN_PARTNER && -n $why ]]; then
    join_history "join gate: partner $JOIN_PARTNER is gone ($why); run $JOIN_RESV ended, job $JOIN_JOB cancelled"
  fi
  scancel "$JOIN_JOB" >/dev/null 2>&1 || true
  scontrol delete reservationname="$JOIN_RESV" >/dev/null 2>&1 || true
  rm -f "$(join_dir)/run.env"
}

# join_gate_follow: the current run; the bound is from submission. Nodes gone end it
# while its job is queued or left no report (a finished job's report still counts).
join_gate_follow() {
  local state out gone
  # shellcheck source=/dev/null
  . "$(join_dir)/run.env"
  out="$FSX_ROOT/validation/slurm-$JOIN_JOB.out"
  # An ended job lists nothing, or once purged (MinJobAge) is an invalid id; any other
  # failure is slurmctld not answering: the run stays as it is until the next tick.
  if ! state=$(squeue -h -j "$JOIN_JOB" -o %T 2>&1); then
    [[ $state == *"Invalid job id"* ]] || return 0
    state=""
  fi
  gone=$(join_gone "$JOIN_NEWCOMERS${JOIN_PARTNER:+,$JOIN_PARTNER}")
  if [[ -n $gone && (-n $state || -z $(join_report)) ]]; then
    join_gate_abandon "$gone"
  elif [[ -z $state ]]; then
    join_gate_finish "job $JOIN_JOB ended without a report; log $out"
  elif (($(join_now) > JOIN_DEADLINE)); then
    scancel "$JOIN_JOB" >/dev/null 2>&1 || true
    join_gate_finish "timed out after ${VALIDATION_JOIN_TIMEOUT_MINUTES} min (job $JOIN_JOB $state); log $out"
  fi
}

# join_gate_tick: one turn of the controller's agent loop.
JOIN_LAST=-3600
join_gate_tick() {
  local now list="" node reason pending
  ((SECONDS - JOIN_LAST >= ${JOIN_GATE_INTERVAL:-30})) || return 0
  JOIN_LAST=$SECONDS
  [[ -e "$(join_dir)/open" ]] || return 0 # first boot: the cluster's full gate
  if [[ -s "$(join_dir)/run.env" ]]; then join_gate_follow; return 0; fi
  while read -r node reason; do
    list=${list:+$list,}$node
    if [[ $VALIDATION_ENABLED != 1 ]]; then
      scontrol update nodename="$node" state=resume >/dev/null 2>&1 &&
        join_history "join gate: validation is disabled in the stack config; resumed $node without a gate"
    elif [[ $reason == none ]]; then
      join_drain "$node" "$JOIN_PENDING_REASON"
    fi
  done < <(join_newcomers)
  pending="$(join_dir)/pending"
  if [[ -z $list || $VALIDATION_ENABLED != 1 ]]; then rm -f "$pending"; return 0; fi
  now=$(join_now)
  if [[ $(head -n 1 "$pending" 2>/dev/null) != "$list" ]]; then
    printf '%s\n%s\n' "$list" "$now" >"$pending"
    log "join gate: newcomer(s) $list drained; the run starts once none arrives for ${JOIN_SETTLE:-60}s"
    return 0
  fi
  ((now - $(sed -n 2p "$pending") >= ${JOIN_SETTLE:-60})) || return 0
  rm -f "$pending"
  join_gate_start "$list"
}
