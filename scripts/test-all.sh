#!/usr/bin/env bash
# `make test`: every test, within CI's budget (CONTRIBUTING.md, "Tests and the CI budget").
#
# Three things run at once, because each leaves most of the two cores idle:
# 1. the lane roots the daemon tests boot (`python -m localcluster.images build`), one
#    process per lane, in the background: a cold root is mostly waiting (downloads,
#    dpkg's synchronous writes: 70 s of CPU in a 234 s bookworm build here), and a
#    fixture that needs a root still being built waits on the cache entry's lock
#    instead of building it again (localcluster/images.py);
# 2. the tests outside tests/daemons (about 1,900, CPU-bound, no daemon, no lock) under
#    pytest-xdist, niced so the daemon tests' boots keep the CPU they need: they fill
#    the cores while the daemon tests wait on boots, polls and the roots;
# 3. the daemon tests in the foreground, in one process (they share clusters, ports and
#    /var/tmp/gpu-cluster-local), ordered by tests/daemons/conftest.py so that those
#    needing no root run while the roots build.
# Exit status: 0 only when both pytest runs passed and each ran tests (pytest's
# "no tests ran", 5, is a failure here); the outside-daemons run's output is printed
# after the daemon run's, whole.
#
# Environment (the Makefile sets them): VENV_PYTHON, JOBS (xdist workers),
# GPU_CLUSTER_FAITHFUL_LANES, GPU_CLUSTER_LIFECYCLE_LANE, GPU_CLUSTER_VENDOR_DIR;
# TEST_LOGS (default build/test-logs) keeps the background runs' logs.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2

py=${VENV_PYTHON:-venv/bin/python}
jobs=${JOBS:-auto}
logs=${TEST_LOGS:-build/test-logs}
mkdir -p "$logs"
start=$SECONDS
# Interrupted (CI's limit, ^C): the background runs stop with it.
trap 'kill $(jobs -p) 2>/dev/null; exit 130' INT TERM

say() { printf 'make test: %s (%ds)\n' "$*" "$((SECONDS - start))"; }

# 1. lane roots (skipped where the daemon tests could not build them anyway: they say why).
# The Enroot/Pyxis mirror first: every lane's root takes it, and two builds of it at once
# would each compile Enroot. Then the local Slurm build (CPU) beside every lane's root
# (debootstrap, bake: mostly waiting); a root that needs the Slurm build or a base another
# build is making waits on that cache entry's lock (tests/support/lane_clusters.py prebuild_plan).
prebuild() {
  local part pids=() rc=0
  nice -n 5 "$py" -m localcluster.mirror >"$logs/mirror.log" 2>&1 || { echo "mirror: FAILED" >>"$logs/roots.log"; return 1; }
  for part in "$@"; do
    if [[ $part == slurm-build ]]; then
      nice -n 5 "$py" -m localcluster.slurm_build >"$logs/$part.log" 2>&1 &
    else
      nice -n 5 "$py" -m localcluster.images build --lane "$part" >"$logs/root-$part.log" 2>&1 &
    fi
    pids+=("$!")
  done
  for part in "$@"; do
    if ! wait "${pids[0]}"; then echo "$part: FAILED" >>"$logs/roots.log"; rc=1; fi
    pids=("${pids[@]:1}")
  done
  return "$rc"
}
builder=
if [[ -z ${GPU_CLUSTER_LOCAL_ROOT:-} && -n ${GPU_CLUSTER_VENDOR_DIR:-} && $(id -u) -eq 0 ]] \
  && command -v debootstrap >/dev/null; then
  read -r -a plan < <("$py" -c 'from tests.support.lane_clusters import prebuild_plan; print(*prebuild_plan())')
  : >"$logs/roots.log"
  prebuild "${plan[@]}" &
  builder=$!
  say "building in the background: mirror, then ${plan[*]} side by side (logs in $logs/)"
fi

# 2. everything outside tests/daemons
nice -n 5 "$py" -m pytest -q -n "$jobs" --ignore=tests/daemons >"$logs/outside-daemons.log" 2>&1 &
outside=$!
say "tests outside tests/daemons running in the background (-n $jobs; $logs/outside-daemons.log)"

# 3. the daemon tests
"$py" -m pytest -q tests/daemons
daemons_rc=$?
say "tests/daemons done (exit $daemons_rc)"

wait "$outside"
outside_rc=$?
echo "==== tests outside tests/daemons (exit $outside_rc) ===="
cat "$logs/outside-daemons.log"

builds_rc=0
if [[ -n $builder ]] && ! wait "$builder"; then
  builds_rc=1
  echo "==== lane roots: $(tr '\n' ' ' <"$logs/roots.log")(logs in $logs/) ===="
  for f in "$logs"/mirror.log "$logs"/slurm-build.log "$logs"/root-*.log; do
    [[ -f $f ]] || continue
    echo "---- $f (last lines)"
    tail -n 20 "$f"
  done
fi

rc=0
for part in "tests/daemons:$daemons_rc" "outside tests/daemons:$outside_rc"; do
  case ${part##*:} in
    0) ;;
    5) echo "make test: pytest ran no tests in ${part%:*}" >&2; rc=1 ;;
    *) rc=1 ;;
  esac
done
((builds_rc == 0)) || rc=1
say "done (exit $rc)"
exit "$rc"
