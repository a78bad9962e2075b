# shellcheck shell=bash
# Shared helpers for gpu-cluster-boot and its steps; sourced, never run.
# Provides: logging, bounded waits, IMDSv2 reads, the service-manager swap
# (systemd | direct) and the identity written by 10-identity.
# Prerequisites: bash 4.4+, curl, coreutils, util-linux (setpriv).

: "${GPU_CLUSTER_HOME:=/opt/gpu-cluster}"
: "${GPU_CLUSTER_ETC:=/etc/gpu-cluster}"
: "${GPU_CLUSTER_STATE:=/var/lib/gpu-cluster}"
: "${GPU_CLUSTER_RUN:=/run/gpu-cluster}"
: "${GPU_CLUSTER_LOG_DIR:=/var/log/gpu-cluster}"
: "${GPU_CLUSTER_SERVICE_MANAGER:=systemd}"
: "${GPU_CLUSTER_PACKAGES:=install}"
: "${GC_STEP:=$(basename "${0:-sh}" .sh)}"

log() { printf '%s [%s] %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$GC_STEP" "$*"; }
warn() { log "WARNING: $*"; }
# die REASON: the reason also lands in the node's status marker.
die() {
  log "ERROR: $*" >&2
  if [[ -n ${GC_REASON_FILE:-} ]]; then printf '%s\n' "$*" >"$GC_REASON_FILE"; fi
  exit 1
}
# skip WHAT: a check this node does not run, said out loud (and kept in the status).
skip() {
  log "SKIPPED: $*"
  if [[ -n ${GC_NOTES_FILE:-} ]]; then printf '%s: skipped: %s\n' "$GC_STEP" "$*" >>"$GC_NOTES_FILE"; fi
}

# now_ms: NOW_MS = milliseconds since the epoch (bash 5's EPOCHREALTIME; date before it).
now_ms() {
  local t=${EPOCHREALTIME:-}
  if [[ -n $t ]]; then t=${t/[.,]/}; NOW_MS=$((10#${t%???})); else NOW_MS=$(date +%s%3N); fi
}
# ms_of SECONDS: whole or decimal seconds (0.1, 5) as milliseconds.
ms_of() {
  local whole=${1%%.*} frac=000
  if [[ $1 == *.* ]]; then frac="${1#*.}000"; fi
  echo $((10#${whole:-0} * 1000 + 10#${frac:0:3}))
}
# secs_of MS DECIMALS: milliseconds as seconds with that many decimals (3 when not given; logs: 1).
secs_of() {
  local d=${2:-3} f
  f=$(printf '%03d' $(($1 % 1000)))
  printf '%d.%s\n' $(($1 / 1000)) "${f:0:d}"
}

# wait_until SECONDS WHAT CMD...: run CMD until it succeeds, for at most SECONDS; returns 1
# on timeout. Tries again after GC_WAIT_FIRST s (default 0.1), then each time 1.5x later,
# never more than GC_WAIT_INTERVAL s apart (default 5) and never past the bound: what is
# nearly ready is seen within a fraction of a second, and a long wait polls no more
# often than a fixed 5 s poll did. wait_for: the same, but a timeout fails the step.
wait_until() {
  local timeout=$1 what=$2 start left step cap
  shift 2
  step=$(ms_of "${GC_WAIT_FIRST:-0.1}")
  cap=$(ms_of "${GC_WAIT_INTERVAL:-5}")
  now_ms
  start=$NOW_MS
  log "waiting up to ${timeout}s for $what"
  until "$@"; do
    now_ms
    left=$((timeout * 1000 - (NOW_MS - start)))
    if ((left <= 0)); then
      log "gave up after ${timeout}s waiting for $what"
      return 1
    fi
    ((step <= cap)) || step=$cap
    ((step <= left)) || step=$left
    sleep "$(secs_of "$step")"
    step=$((step * 3 / 2 + 1))
  done
  now_ms
  log "done waiting after $(secs_of $((NOW_MS - start)) 1)s: $what"
}
wait_for() { wait_until "$@" || die "timed out after ${1}s waiting for $2"; }

# atomic_write PATH MODE: stdin -> PATH via a temp file in the same directory.
atomic_write() {
  local tmp
  tmp=$(mktemp "${1%/*}/.tmp.XXXXXX")
  cat >"$tmp"
  chmod "$2" "$tmp"
  mv -f "$tmp" "$1"
}

# --- IMDSv2 (honours AWS_EC2_METADATA_SERVICE_ENDPOINT) ----------------------------
imds_base() { local b=${AWS_EC2_METADATA_SERVICE_ENDPOINT:-http://169.254.169.254}; printf '%s\n' "${b%/}"; }
# imds_token: a session token (PUT, 300 s) on stdout. A caller reading several values sets
# IMDS_TOKEN from it once: each imds_get then makes one request instead of two.
imds_token() {
  curl -sf -X PUT -H 'X-aws-ec2-metadata-token-ttl-seconds: 300' \
    --connect-timeout 2 --max-time 5 "$(imds_base)/latest/api/token"
}
# imds_get PATH (under /latest/, e.g. meta-data/instance-id): value on stdout.
# Returns 4 at once for 404 (absent, e.g. a tag), 1 after IMDS_TRIES failed tries.
# Uses IMDS_TOKEN when set; a token IMDS refuses (401: expired) is replaced at once.
imds_get() {
  local base try token=${IMDS_TOKEN:-} out code
  base=$(imds_base)
  for ((try = 1; try <= ${IMDS_TRIES:-8}; try++)); do
    if [[ -n $token ]] || token=$(imds_token); then
      out=$(curl -s -w '\n%{http_code}' -H "X-aws-ec2-metadata-token: $token" \
        --connect-timeout 2 --max-time 5 "$base/latest/$1") || out=$'\n000'
      code=${out##*$'\n'}
      case $code in
        200) printf '%s\n' "${out%$'\n'*}"; return 0 ;;
        404) return 4 ;;
        401) token=""; continue ;;
      esac
    fi
    sleep "${IMDS_RETRY_SLEEP:-2}"
  done
  log "IMDS: no answer for /latest/$1 from $base after ${IMDS_TRIES:-8} tries" >&2
  return 1
}

# --- identity (written by 10-identity) ----------------------------------------------
load_identity() {
  local f="$GPU_CLUSTER_STATE/identity.env"
  [[ -r $f ]] || die "$f missing: run step 10-identity first"
  # shellcheck source=/dev/null
  . "$f"
}
is_controller() { [[ ${NODE_ROLE:-} == controller ]]; }
is_login() { [[ ${NODE_ROLE:-} == login ]]; }
# slurmd runs on workers and a colocated controller; not on a dedicated controller
# (controller.placement dedicated: CONTROLLER_DEDICATED=1 in cluster.env) nor on a login
# node: CPU instances that take no jobs.
runs_slurmd() { [[ ${NODE_ROLE:-} == worker ]] || { is_controller && [[ ${CONTROLLER_DEDICATED:-0} != 1 ]]; }; }
fsx_root_ready() { mountpoint -q "$FSX_MOUNTPOINT" && [[ -d $FSX_ROOT && -w $FSX_ROOT ]]; }

# --- services: systemd, or plain background processes (pid files) ------------------
# direct_pid NAME: the pid of our running NAME (pid file, live, and still that program).
direct_pid() {
  local f="$GPU_CLUSTER_RUN/$1.pid" pid prog=$1
  case $1 in munge) prog=munged ;; gpu-cluster-munge-responder) prog=munge-responder ;; esac
  [[ -r $f ]] && pid=$(<"$f") && kill -0 "$pid" 2>/dev/null &&
    tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q -- "$prog" && printf '%s\n' "$pid"
}

direct_start() {
  local name=$1 log="$GPU_CLUSTER_LOG_DIR/$1.log"
  direct_pid "$name" >/dev/null && return 0
  mkdir -p "$GPU_CLUSTER_RUN" "$GPU_CLUSTER_LOG_DIR"
  case $name in
    munge)
      install -d -o munge -g munge -m 0755 /run/munge
      setsid setpriv --reuid=munge --regid=munge --init-groups munged -F >>"$log" 2>&1 </dev/null &
      ;;
    slurmd)
      # memlock for EFA: systemd sets it from the unit drop-in; here we try ourselves.
      (ulimit -l unlimited 2>/dev/null || true
        # shellcheck source=/dev/null
        . /etc/default/slurmd
        exec setsid slurmd -D -Z --conf "$SLURMD_NODE_CONF") >>"$log" 2>&1 </dev/null &
      ;;
    slurmctld) setsid slurmctld -D >>"$log" 2>&1 </dev/null & ;;
    slurmdbd) setsid slurmdbd -D >>"$log" 2>&1 </dev/null & ;;
    gpu-cluster-munge-responder)
      setsid "$GPU_CLUSTER_HOME/lib/munge-responder.sh" >>"$log" 2>&1 </dev/null &
      ;;
    *) die "direct mode cannot start unknown service $name" ;;
  esac
  printf '%s\n' "$!" >"$GPU_CLUSTER_RUN/$name.pid"
  sleep 1
  direct_pid "$name" >/dev/null || die "$name exited right after starting; last lines of $log: $(tail -n 5 "$log" | tr '\n' ' ')"
}

