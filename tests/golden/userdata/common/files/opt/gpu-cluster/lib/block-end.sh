# shellcheck shell=bash
# Capacity Block end: no job may run across it. Sourced, never run.
# Why: EC2 starts terminating a Capacity Block's instances 30 minutes before the
# block's end time [CB-USE]; a job still running then is killed without warning. So:
# - every node of a block publishes the block's end (GpuClusterBlockEnd tag, read by
#   step 10) as FSX_ROOT/blocks/<block>.end (step 50, block_end_publish);
# - the controller's agent loop (lib/munge-responder.sh, block_end_tick) keeps one
#   Slurm maintenance reservation per block, `block-<block>-end`, on every node with
#   the feature block-<block>, from (end - BLOCK_END_MARGIN_MINUTES) to the end. The
#   scheduler never starts a job whose time limit reaches into a reservation it is not
#   part of, so a job that would cross the end waits (or runs on other blocks' nodes);
#   a job without a time limit (partition MaxTime=INFINITE) never starts on block nodes;
# - from the reservation's start on, it drains those nodes with a reason naming the
#   block end, so sinfo says why they take no work and why they will disappear;
# - after the end, the block's nodes that no longer respond (EC2 terminated them) are
#   deleted: Slurm keeps our drain reason on a silent node, so the stale node reaper
#   (which only takes "Not responding") would leave them listed for ever;
# - a node we drained for an earlier end of the block that still responds (the block was
#   extended and its later end published) is resumed while the new window is ahead.
# Flags [SLURM-RESV]: MAINT (may overlap other reservations, accounted as maintenance)
# and IGNORE_JOBS (creating it must not fail because a running job would cross: that
# job is lost anyway). MAINT is also why users' own reservations on the block's nodes
# (MAINT windows or ordinary ones) never stop ours being created or moved; the pass
# only ever reads, creates or updates the reservation named block-<block>-end, never
# another one, so there is no kill/relaunch loop as in [PC-7465]
# (tests/daemons/test_block_end_user_reservations.py). Slurm adds SPEC_NODES by itself
# for an explicit node list (22.05 documents it as output only). Users=root: a reservation needs an owner, and nobody is
# meant to use it. A job held back shows "ReqNodeNotAvail, May be reserved for other
# job" in squeue (Slurm 22.05).
# Times handed to scontrol are local wall-clock times (scontrol reads them in the
# caller's time zone, and prints them the same way); the block end itself is UTC.
# Prerequisites: GNU date, Slurm clients (sinfo, scontrol) talking to slurmctld;
# common.sh (log, atomic_write) sourced before this file.

BLOCK_END_MARGIN_DEFAULT=40
# AWS: scale in "more than 30 minutes before the Capacity Block reservation end time"
# [ASG-CB]; at 30 the window starts as EC2's own terminations do. Same minimum as the
# program's capacity.block_end_margin_minutes (model/capacity.py).
BLOCK_END_MARGIN_MIN=31
BLOCK_END_EC2_LEAD=30   # minutes before the end at which EC2 terminates instances
BLOCK_END_TIMEOUT=${BLOCK_END_TIMEOUT:-30} # seconds, per Slurm client call

# block_end_epoch ISO: seconds since the epoch, for an ISO-8601 date-time with a zone
# (Z or +hh:mm), e.g. 2026-12-08T11:30:00Z. Fails on anything else, so a mistyped tag
# never becomes "now".
block_end_epoch() {
  [[ $1 =~ ^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}(:[0-9]{2})?(Z|[+-][0-9]{2}:?[0-9]{2})$ ]] || return 1
  date -u -d "$1" +%s 2>/dev/null
}

# block_end_iso EPOCH: 2026-12-08T11:30:00Z (the one spelling we publish and log).
block_end_iso() { date -u -d "@$1" +%Y-%m-%dT%H:%M:%SZ; }

# block_end_slurm_time EPOCH: the local wall-clock time scontrol expects.
block_end_slurm_time() { date -d "@$1" +%Y-%m-%dT%H:%M:%S; }

