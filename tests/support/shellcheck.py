"""shellcheck for the tests, a pass kept by the hash of everything it read.

shellcheck is deterministic: the same version, arguments and file contents give the same
verdict. A passing run is recorded under pytest's cache directory (`shellcheck_cache`
fixture, tests/conftest.py) by the sha256 of its version, its arguments, each listed
file's path and content and, with `-x` (sources followed), every file under the working
directory it may source. The fast loop then checks only what changed since a pass; a
failure is never recorded, so it is reported every time. `pytest --cache-clear` (or
`-p no:cacheprovider`) checks everything.
"""

from __future__ import annotations

import concurrent.futures
import functools
import hashlib
import subprocess
from pathlib import Path


@functools.cache
def version() -> str:
    return subprocess.run(["shellcheck", "--version"], capture_output=True, text=True, check=True).stdout


def _digest(args: list[str], files: list[str], cwd: Path | None) -> str:
    base = cwd or Path.cwd()
    h = hashlib.sha256(version().encode())
    h.update("\0".join(args).encode() + b"\0\0")
    sourced = sorted(p for p in base.rglob("*") if p.is_file() and "__pycache__" not in p.parts) if "-x" in args else []
    for path in [*(base / f for f in files), *sourced]:
        data = path.read_bytes()
        # a file outside the tree (a rendered copy in a test's tmp dir) by its name alone
        name = path.relative_to(base) if path.is_relative_to(base) else path.name
        h.update(f"{name}\0{len(data)}\0".encode())
        h.update(data)
    return h.hexdigest()


def shellcheck(
    args: list[str], files: list[str], cwd: Path | None = None, cache: Path | None = None
) -> list[subprocess.CompletedProcess]:
    """shellcheck over `files` in two concurrent batches (one per core; every file checked
    once). With `cache`: nothing is run when the same input passed before (empty list)."""
    marker = cache / _digest(args, files, cwd) if cache is not None else None
    if marker is not None and marker.exists():
        return []
    batches = [files[i::2] for i in range(2) if files[i::2]]
    with concurrent.futures.ThreadPoolExecutor(max_workers=len(batches)) as pool:
        runs = list(
            pool.map(
                lambda b: subprocess.run(["shellcheck", *args, *b], cwd=cwd, capture_output=True, text=True), batches
            )
        )
    if marker is not None and all(r.returncode == 0 for r in runs):
        marker.write_text(" ".join(args) + "\n" + "\n".join(files) + "\n")
    return runs
