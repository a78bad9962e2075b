#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR/..
# Step 35: the stack's users (`users`, docs/team.md). Creates the same POSIX accounts on
# every node (controller, workers, login nodes): each user's primary group with its gid,
# then the user with their uid, that group, /bin/bash and a home under USERS_HOME_ROOT
# on /fsx (created once, 0700, owned by the user, never overwritten). A node whose image
# already has such a name or id with another meaning stops here naming it: jobs would
# otherwise run under a uid that differs between nodes. Slurm associations are the
# controller's (lib/accounting.sh). Without USERS_CONF (no `users`) it does nothing.
# Prerequisites: step 30 (/fsx); shadow-utils (useradd, groupadd), getent.
set -euo pipefail
# shellcheck source=lib/common.sh
. "${GPU_CLUSTER_HOME:-/opt/gpu-cluster}/lib/common.sh"

# ensure_group NAME GID
ensure_group() {
  local got
  if got=$(getent group "$1"); then
    [[ $(cut -d: -f3 <<<"$got") == "$2" ]] ||
      die "group $1 exists on this image with gid $(cut -d: -f3 <<<"$got"), the stack says $2 (users: pick another group or gid)"
    return 0
  fi
  if got=$(getent group "$2"); then
    die "gid $2 is group $(cut -d: -f1 <<<"$got") on this image, the stack wants group $1 (users: pick another gid)"
  fi
  groupadd --gid "$2" "$1" || die "groupadd --gid $2 $1 failed"
  log "group $1 (gid $2)"
}

# ensure_user NAME UID GROUP
ensure_user() {
  local got home="$USERS_HOME_ROOT/$1"
  if got=$(getent passwd "$1"); then
    [[ $(cut -d: -f3 <<<"$got") == "$2" ]] ||
      die "user $1 exists on this image with uid $(cut -d: -f3 <<<"$got"), the stack says $2 (users: rename the user or change the uid)"
    return 0
  fi
  if got=$(getent passwd "$2"); then
    die "uid $2 is user $(cut -d: -f1 <<<"$got") on this image, the stack wants $1 (users: pick another uid)"
  fi
  # --no-create-home: the home lives on /fsx and is made once below, for every node.
  useradd --uid "$2" --gid "$3" --home-dir "$home" --shell /bin/bash --no-create-home "$1" || die "useradd $1 failed"
  log "user $1 (uid $2, group $3, home $home)"
}

# ensure_home NAME GROUP: on /fsx, shared by every node; made by whichever node is first.
ensure_home() {
  local home="$USERS_HOME_ROOT/$1"
  [[ -d $home ]] && return 0
  mkdir -p "$USERS_HOME_ROOT"
  chmod 0755 "$USERS_HOME_ROOT"
  if mkdir "$home" 2>/dev/null; then
    chown "$1:$2" "$home"
    chmod 0700 "$home"
    log "home $home"
  fi
}

main() {
  local name uid group gid rest n=0
  if [[ -z ${USERS_CONF:-} ]]; then log "no users in the stack"; return 0; fi
  [[ -r $USERS_CONF ]] || die "$USERS_CONF is missing (the node files did not arrive?)"
  mountpoint -q "$FSX_MOUNTPOINT" || die "$FSX_MOUNTPOINT is not mounted: homes live under $USERS_HOME_ROOT"
  while read -r name uid group gid rest; do
    [[ -z $name || $name == '#'* ]] && continue
    [[ -n $rest ]] || die "$USERS_CONF: malformed line for $name"
    ensure_group "$group" "$gid"
    ensure_user "$name" "$uid" "$group"
    ensure_home "$name" "$group"
    n=$((n + 1))
  done <"$USERS_CONF"
  log "$n user(s) present with the stack's uids and gids; homes under $USERS_HOME_ROOT"
}

main "$@"
