#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR/..
# Step 40: munge. One key for the whole cluster, never in the user data, Pulumi or
# plaintext on /fsx (seed 000 Step 2, issue 3):
# - the controller of a new cluster generates it once with mungekey and publishes
#   only its sha256 fingerprint (FSX_ROOT/munge/key.sha256);
# - every other node, and a replacement controller, joins: publishes a one-time
#   certificate and waits (bounded) for the key encrypted to it (lib/munge-join.sh);
# - every node holding the key then runs the responder, so replacements can join
#   even after the controller is gone.
# Ends with munged (re)started on the cluster's key and `munge -n | unmunge` reporting
# Success.
# Prerequisites: steps 10 (identity), 20 (munge, openssl), 30 (/fsx).
set -euo pipefail
# shellcheck source=lib/common.sh
. "${GPU_CLUSTER_HOME:-/opt/gpu-cluster}/lib/common.sh"
# shellcheck source=lib/munge-join.sh
. "$GPU_CLUSTER_HOME/lib/munge-join.sh"

M="$FSX_ROOT/munge"

generate_key() {
  log "generating the cluster's munge key (new cluster: no $M/key.sha256 yet)"
  install -d -o munge -g munge -m 0700 "${MUNGE_KEY%/*}"
  mungekey --create --force --keyfile="$MUNGE_KEY"
  chown munge:munge "$MUNGE_KEY"
  chmod 0400 "$MUNGE_KEY"
  key_fingerprint "$MUNGE_KEY" | atomic_write "$M/key.sha256" 0600
}

try_collect() {
  mj_collect "$GPU_CLUSTER_STATE/munge-join" "$M/requests" "$M/responses" "$INSTANCE_ID" "$MUNGE_KEY" munge:munge
}

join_cluster() {
  log "requesting the cluster's munge key through $M/requests/$INSTANCE_ID.pem"
  mj_request "$GPU_CLUSTER_STATE/munge-join" "$M/requests" "$INSTANCE_ID"
  GC_WAIT_INTERVAL=2 wait_for "$MUNGE_JOIN_TIMEOUT" \
    "the munge key encrypted to this node ($M/responses/$INSTANCE_ID.cms) from a node that holds it" try_collect
  [[ $(key_fingerprint "$MUNGE_KEY") == "$(<"$M/key.sha256")" ]] || die "received munge key does not match $M/key.sha256"
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
    generate_key
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
