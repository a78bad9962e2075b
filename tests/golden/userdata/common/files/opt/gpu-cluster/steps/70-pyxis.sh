#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR/..
# Step 70: Pyxis [PYXIS]. Registers the SPANK plugin by installing
# pyxis.conf into /etc/slurm/plugstack.conf.d (plugstack.conf includes that directory),
# only when the plugin exists: a missing `required` plugin makes every srun fail.
# Restarts slurmd when the registration changed (not on a dedicated controller, which
# runs no slurmd); fails unless `srun --help` shows
# --container-image. With GPU_CLUSTER_PACKAGES=preinstalled and no plugin: skipped.
# Prerequisites: steps 20 (Pyxis) and 50 (slurmd running, except on a dedicated controller).
set -euo pipefail
# shellcheck source=lib/common.sh
. "${GPU_CLUSTER_HOME:-/opt/gpu-cluster}/lib/common.sh"

responding() { ! scontrol show node "$NODE_NAME" 2>/dev/null | grep -Eq 'State=[^ ]*(NOT_RESPONDING|DOWN)'; }

main() {
  local conf=/etc/slurm/plugstack.conf.d/pyxis.conf
  load_identity
  if [[ ! -f $PYXIS_SO ]]; then
    if [[ $GPU_CLUSTER_PACKAGES == preinstalled ]]; then
      rm -f "$conf"
      skip "Pyxis registration: $PYXIS_SO is not installed (GPU_CLUSTER_PACKAGES=preinstalled)"
      return 0
    fi
    die "$PYXIS_SO is missing (step 20 installs Pyxis $PYXIS_VERSION)"
  fi
  if ! cmp -s "$PYXIS_CONF_TEMPLATE" "$conf"; then
    install -D -m 0644 "$PYXIS_CONF_TEMPLATE" "$conf"
    if runs_slurmd; then
      log "registered $PYXIS_SO in $conf; restarting slurmd"
      svc restart slurmd
      wait_for 120 "slurmd on $NODE_NAME to respond again after the restart" responding
    else
      # A dedicated controller keeps the plugin for srun/sbatch run here (SPANK options
      # are read by the client), but has no slurmd: a restart would start one and
      # register the controller as a node that takes jobs.
      log "registered $PYXIS_SO in $conf for the Slurm clients (dedicated controller: no slurmd)"
    fi
  fi
  srun --help 2>&1 | grep -q -- '--container-image' ||
    die "srun --help does not show --container-image: Pyxis is not loaded (check $conf and /etc/slurm/plugstack.conf)"
  log "Pyxis loaded: srun --container-image available"
}

main "$@"
