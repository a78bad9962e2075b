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
#   extended and its later end published) is resumed while the new window is ahead;
# - the block ends the program publishes (BLOCK_ENDS_URI, model/block_ends.py) overwrite
#   the nodes' files: a running node never sees new Auto Scaling tags, so after an
#   extension (same reservation, later end) only the program knows the new end. It is
#   authoritative for every block it declares, even when earlier than a file (a new
#   block under an old name); when it cannot be read, the files stay (block_end_fetch).
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

# block_end_move RES CUR_START CUR_END START END NOW NODES: the margin or the end changed.
# A window that has not started moves. One that has started (the nodes are drained)
# and whose block was extended past it is deleted and made again at the new window:
# Slurm does not move the start of an active reservation, and keeping it would hold the
# nodes in maintenance for the old window. A started window that is still the right one
# but ends elsewhere (the end moved within the margin) only gets its end moved.
block_end_move() {
  local res=$1 cur_start=$2 cur_end=$3 t=$4 end=$5 now=$6 want=$7 out
  local window
  window="$(block_end_iso "$t") .. $(block_end_iso "$end")"
  if ((cur_start == t && cur_end == end)); then return 0; fi
  if ((now < cur_start)); then
    if out=$(_be_slurm scontrol update ReservationName="$res" StartTime="$(block_end_slurm_time "$t")" \
      EndTime="$(block_end_slurm_time "$end")" 2>&1); then
      echo "reservation $res: window moved to $window"
    else
      echo "could not move reservation $res to $window: $out"
    fi
  elif ((t > now)); then
    if ! out=$(_be_slurm scontrol delete ReservationName="$res" 2>&1); then
      echo "could not delete reservation $res to move it to $window: $out"
    elif ! out=$(_be_slurm scontrol create reservation ReservationName="$res" \
      StartTime="$(block_end_slurm_time "$t")" EndTime="$(block_end_slurm_time "$end")" \
      Users=root Flags=MAINT,IGNORE_JOBS Nodes="$want" 2>&1); then
      echo "deleted reservation $res but could not create it again at $window: $out"
    else
      echo "reservation $res: started window replaced by $window (the block's end moved to $(block_end_iso "$end"))"
    fi
  elif ((cur_end != end)); then
    if out=$(_be_slurm scontrol update ReservationName="$res" EndTime="$(block_end_slurm_time "$end")" 2>&1); then
      echo "reservation $res: end moved to $(block_end_iso "$end")"
    else
      echo "could not move the end of reservation $res to $(block_end_iso "$end"): $out"
    fi
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
    cur_start=$(date -d "$(block_end_field "$info" StartTime)" +%s 2>/dev/null) || cur_start=0
    cur_end=$(date -d "$(block_end_field "$info" EndTime)" +%s 2>/dev/null) || cur_end=0
    block_end_move "$res" "$cur_start" "$cur_end" "$t" "$end" "$now" "$want"
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

# --- the program's published block ends (controller, agent loop) -------------------------

BLOCK_ENDS_MAX_BYTES=65536 # the document is a few hundred bytes per block
BLOCK_ENDS_CLI_FALLBACKS=(/usr/local/bin/aws /snap/bin/aws) # as bin/gpu-cluster-fetch

# block_end_download URI DEST: s3://bucket/key with the AWS CLI and the instance role
# (as bin/gpu-cluster-fetch reads the payload), or file:///path (local cluster, tests).
block_end_download() {
  local cli f
  case $1 in
    s3://*)
      cli=$(command -v aws) || cli=""
      for f in "${BLOCK_ENDS_CLI_FALLBACKS[@]}"; do
        if [[ -z $cli && -x $f ]]; then cli=$f; fi
      done
      [[ -n $cli ]] || { echo "the AWS CLI (aws) is not installed"; return 1; }
      timeout 60 "$cli" s3 cp --only-show-errors ${BLOCK_ENDS_REGION:+--region "$BLOCK_ENDS_REGION"} "$1" "$2" 2>&1
      ;;
    file://*) cp "${1#file://}" "$2" 2>&1 ;;
    *) echo "not an s3:// or file:// URI" && return 1 ;;
  esac
}