# direct_stop NAME: SIGTERM, then SIGKILL after GC_STOP_TIMEOUT s (default 30), as
# systemd does after TimeoutStopSec. A slurmd whose controller is gone keeps retrying
# its completion messages and ignores SIGTERM; without the kill it could never be
# restarted towards a replaced controller.
direct_stop() {
  local pid gone
  pid=$(direct_pid "$1") || return 0
  # Gone: no such process, or a zombie its parent has not reaped yet.
  gone="! kill -0 $pid 2>/dev/null || [[ \$(ps -o stat= -p $pid) == Z* ]]"
  kill "$pid" 2>/dev/null || true
  if ! GC_WAIT_INTERVAL=1 wait_until "${GC_STOP_TIMEOUT:-30}" "$1 (pid $pid) to exit after SIGTERM" bash -c "$gone"; then
    warn "$1 (pid $pid) did not exit on SIGTERM; sending SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
    GC_WAIT_INTERVAL=1 wait_for 10 "$1 (pid $pid) to exit after SIGKILL" bash -c "$gone"
  fi
  rm -f "$GPU_CLUSTER_RUN/$1.pid"
}

# svc ACTION NAME: ACTION is start, restart, enable or active (enable takes several NAMEs).
svc() {
  local name
  if [[ $GPU_CLUSTER_SERVICE_MANAGER == direct ]]; then
    case $1 in
      start) direct_start "$2" ;;
      restart) direct_stop "$2"; direct_start "$2" ;;
      enable) for name in "${@:2}"; do skip "enable $name at boot (direct mode has no service manager)"; done ;;
      active) direct_pid "$2" >/dev/null ;;
    esac
  else
    case $1 in
      # --no-block: a unit ordered after cloud-init's own jobs cannot deadlock the boot;
      # the wait stays bounded and names the unit.
      start | restart)
        systemctl --no-block "$1" "$2"
        wait_for 120 "systemd unit $2 to become active" systemctl is-active --quiet "$2"
        ;;
      enable) svc_enable "${@:2}" ;;
      active) systemctl is-active --quiet "$2" ;;
    esac
  fi
}

