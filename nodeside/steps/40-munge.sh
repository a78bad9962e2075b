#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR/..
# Step 40: munge. One key for the whole cluster, never in the user data, Pulumi or
# plaintext on /fsx (every node needs the same key, readable only by munge [MUNGE];
# issue 3):
# - the controller of a new cluster generates it once with mungekey and publishes
#   only its sha256 fingerprint (FSX_ROOT/munge/key.sha256);
# - every other node, and a replacement controller, joins: publishes a one-time
#   certificate and waits (bounded) for the key encrypted to it (lib/munge-join.sh);
# - every node holding the key then runs the responder, so replacements can join
#   even after the controller is gone;
# - whole-cluster relaunch against a kept /fsx (every instance replaced at once, e.g.
#   the next Capacity Block): key.sha256 is there but no live node holds the key. The
#   controller waits MUNGE_KEY_RECOVERY_WAIT for an answer, then makes a new key,
#   generation N+1 (FSX_ROOT/munge/key.generation), publishes its fingerprint and its
#   responder answers the workers waiting meanwhile. A node still holding an older key
#   (it was only cut off from /fsx) sees the fingerprint change and rejoins
#   (lib/munge-responder.sh follow_key). docs/node-contract.md: what happens to jobs.
# Ends with munged (re)started on the cluster's key and `munge -n | unmunge` reporting
# Success.
# Prerequisites: steps 10 (identity), 20 (munge, openssl), 30 (/fsx).
set -euo pipefail
# shellcheck source=lib/common.sh
. "${GPU_CLUSTER_HOME:-/opt/gpu-cluster}/lib/common.sh"
# shellcheck source=lib/munge-join.sh
. "$GPU_CLUSTER_HOME/lib/munge-join.sh"

M="$FSX_ROOT/munge"
# 180 s: worker responders answer requests older than MUNGE_WORKER_MIN_AGE (90 s),
# polling every MUNGE_WORKER_INTERVAL (30 s), so a live holder answers within 120 s;
# 60 s more for a slow /fsx. Longer only delays a whole-cluster relaunch.
: "${MUNGE_KEY_RECOVERY_WAIT:=180}"

# generate_key GENERATION: a new key here; its generation, then its fingerprint, on /fsx
# (the fingerprint last: it is what responders and joiners compare against).
generate_key() {
  install -d -o munge -g munge -m 0700 "${MUNGE_KEY%/*}"
  mungekey --create --force --keyfile="$MUNGE_KEY"
  chown munge:munge "$MUNGE_KEY"
  chmod 0400 "$MUNGE_KEY"
  printf '%s\n' "$1" | atomic_write "$M/key.generation" 0600
  key_fingerprint "$MUNGE_KEY" | atomic_write "$M/key.sha256" 0600
}

# generation: of the published key (1 for a cluster made before generations existed).
generation() {
  local g
  g=$(cat "$M/key.generation" 2>/dev/null || true)
  [[ $g =~ ^[1-9][0-9]*$ ]] && echo "$g" || echo 1
}

request() { mj_request "$GPU_CLUSTER_STATE/munge-join" "$M/requests" "$INSTANCE_ID"; }

# try_collect: true once the key received matches the published fingerprint. A key
# that does not (answered by a node still on the previous generation just before
# the rotation) is discarded and asked for again.
try_collect() {
  mj_collect "$GPU_CLUSTER_STATE/munge-join" "$M/requests" "$M/responses" "$INSTANCE_ID" "$MUNGE_KEY" munge:munge ||
    return 1
  [[ $(key_fingerprint "$MUNGE_KEY") == "$(cat "$M/key.sha256" 2>/dev/null)" ]] && return 0
  log "the key received does not match $M/key.sha256 (it changed meanwhile); asking again"
  request
  return 1
}

join_cluster() {
  local what="the munge key encrypted to this node ($M/responses/$INSTANCE_ID.cms) from a node that holds it"
  log "requesting the cluster's munge key through $M/requests/$INSTANCE_ID.pem"
  request
  if ! is_controller; then
    GC_WAIT_INTERVAL=2 wait_for "$MUNGE_JOIN_TIMEOUT" "$what" try_collect
    return 0
  fi
  # Live holders answer within MUNGE_WORKER_MIN_AGE + MUNGE_WORKER_INTERVAL; the
  # recovery bound is larger, so a controller replaced alone never rotates the key.
  if GC_WAIT_INTERVAL=2 wait_until "$MUNGE_KEY_RECOVERY_WAIT" "$what" try_collect; then return 0; fi
  rm -f "$M/requests/$INSTANCE_ID.pem"
  if try_collect; then return 0; fi # answered in the very last moment
  rotate_key
}

# rotate_key: no live node holds the key (every instance was replaced at once): make
# generation N+1. Jobs cannot have survived the relaunch; a node only cut off from
# /fsx rejoins when it sees the new fingerprint (its running jobs are lost, as when a
# node fails: slurmctld no longer accepts its old-key credentials).
rotate_key() {
  local next
  next=$(($(generation) + 1))
  log "no node holding the cluster's munge key answered within ${MUNGE_KEY_RECOVERY_WAIT}s: making a new key (generation $next)"
  generate_key "$next"
  rm -f "$M/requests/$INSTANCE_ID.pem" "$M/responses/$INSTANCE_ID.cms"
  rm -rf "$GPU_CLUSTER_STATE/munge-join"
}

munge_works() { munge -n 2>/dev/null | unmunge 2>/dev/null | grep -q 'STATUS: *Success'; }

munged_pid() {
  if [[ $GPU_CLUSTER_SERVICE_MANAGER == direct ]]; then direct_pid munge || true
  else systemctl show -p MainPID --value munge; fi
}

main() {
  local before after stamp
  load_identity
  fsx_root_ready || die "$FSX_ROOT is not available (step 30)"
  before=$(key_fingerprint "$MUNGE_KEY")
  if [[ -s $M/key.sha256 && $before == "$(<"$M/key.sha256")" ]]; then
    log "munge key already installed (matches the cluster fingerprint)"
  elif is_controller && [[ ! -s $M/key.sha256 ]]; then
    log "generating the cluster's munge key (new cluster: no $M/key.sha256 yet)"
    generate_key 1
  else
    # A worker waits for the controller's fingerprint before asking: the controller of
    # a new cluster may boot after it.
    wait_for "$MUNGE_JOIN_TIMEOUT" "the controller to create the munge key ($M/key.sha256)" test -s "$M/key.sha256"
    join_cluster
  fi
  after=$(key_fingerprint "$MUNGE_KEY")
  [[ $(stat -c '%U %a' "$MUNGE_KEY") == "munge 400" ]] || die "$MUNGE_KEY must be owned by munge with mode 0400"
  # munged holds its key in memory, and `munge -n | unmunge` on one node succeeds with
  # any key. So remember which key and which munged we started; restart it unless that
  # very process is running with the cluster's key.
  stamp="$GPU_CLUSTER_RUN/munged.key"
  if [[ $before != "$after" ]] || ! svc active munge || [[ $(cat "$stamp" 2>/dev/null) != "$after $(munged_pid)" ]]; then
    log "restarting munged so that it runs with the cluster's key"
    svc restart munge
  fi
  wait_for 60 "munged to answer (munge -n | unmunge shows Success)" munge_works
  printf '%s %s\n' "$after" "$(munged_pid)" >"$stamp"
  svc_reload
  svc start gpu-cluster-munge-responder
  log "munge ok: $(munge -n | unmunge | grep STATUS)"
}

main "$@"
