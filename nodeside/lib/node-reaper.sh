# shellcheck shell=bash
# Stale dynamic node clean-up, run on the controller by the node agent loop
# (lib/munge-responder.sh); sourced, never run.
# Why: nodes register as Slurm dynamic nodes named after their hostname, which EC2
# derives from the IPv4 address. A replacement node therefore registers under a new
# name, and the entry of the node it replaced stays DOWN ("Not responding") for ever,
# counting against MaxNodeCount and cluttering sinfo. Entries that have been down and
# not responding for longer than the grace period are deleted; a node that was only
# rebooting simply registers again. Nodes taken down or drained on purpose (any other
# reason, e.g. the validation gate's) are never touched, with one exception the caller
# names: drain reasons of nodes that never took a job (the join gate's pending drains,
# lib/join-gate.sh JOIN_PENDING_PREFIX) when the node is down and not answering (sinfo
# shows DOWN+DRAIN+NOT_RESPONDING as "drained*"; `-t down` lists it).
# A node inside a reservation cannot be deleted ("Requested nodes are busy"): it goes once
# the reservation does.
# Prerequisites: Slurm clients (sinfo, scontrol) talking to the local slurmctld.

# reap_stale_nodes GRACE_SECONDS [REASON_PREFIX...]: prints one line per deleted node.
reap_stale_nodes() {
  local grace=$1 now name state stamp reason since prefix ours
  shift
  now=$(date +%s)
  # %H is the time the reason was set, in the controller's local time (as `date` reads it).
  while IFS='|' read -r name state stamp reason; do
    [[ -n $name ]] || continue
    ours=0
    for prefix in "$@"; do
      if [[ $state == *'*' && $reason == "$prefix"* ]]; then ours=1; fi
    done
    if ((ours == 0)); then
      [[ $state == down* ]] || continue
      [[ $reason == "Not responding"* ]] || continue
    fi
    since=$(date -d "$stamp" +%s 2>/dev/null) || continue
    ((now - since >= grace)) || continue
    if scontrol delete nodename="$name" >/dev/null 2>&1; then
      printf 'deleted stale node %s (down, not responding since %s)\n' "$name" "$stamp"
    else
      printf 'could not delete stale node %s (down since %s); it stays listed\n' "$name" "$stamp"
    fi
  done < <(sinfo -h -N -t down -o '%N|%T|%H|%E' 2>/dev/null | sort -u)
}
