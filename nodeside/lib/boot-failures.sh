# shellcheck shell=bash
# Failed boots made visible in Slurm; sourced, never run.
# Why: a node whose boot failed for good (gpu-cluster-boot gave up after BOOT_ATTEMPTS)
# would otherwise just be missing from sinfo, its reason only in a JSON file on /fsx.
#   report_boot_failures (controller, node agent loop in lib/munge-responder.sh): for
#     every status marker with state "failed", drain the node with the reason if Slurm
#     knows it, else create a placeholder node that sinfo lists as down with the reason
#     (slurmctld 22.05: "Only State=FUTURE and State=CLOUD allowed for nodes created by
#     scontrol" [SLURM-DYN]; a FUTURE node is hidden from sinfo, so: create, then set DOWN). Each marker is acted on once, so an operator's `scontrol update
#     state=resume` is not undone a minute later (the record is kept on /fsx, so a
#     replaced controller does not act again either).
#   clear_boot_failure (the node itself, step 50, on its next boot attempt; and the
#     agent, once the node's marker says ok again, e.g. after a hand-run step): undo it.
# Failures before /fsx is mounted (payload, identity, packages, the mount itself) have
# no marker on /fsx and stay in the node's local status and boot log only.
# Prerequisites: Slurm clients (scontrol) as root with the cluster's munge key; python3.

readonly BOOT_FAILED_PREFIX="boot failed at"

# boot_failure_reason STEP REASON LOG: the text Slurm shows (Slurm keeps it short).
boot_failure_reason() {
  local reason=$2
  # run_step appends " (see LOG)"; the log goes last, once.
  reason=$(sed -E 's/ \(see [^)]*\)//g' <<<"$reason")
  reason="$BOOT_FAILED_PREFIX $1: $reason; log $3"
  printf '%s\n' "${reason:0:250}"
}

# final_markers DIR: one line "node<TAB>state<TAB>step<TAB>updated<TAB>reason<TAB>log" per
# marker whose state is failed or ok (unreadable or half-written markers are skipped).
final_markers() {
  python3 - "$1" <<'PY'
import json, pathlib, sys
for p in sorted(pathlib.Path(sys.argv[1]).glob("*.json")):
    try:
        m = json.loads(p.read_text())
    except (OSError, ValueError):
        continue
    if m.get("state") not in ("failed", "ok") or not m.get("node"):
        continue
    keys = ("node", "state", "step", "updated", "reason", "log")
    print("\t".join(str(m.get(k, "")).replace("\t", " ").replace("\n", " ") for k in keys))
PY
}

# report_boot_failures STATUS_DIR RECORD_DIR: prints one line per node it changed.
report_boot_failures() {
  local status_dir=$1 records=$2 node state step updated reason logpath text record
  install -d -m 0700 "$records"
  while IFS=$'\t' read -r node state step updated reason logpath; do
    [[ $node =~ ^[A-Za-z0-9._-]+$ ]] || continue
    record="$records/$node"
    if [[ $state == ok ]]; then
      # Booted fine since: undo what an earlier failure made of it (once).
      if [[ -e $record ]]; then clear_boot_failure "$node" && rm -f "$record"; fi
      continue
    fi
    [[ $(cat "$record" 2>/dev/null) != "$updated $step" ]] || continue
    text=$(boot_failure_reason "$step" "$reason" "$logpath")
    if scontrol show node "$node" >/dev/null 2>&1; then
      scontrol update nodename="$node" state=drain reason="$text" >/dev/null 2>&1 || {
        printf 'could not drain %s (boot failed at %s); will try again\n' "$node" "$step"; continue; }
      printf 'drained %s: %s\n' "$node" "$text"
    else
      if ! scontrol create nodename="$node" state=future >/dev/null 2>&1 ||
        ! scontrol update nodename="$node" state=down reason="$text" >/dev/null 2>&1; then
        printf 'could not list %s in Slurm (boot failed at %s); will try again\n' "$node" "$step"
        continue
      fi
      printf 'listed %s as down (it never registered): %s\n' "$node" "$text"
    fi
    printf '%s %s\n' "$updated" "$step" >"$record"
  done < <(final_markers "$status_dir")
}

# clear_boot_failure NODE: before this node registers again, remove what
# report_boot_failures made of an earlier failed boot: a drained node is resumed, a
# placeholder (down, never registered) is deleted so slurmd -Z creates the real node.
# Anything else (a drain by an operator or the validation gate) is left alone.
clear_boot_failure() {
  local info
  info=$(scontrol show node "$1" 2>/dev/null) || return 0
  grep -q "Reason=$BOOT_FAILED_PREFIX " <<<"$info" || return 0
  if grep -Eq 'State=[^ ]*DRAIN' <<<"$info"; then
    if scontrol update nodename="$1" state=resume 2>/dev/null; then
      echo "resumed $1 (drained for an earlier failed boot)"
    else
      echo "could not resume $1 (drained for an earlier failed boot)"
    fi
  elif scontrol delete nodename="$1" 2>/dev/null; then
    echo "deleted the placeholder of $1 (listed down for an earlier failed boot)"
  else
    echo "could not delete the placeholder of $1 (listed down for an earlier failed boot)"
  fi
}
