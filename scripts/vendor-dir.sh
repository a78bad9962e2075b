#!/usr/bin/env bash
# Prints the directory holding the Enroot and Pyxis upstream release tarballs the local
# faithful lane builds its mirror from (enroot-<v>.tar.gz, pyxis-<v>.tar.gz: `git archive`
# of the tags; the build machines cannot reach GitHub). Looks, in order, at
# $GPU_CLUSTER_VENDOR_DIR, ./vendor (gitignored, yours to fill), a vendor/ directory
# beside the clone (where the workplace keeps such mirrors), and the same two places of
# the checkout this clone was made from when its origin is a local directory (a scratch
# clone elsewhere, as CI makes one, finds what its source checkout finds). Prints
# nothing, and exits 1, when none holds both.
set -euo pipefail

holds_both() { compgen -G "$1/enroot-*.tar.gz" >/dev/null && compgen -G "$1/pyxis-*.tar.gz" >/dev/null; }

main() {
  local top dir origin places
  top=$(cd "$(dirname "$0")/.." && pwd)
  places=("${GPU_CLUSTER_VENDOR_DIR:-}" "$top/vendor" "$top"/../*/vendor)
  origin=$(git -C "$top" remote get-url origin 2>/dev/null || true)
  if [[ -n $origin && -d $origin ]]; then
    origin=$(cd "$origin" && pwd)
    places+=("$origin/vendor" "$origin"/../*/vendor)
  fi
  for dir in "${places[@]}"; do
    if [[ -n $dir && -d $dir ]] && holds_both "$dir"; then
      (cd "$dir" && pwd)
      return 0
    fi
  done
  return 1
}

main "$@"
