#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR/..
# Step 10: who am I. Reads identity and cluster tags from IMDSv2 (never from the user
# data, so every node of a template gets the same bytes), sets the hostname and pins
# it to the primary IPv4 in /etc/hosts: on Ubuntu 24.04 the hostname can otherwise
# resolve to an IPv6 link-local fe80:: address and Slurm nodes go down (with several
# IP interfaces the hostname can resolve to the wrong one [EFA-ACC]). Writes /var/lib/gpu-cluster/identity.env for the later steps.
# Prerequisites: curl; the launch template enables instance metadata tags.
set -euo pipefail
# shellcheck source=lib/common.sh
. "${GPU_CLUSTER_HOME:-/opt/gpu-cluster}/lib/common.sh"

meta() { imds_get "meta-data/$1" || die "cannot read $1 from instance metadata (IMDSv2)"; }
tag() {
  local rc=0 value
  value=$(imds_get "meta-data/tags/instance/$1") || rc=$?
  case $rc in
    0) printf '%s\n' "$value" ;;
    4) die "instance tag $1 is not visible in instance metadata: the launch template must enable instance_metadata_tags and the Auto Scaling group must propagate $1" ;;
    *) die "cannot read tag $1 from instance metadata" ;;
  esac
}

# tag_optional KEY: the tag's value, or nothing when the instance has no such tag.
tag_optional() {
  local rc=0 value
  value=$(imds_get "meta-data/tags/instance/$1") || rc=$?
  case $rc in 0) printf '%s\n' "$value" ;; 4) ;; *) die "cannot read tag $1 from instance metadata" ;; esac
}

# read_block_end BLOCK: GpuClusterBlockEnd (a Capacity Block's end, ISO-8601), as
# 2026-12-08T11:30:00Z, or nothing (on-demand, or a group without the tag).
read_block_end() {
  local value epoch
  value=$(tag_optional GpuClusterBlockEnd)
  [[ -n $value ]] || return 0
  if [[ $1 == on-demand ]]; then warn "ignoring GpuClusterBlockEnd '$value' on an on-demand node" >&2; return 0; fi
  # shellcheck source=lib/block-end.sh
  . "$GPU_CLUSTER_HOME/lib/block-end.sh"
  epoch=$(block_end_epoch "$value") || die "GpuClusterBlockEnd tag '$value' is not an ISO-8601 time with a zone, e.g. 2026-12-08T11:30:00Z"
  block_end_iso "$epoch"
}

pin_hosts() {
  local addr=$1 fqdn=$2 short=$3 hosts=/etc/hosts current
  # Drop any other line naming this host (e.g. Debian's 127.0.1.1, which breaks MPI
  # launchers), then add ours; rewriting in place keeps the inode for bind mounts.
  current=$(awk -v f="$fqdn" -v s="$short" '{ for (i = 2; i <= NF; i++) if ($i == f || $i == s) { print; next } }' "$hosts")
  [[ $current == "$addr $fqdn $short" ]] && return 0
  { awk -v f="$fqdn" -v s="$short" '{ for (i = 2; i <= NF; i++) if ($i == f || $i == s) next; print }' "$hosts"
    printf '%s %s %s\n' "$addr" "$fqdn" "$short"; } >"$hosts.gpu-cluster"
  cat "$hosts.gpu-cluster" >"$hosts"
  rm -f "$hosts.gpu-cluster"
  log "pinned $short to $addr in $hosts"
}

main() {
  local iid addr fqdn short az cluster role nodes block block_end got
  # one session for the eight reads below (each would otherwise ask for its own token)
  IMDS_TOKEN=$(imds_token) || IMDS_TOKEN=""
  iid=$(meta instance-id)
  addr=$(meta local-ipv4)
  fqdn=$(meta local-hostname)
  az=$(meta placement/availability-zone)
  fqdn=${fqdn%% *}
  short=${fqdn%%.*}
  cluster=$(tag GpuClusterName)
  role=$(tag GpuClusterRole)
  nodes=$(tag GpuClusterNodes)
  block=$(tag GpuClusterBlock)
  [[ $addr =~ ^[0-9]+(\.[0-9]+){3}$ ]] || die "local-ipv4 '$addr' is not an IPv4 address"
  [[ $cluster == "$CLUSTER_NAME" ]] || die "GpuClusterName tag is '$cluster' but this user data belongs to cluster '$CLUSTER_NAME'"
  [[ $role == controller || $role == worker || $role == login ]] ||
    die "GpuClusterRole tag is '$role'; expected controller, worker or login"
  [[ $nodes =~ ^[1-9][0-9]*$ ]] || die "GpuClusterNodes tag is '$nodes'; expected a node count"
  [[ $block =~ ^[A-Za-z0-9_-]+$ ]] || die "GpuClusterBlock tag '$block' cannot be a Slurm feature"
  block_end=$(read_block_end "$block")

  if [[ $(hostname) != "$short" ]]; then
    if [[ $GPU_CLUSTER_SERVICE_MANAGER == systemd ]]; then hostnamectl set-hostname "$short"; else hostname "$short"; fi
  fi
  pin_hosts "$addr" "$fqdn" "$short"
  got=$(getent ahostsv4 "$short" | awk 'NR == 1 { print $1 }')
  [[ $got == "$addr" ]] || die "$short resolves to '${got:-nothing}' over IPv4, expected $addr (check /etc/hosts and nsswitch)"
  if getent hosts "$short" | grep -q '^fe80'; then die "$short still resolves to an IPv6 link-local address"; fi

  mkdir -p "$GPU_CLUSTER_STATE"
  atomic_write "$GPU_CLUSTER_STATE/identity.env" 0644 <<ENV
INSTANCE_ID='$iid'
NODE_ADDR='$addr'
NODE_NAME='$short'
NODE_FQDN='$fqdn'
NODE_AZ='$az'
NODE_ROLE='$role'
NODE_BLOCK='$block'
NODE_BLOCK_END='$block_end'
GPU_CLUSTER_NODES='$nodes'
ENV
  log "node $short ($iid) $addr role=$role block=$block${block_end:+ (ends $block_end)} cluster=$cluster nodes=$nodes az=$az"
}

main "$@"