# svc_enable NAME...: link the units not enabled yet for the next boot, in one call. No
# daemon-reload (only the next boot reads the links; a reload re-runs the generators and
# re-reads every unit: seconds), and SYSTEMCTL_SKIP_SYSV=1 [SYSTEMD-ENV]: munge and Slurm
# also ship init scripts, for which systemctl would run update-rc.d each time (about a
# second apiece), though systemd ignores an init script that has a unit of its own.
svc_enable() {
  local name todo=()
  for name; do svc_enabled "$name" || todo+=("$name"); done
  if ((${#todo[@]})); then SYSTEMCTL_SKIP_SYSV=1 systemctl enable --quiet --no-reload "${todo[@]}"; fi
}
svc_enabled() { SYSTEMCTL_SKIP_SYSV=1 systemctl is-enabled --quiet "$1" 2>/dev/null; }
# svc_disable NAME: the same, the other way (not started at the next boot).
svc_disable() { SYSTEMCTL_SKIP_SYSV=1 systemctl disable --quiet --no-reload "$1"; }

# svc_pid NAME: the running service's main pid (nothing when it is not running).
svc_pid() {
  local pid
  if [[ $GPU_CLUSTER_SERVICE_MANAGER == direct ]]; then
    direct_pid "$1"
  else
    pid=$(systemctl show -p MainPID --value "$1" 2>/dev/null) && [[ $pid != 0 ]] && printf '%s\n' "$pid"
  fi
}

# svc_older_than NAME FILE...: true when NAME runs and started before one of FILEs was
# last written, i.e. it still runs with an older config (a step that wrote the file
# and then failed before restarting the daemon leaves exactly that behind).
svc_older_than() {
  local name=$1 pid age started f
  shift
  pid=$(svc_pid "$name") || return 1
  age=$(ps -o etimes= -p "$pid" 2>/dev/null | tr -d ' ') || return 1
  [[ $age =~ ^[0-9]+$ ]] || return 1
  started=$(($(date +%s) - age))
  for f in "$@"; do
    [[ -e $f ]] && (($(stat -c %Y "$f") > started)) && return 0
  done
  return 1
}

# Reload unit files after drop-ins changed (no-op in direct mode).
svc_reload() { [[ $GPU_CLUSTER_SERVICE_MANAGER == direct ]] || systemctl daemon-reload; }

# max_node_count N: Slurm's MaxNodeCount for N expected nodes (factor and spare from
# cluster.env; why 2N+4: userdata/slurm_conf.py). The one place the formula runs.
max_node_count() { echo $((SLURM_MAX_NODES_FACTOR * $1 + SLURM_MAX_NODES_SPARE)); }