# block_end_margin [minutes]: the margin in minutes; default 40, never below 31.
# A bad value is reported on stderr and replaced, so the protection never turns off.
block_end_margin() {
  local m=${1:-$BLOCK_END_MARGIN_DEFAULT}
  if ! [[ $m =~ ^[0-9]+$ ]]; then
    echo "BLOCK_END_MARGIN_MINUTES='$m' is not a whole number of minutes; using $BLOCK_END_MARGIN_DEFAULT" >&2
    m=$BLOCK_END_MARGIN_DEFAULT
  elif ((10#$m < BLOCK_END_MARGIN_MIN)); then
    echo "BLOCK_END_MARGIN_MINUTES=$m is not more than EC2's $BLOCK_END_EC2_LEAD-minute termination lead (AWS asks for more than $BLOCK_END_EC2_LEAD); using $BLOCK_END_MARGIN_MIN" >&2
    m=$BLOCK_END_MARGIN_MIN
  fi
  printf '%d\n' "$((10#$m))"
}

# block_end_start END_EPOCH MARGIN_MINUTES: when the reservation starts.
block_end_start() { printf '%d\n' "$(($1 - $2 * 60))"; }

# block_end_reason BLOCK END_EPOCH: the drain reason.
block_end_reason() {
  printf 'capacity block %s ends %s (EC2 terminates at %s)\n' "$1" "$(block_end_iso "$2")" \
    "$(block_end_iso "$(($2 - BLOCK_END_EC2_LEAD * 60))")"
}

block_end_reservation() { printf 'block-%s-end\n' "$1"; }

# --- node side (step 50) ----------------------------------------------------------------

# block_end_publish: write FSX_ROOT/blocks/<NODE_BLOCK>.end when this node knows its
# block's end (NODE_BLOCK_END from identity.env). The later end wins: an extended block,
# or a new block under an old name, must not be cut short by an old node that reboots.
block_end_publish() {
  local dir="$FSX_ROOT/blocks" f published mine theirs
  [[ -n ${NODE_BLOCK_END:-} ]] || return 0
  f="$dir/$NODE_BLOCK.end"
  mine=$(block_end_epoch "$NODE_BLOCK_END") || die "NODE_BLOCK_END '$NODE_BLOCK_END' is not an ISO-8601 time (re-run step 10-identity)"
  published=$(head -c 100 "$f" 2>/dev/null | head -n 1) || published=""
  if theirs=$(block_end_epoch "$published"); then
    if ((theirs == mine)); then return 0; fi
    if ((theirs > mine)); then
      warn "$f says capacity block $NODE_BLOCK ends $published, later than this node's GpuClusterBlockEnd tag ($NODE_BLOCK_END); keeping it"
      return 0
    fi
  fi
  mkdir -p "$dir"
  printf '%s\n' "$NODE_BLOCK_END" | atomic_write "$f" 0644
  log "published the end of capacity block $NODE_BLOCK ($NODE_BLOCK_END) in $f"
}

# --- controller side (agent loop) --------------------------------------------------------

_be_slurm() { timeout "$BLOCK_END_TIMEOUT" "$@"; }

# block_end_nodes BLOCK: "name|state|reason" for each node with feature block-BLOCK.
block_end_nodes() {
  local name features state reason
  while IFS='|' read -r name features state reason; do
    if [[ -n $name && ,$features, == *",block-$1,"* ]]; then printf '%s|%s|%s\n' "$name" "$state" "$reason"; fi
  done < <(_be_slurm sinfo -h -N -o '%N|%f|%T|%E' 2>/dev/null | sort -u)
}

# block_end_field TEXT KEY: the value of KEY=value in one `scontrol -o show` line.
block_end_field() { grep -o "\(^\| \)$2=[^ ]*" <<<"$1" | head -n 1 | cut -d= -f2- || true; }

# block_end_reap BLOCK NOW ROWS: delete the nodes that do not respond (sinfo marks the
# state with `*`) and whose drain reason names an end of BLOCK that has passed. Keyed on
# the reason, not the block file: a later block under the same name must not keep the
# old one's dead nodes, and a live node is never deleted.
block_end_reap() {
  local block=$1 now=$2 n state r ended out
  local -a gone=()
  while IFS='|' read -r n state r; do
    [[ -n $n ]] || continue
    ended=""
    if [[ $r == "capacity block $block ends "* && $state == *'*' ]]; then
      ended=$(block_end_epoch "$(cut -d' ' -f5 <<<"$r")") || ended=""
    fi
    if [[ -n $ended ]] && ((ended <= now)); then gone+=("$n"); fi
  done <<<"$3"
  ((${#gone[@]})) || return 0
  if out=$(_be_slurm scontrol delete nodename="$(IFS=,; echo "${gone[*]}")" 2>&1); then
    echo "capacity block $block is over: deleted its terminated nodes ${gone[*]}"
  else
    echo "capacity block $block is over: could not delete its terminated nodes ${gone[*]}: $out"
  fi
}

# block_end_sync BLOCK END_EPOCH MARGIN_MINUTES NOW: one block; one line per action.
block_end_sync() {
  local block=$1 end=$2 margin=$3 now=$4 start res rows want have info t reason out
  local n r state cur_start cur_end
  local -a todrain=()
  start=$(block_end_start "$end" "$margin")
  res=$(block_end_reservation "$block")
  reason=$(block_end_reason "$block" "$end")
  block_end_reap "$block" "$now" "$(block_end_nodes "$block")"
  # Over: Slurm dropped the reservation at its EndTime, EC2 terminated the nodes.
  ((now < end)) || return 0
  rows=$(block_end_nodes "$block")
  [[ -n $rows ]] || return 0 # no node of this block registered (yet)
  want=$(cut -d'|' -f1 <<<"$rows" | sort -u | paste -sd,)
  info=$(_be_slurm scontrol -o show reservation "$res" 2>/dev/null) || info=""
  t=$start
  ((t > now)) || t=$now
  if [[ $info != *"ReservationName=$res "* ]]; then
    if ! out=$(_be_slurm scontrol create reservation ReservationName="$res" \
      StartTime="$(block_end_slurm_time "$t")" EndTime="$(block_end_slurm_time "$end")" \
      Users=root Flags=MAINT,IGNORE_JOBS Nodes="$want" 2>&1); then
      echo "could not create reservation $res on $want: $out"
      return 0
    fi
    echo "created reservation $res on $want from $(block_end_iso "$t") to $(block_end_iso "$end") (capacity block $block ends $(block_end_iso "$end"), margin $margin min)"
  else
    have=$(_be_slurm scontrol show hostnames "$(block_end_field "$info" Nodes)" 2>/dev/null | sort -u | paste -sd,) || have=""
    if [[ $have != "$want" ]]; then
      if out=$(_be_slurm scontrol update ReservationName="$res" Nodes="$want" 2>&1); then
        echo "reservation $res: nodes $have -> $want"
      else
        echo "could not update the nodes of reservation $res ($have -> $want): $out"
      fi
    fi
    # The margin or the end changed: move the window while it has not started yet.
    cur_start=$(date -d "$(block_end_field "$info" StartTime)" +%s 2>/dev/null) || cur_start=0
    cur_end=$(date -d "$(block_end_field "$info" EndTime)" +%s 2>/dev/null) || cur_end=0
    if ((now < cur_start && (cur_start != t || cur_end != end))); then
      if out=$(_be_slurm scontrol update ReservationName="$res" StartTime="$(block_end_slurm_time "$t")" \
        EndTime="$(block_end_slurm_time "$end")" 2>&1); then
        echo "reservation $res: window moved to $(block_end_iso "$t") .. $(block_end_iso "$end")"
      else
        echo "could not move reservation $res to $(block_end_iso "$t") .. $(block_end_iso "$end"): $out"
      fi
    fi
  fi
  if ((now < start)); then
    while IFS='|' read -r n state r; do
      if [[ $r == "capacity block $block ends "* && $r != "$reason" && $state != *'*' ]]; then todrain+=("$n"); fi
    done <<<"$rows"
    ((${#todrain[@]})) || return 0
    if out=$(_be_slurm scontrol update NodeName="$(IFS=,; echo "${todrain[*]}")" State=RESUME 2>&1); then
      echo "resumed ${todrain[*]}: capacity block $block now ends $(block_end_iso "$end")"
    else
      echo "could not resume ${todrain[*]} (capacity block $block now ends $(block_end_iso "$end")): $out"
    fi
    return 0
  fi
  while IFS='|' read -r n _ r; do
    if [[ $r != "$reason" ]]; then todrain+=("$n"); fi
  done <<<"$rows"
  ((${#todrain[@]})) || return 0
  if out=$(_be_slurm scontrol update NodeName="$(IFS=,; echo "${todrain[*]}")" State=DRAIN Reason="$reason" 2>&1); then
    echo "drained ${todrain[*]}: $reason"
  else
    echo "could not drain ${todrain[*]} ($reason): $out"
  fi
}

# block_end_pass DIR MARGIN_MINUTES: every DIR/<block>.end; one line per action.
block_end_pass() {
  local dir=$1 margin=$2 now f block iso end
  now=$(date +%s)
  for f in "$dir"/*.end; do
    [[ -f $f ]] || continue
    block=${f##*/}
    block=${block%.end}
    iso=$(head -c 100 "$f" | head -n 1)
    if ! [[ $block =~ ^[A-Za-z0-9_-]+$ ]] || ! end=$(block_end_epoch "$iso"); then
      echo "ignoring $f: '$iso' for block '$block' is not a block name and ISO-8601 end"
      continue
    fi
    block_end_sync "$block" "$end" "$margin" "$now"
  done
}

# block_end_tick: the agent loop's hook (controller only, slurmctld running here):
# at most once a minute, logs what it did.
BLOCK_END_LAST=-3600
block_end_tick() {
  local line margin said
  ((SECONDS - BLOCK_END_LAST >= ${BLOCK_END_INTERVAL:-60})) || return 0
  BLOCK_END_LAST=$SECONDS
  [[ -d $FSX_ROOT/blocks ]] || return 0
  said=$(block_end_margin "${BLOCK_END_MARGIN_MINUTES:-}" 2>&1 >/dev/null)
  margin=$(block_end_margin "${BLOCK_END_MARGIN_MINUTES:-}" 2>/dev/null)
  if [[ -n $said ]]; then warn "$said"; fi
  while IFS= read -r line; do log "$line"; done < <(block_end_pass "$FSX_ROOT/blocks" "$margin")
}