# block_end_parse FILE CLUSTER: "block reservation_id end" per block of the document, or
# fail with one line saying why. Every field is checked here, so nothing a bad document
# holds ever reaches a file name, scontrol or the log unquoted.
block_end_parse() {
  python3 - "$1" "$2" "$BLOCK_ENDS_MAX_BYTES" <<'PY'
import json, re, sys
path, cluster, limit = sys.argv[1], sys.argv[2], int(sys.argv[3])
def bad(why):
    print(why)
    sys.exit(1)
raw = open(path, "rb").read(limit + 1)
if len(raw) > limit:
    bad(f"larger than {limit} bytes")
try:
    doc = json.loads(raw.decode("utf-8"))
except ValueError as err:
    bad(f"not JSON ({err})")
if not isinstance(doc, dict) or doc.get("format") != 1:
    bad("not format 1 of the block ends (a newer program? update the node files)")
if doc.get("cluster") != cluster:
    bad(f"for cluster {doc.get('cluster')!r}, not {cluster!r}")
blocks = doc.get("blocks")
if not isinstance(blocks, dict):
    bad("has no blocks mapping")
end = re.compile(r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z$")
for name, b in sorted(blocks.items()):
    if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_-]{0,31}", name) or not isinstance(b, dict):
        bad(f"block name {name[:40]!r} is not a block name")
    rid, when = b.get("reservation_id"), b.get("end")
    if not isinstance(rid, str) or not re.fullmatch(r"cr-[0-9a-f]{8,17}", rid):
        bad(f"block {name}: reservation_id {str(rid)[:40]!r} is not a cr- id")
    if not isinstance(when, str) or not end.match(when):
        bad(f"block {name}: end {str(when)[:40]!r} is not a UTC time like 2026-12-08T11:30:00Z")
for name, b in sorted(blocks.items()):
    print(name, b["reservation_id"], b["end"])
PY
}

# block_end_fetch_state KIND MESSAGE: say MESSAGE when the fetch's state (ok, or the kind
# of failure) changed since the last tick: a bucket that cannot be read for a day is
# one warning, not one every 5 minutes.
BLOCK_ENDS_STATE=""
block_end_fetch_state() {
  [[ $1 != "$BLOCK_ENDS_STATE" ]] || return 0
  BLOCK_ENDS_STATE=$1
  if [[ $1 == ok ]]; then log "$2"; else warn "$2"; fi
}

# block_end_fetch: at most every BLOCK_ENDS_INTERVAL s, read BLOCK_ENDS_URI and write
# FSX_ROOT/blocks/<block>.end for each block in it whose file says otherwise (logged).
# Runs in the agent loop's shell (not a subshell): its state lives across ticks.
BLOCK_ENDS_LAST=-86400
block_end_fetch() {
  local uri=${BLOCK_ENDS_URI:-} tmp out dir="$FSX_ROOT/blocks" block rid iso f cur
  [[ -n $uri ]] || return 0
  ((SECONDS - BLOCK_ENDS_LAST >= ${BLOCK_ENDS_INTERVAL:-300})) || return 0
  BLOCK_ENDS_LAST=$SECONDS
  tmp=$(mktemp)
  if ! out=$(block_end_download "$uri" "$tmp"); then
    rm -f "$tmp"
    block_end_fetch_state unreadable "cannot read the published block ends $uri: ${out//$'\n'/ }; the block ends the nodes published stay in force"
    return 0
  fi
  if ! out=$(block_end_parse "$tmp" "${CLUSTER_NAME:-}"); then
    rm -f "$tmp"
    block_end_fetch_state invalid "ignoring the published block ends $uri: ${out//$'\n'/ }; the block ends the nodes published stay in force"
    return 0
  fi
  rm -f "$tmp"
  block_end_fetch_state ok "reading the published block ends from $uri ($(grep -c . <<<"$out" || true) block(s))"
  # A write that fails (FSx gone read-only) is said and retried at the next fetch; it
  # must never stop the agent loop (strict mode).
  if ! mkdir -p "$dir" 2>/dev/null; then
    warn "cannot create $dir for the published block ends; retrying in ${BLOCK_ENDS_INTERVAL:-300} s"
    return 0
  fi
  while read -r block rid iso; do
    [[ -n $block ]] || continue
    f="$dir/$block.end"
    cur=$(head -c 100 "$f" 2>/dev/null | head -n 1) || cur=""
    [[ $cur != "$iso" ]] || continue
    if ! printf '%s\n' "$iso" | atomic_write "$f" 0644 2>/dev/null; then
      warn "cannot write $f (capacity block $block ends $iso); retrying in ${BLOCK_ENDS_INTERVAL:-300} s"
      continue
    fi
    log "capacity block $block ($rid) ends $iso, not ${cur:-(unpublished)}: from $uri, written to $f"
  done <<<"$out"
  return 0
}

# block_end_tick: the agent loop's hook (controller only, slurmctld running here):
# at most once a minute, logs what it did.
BLOCK_END_LAST=-3600
block_end_tick() {
  local line margin said
  ((SECONDS - BLOCK_END_LAST >= ${BLOCK_END_INTERVAL:-60})) || return 0
  BLOCK_END_LAST=$SECONDS
  block_end_fetch
  [[ -d $FSX_ROOT/blocks ]] || return 0
  said=$(block_end_margin "${BLOCK_END_MARGIN_MINUTES:-}" 2>&1 >/dev/null)
  margin=$(block_end_margin "${BLOCK_END_MARGIN_MINUTES:-}" 2>/dev/null)
  if [[ -n $said ]]; then warn "$said"; fi
  while IFS= read -r line; do log "$line"; done < <(block_end_pass "$FSX_ROOT/blocks" "$margin")
}
