# shellcheck shell=bash
# Slurm accounting on the controller (accounting.enabled: ACCOUNTING_ENABLED=1 in
# cluster.env; docs/team.md). Sourced by step 50 and the munge responder; never run.
# - accounting_start (step 50, before slurmctld starts): slurmdbd.conf from the
#   database secret (bin/gpu-cluster-slurmdbd-conf: the password goes from the secret
#   into the 0600 file and nowhere else), slurmdbd running and answering, then the
#   cluster, accounts, QOS and users registered (bin/gpu-cluster-accounting-sync).
# - accounting_tick (the controller's agent loop): every
#   ACCOUNTING_SECRET_REFRESH_INTERVAL s the secret is read again; a rotated password
#   rewrites slurmdbd.conf and restarts slurmdbd; a stopped slurmdbd is started. Never
#   while a boot runs, nor before step 50 first wrote slurmdbd.conf.
# Prerequisites: lib/common.sh; slurm.conf written (sacctmgr reads AccountingStorageHost).

accounting_enabled() { [[ ${ACCOUNTING_ENABLED:-0} == 1 ]] && is_controller; }

# dbd_conf: run the secret-to-file program; prints `changed`/`unchanged` or the error.
dbd_conf() {
  NODE_NAME=$NODE_NAME "${GPU_CLUSTER_AWS_PYTHON:-python3}" "$GPU_CLUSTER_HOME/bin/gpu-cluster-slurmdbd-conf" 2>&1
}

dbd_up() { timeout 30 sacctmgr -nP list cluster format=cluster >/dev/null 2>&1; }

accounting_start() {
  local said rc=0 line
  accounting_enabled || return 0
  said=$(dbd_conf) || rc=$?
  ((rc == 0)) || die "slurmdbd.conf not written: $said"
  if [[ $said == changed ]] || svc_older_than slurmdbd "$SLURMDBD_CONF"; then
    log "slurmdbd.conf written from the database secret; (re)starting slurmdbd"
    svc restart slurmdbd
  else
    svc start slurmdbd
  fi
  wait_until 180 "slurmdbd to answer (sacctmgr list cluster; database $ACCOUNTING_DB_HOST:$ACCOUNTING_DB_PORT)" dbd_up ||
    die "slurmdbd does not answer after 180s: see /var/log/slurm/slurmdbd.log (database $ACCOUNTING_DB_HOST:$ACCOUNTING_DB_PORT unreachable or the login refused?)"
  rc=0
  said=$(CLUSTER_NAME=$CLUSTER_NAME USERS_CONF=${USERS_CONF:-} python3 "$GPU_CLUSTER_HOME/bin/gpu-cluster-accounting-sync" 2>&1) || rc=$?
  while IFS= read -r line; do [[ -n $line ]] && log "accounting: $line"; done <<<"$said"
  ((rc == 0)) || die "registering the cluster, accounts and users in slurmdbd failed (lines above)"
  log "accounting: slurmdbd answers; cluster $CLUSTER_NAME, accounts and users registered"
}

LAST_DBD_CHECK=-86400
DBD_SAID=""
accounting_tick() {
  local said rc=0
  accounting_enabled || return 0
  # A booting controller's loop starts at step 40, before step 50 has written
  # slurmdbd.conf and started slurmdbd: its first tick saw the secret as "changed" and
  # restarted slurmdbd under step 50's wait and registration (the team lane, a replaced
  # controller). Until step 50 has written the file, and while any boot holds the boot
  # lock, slurmdbd is the boot's alone.
  [[ -s $SLURMDBD_CONF ]] || return 0
  flock -n "$GPU_CLUSTER_RUN/boot.lock" true 2>/dev/null || return 0
  ((SECONDS - LAST_DBD_CHECK >= ${ACCOUNTING_SECRET_REFRESH_INTERVAL:-600})) || return 0
  LAST_DBD_CHECK=$SECONDS
  said=$(dbd_conf) || rc=$?
  if ((rc != 0)); then
    # once per state change: a denied read every 10 minutes would flood the log
    [[ $said == "$DBD_SAID" ]] || warn "accounting: $said (slurmdbd keeps its current login)"
    DBD_SAID=$said
    return 0
  fi
  DBD_SAID=""
  if [[ $said == changed ]]; then
    log "accounting: the database secret changed (rotated); restarting slurmdbd"
    svc restart slurmdbd || warn "accounting: slurmdbd did not restart"
  elif ! svc active slurmdbd; then
    log "accounting: slurmdbd was not running; starting it"
    svc start slurmdbd || warn "accounting: slurmdbd did not start"
  fi
}
