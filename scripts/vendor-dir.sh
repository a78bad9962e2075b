#!/usr/bin/env bash
# Prints the directory holding the Enroot and Pyxis upstream release tarballs the local
# faithful lane builds its mirror from (enroot-<v>.tar.gz, pyxis-<v>.tar.gz: `git archive`
# of the tags; the build machines cannot reach GitHub). Looks, in order, at
# $GPU_CLUSTER_VENDOR_DIR, ./vendor (gitignored, yours to fill) and a vendor/ directory
# beside the clone (where the workplace keeps such mirrors). Prints nothing, and exits 1,
# when none holds both.
set -euo pipefail

holds_both() { compgen -G "$1/enroot-*.tar.gz" >/dev/null && compgen -G "$1/pyxis-*.tar.gz" >/dev/null; }

main() {
  local top dir
  top=$(cd "$(dirname "$0")/.." && pwd)
  for dir in "${GPU_CLUSTER_VENDOR_DIR:-}" "$top/vendor" "$top"/../*/vendor; do
    if [[ -n $dir && -d $dir ]] && holds_both "$dir"; then
      (cd "$dir" && pwd)
      return 0
    fi
  done
  return 1
}

main "$@"
