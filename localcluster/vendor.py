"""`make vendor`: the upstream release sources the local lanes build from.

    python -m localcluster.vendor [--dir vendor] [--mirror URL]

Each file of `model/pins.py` VENDOR (Enroot and Pyxis for the faithful lanes' mirror,
Slurm 23.11.4 for the nodes' own Slurm) is downloaded from its upstream release URL, or
from `--mirror URL/<file>` (a `file://` directory or an HTTP server of your own), checked
against its pinned sha256 and only then moved into `--dir` (default ./vendor, where
scripts/vendor-dir.sh and the Makefile look). A file already there is checked, not
fetched again. Nothing unpinned is ever kept: a download with other bytes is deleted and
reported with both digests.

Exit status: 0 every file present and pinned; 1 a file's bytes differ from its pin;
2 usage; 3 a file could not be downloaded (the lines say which file to put where, with
its digest and URL, for a machine without a network).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from model import pins

CHUNK = 1 << 20


class VendorError(Exception):
    """One file's problem; `code` is the exit status it stands for (1 mismatch, 3 unreachable)."""

    def __init__(self, message: str, code: int):
        super().__init__(message)
        self.code = code


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(CHUNK), b""):
            h.update(chunk)
    return h.hexdigest()


def source_url(pin: pins.VendorTarball, mirror: str | None) -> str:
    return f"{mirror.rstrip('/')}/{pin.file}" if mirror else pin.url


def _download(url: str, part: Path, opener: Callable[..., BinaryIO], timeout: float) -> str:
    """Stream `url` into `part`; its sha256. VendorError(3) when it cannot be read."""
    h = hashlib.sha256()
    try:
        with opener(url, timeout=timeout) as response, open(part, "wb") as out:
            for chunk in iter(lambda: response.read(CHUNK), b""):
                h.update(chunk)
                out.write(chunk)
    except (urllib.error.URLError, OSError, ValueError) as err:
        part.unlink(missing_ok=True)
        reason = getattr(err, "reason", None) or err
        raise VendorError(f"cannot download {url}: {reason}", 3) from None
    return h.hexdigest()


def fetch_one(
    pin: pins.VendorTarball,
    dest: Path,
    mirror: str | None = None,
    opener: Callable[..., BinaryIO] = urllib.request.urlopen,
    timeout: float = 60,
) -> str:
    """Make `dest/<file>` the pinned file; a line saying what was done."""
    target = dest / pin.file
    if target.exists():
        got = sha256_of(target)
        if got != pin.sha256:
            raise VendorError(
                f"{target}: sha256 {got}, but model/pins.py pins {pin.sha256}: not the release the "
                f"lanes build from; delete it and run `make vendor` again",
                1,
            )
        return f"ok {target} (sha256 {pin.sha256[:16]}...)"
    url = source_url(pin, mirror)
    part = dest / f".{pin.file}.part"
    got = _download(url, part, opener, timeout)
    if got != pin.sha256:
        part.unlink()
        raise VendorError(f"{url}: sha256 {got}, but model/pins.py pins {pin.sha256}; not kept ({pin.source})", 1)
    os.replace(part, target)
    return f"fetched {target} from {url}"


def offline_help(missing: list[pins.VendorTarball], dest: Path) -> list[str]:
    """What to put where when this machine cannot download them."""
    lines = [f"without a network, put these files in {dest}/ and run `make vendor` again to check them:"]
    lines += [f"  {p.file}  sha256 {p.sha256}  from {p.url}" for p in missing]
    return lines


def run(dest: Path, mirror: str | None, out=sys.stdout, err=sys.stderr, **kw) -> int:
    dest.mkdir(parents=True, exist_ok=True)
    status, missing = 0, []
    for pin in pins.VENDOR:
        try:
            print(f"vendor: {fetch_one(pin, dest, mirror, **kw)}", file=out)
        except VendorError as e:
            print(f"vendor: {e}", file=err)
            status = max(status, e.code)
            if e.code == 3:
                missing.append(pin)
    if missing:
        for line in offline_help(missing, dest):
            print(f"vendor: {line}", file=err)
    return status


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m localcluster.vendor",
        description="Download the release sources the local lanes build from and check them against model/pins.py.",
    )
    parser.add_argument("--dir", type=Path, default=Path("vendor"), help="where the files go (default: ./vendor)")
    parser.add_argument("--mirror", help="fetch <MIRROR>/<file> instead of the upstream URLs (file:// or http://)")
    args = parser.parse_args(argv)
    return run(args.dir, args.mirror)


if __name__ == "__main__":
    sys.exit(main())
