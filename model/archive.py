"""Extracting a tar archive safely on every Python the project runs on.

`tarfile`'s extraction filters (PEP 706: `filter="data"` refuses absolute paths, `..`,
links out of the target and device files) arrived in 3.11.4; Debian 12's own python3 is
3.11.2 and has no `filter` argument (measured: `make image` under it failed with
"extractall() got an unexpected keyword argument 'filter'"). Where the filter exists it
is used; elsewhere the same refusals are checked here before extracting.
"""

from __future__ import annotations

import tarfile
from pathlib import Path


class UnsafeArchive(ValueError):
    pass


def _check(member: tarfile.TarInfo, dest: Path) -> None:
    target = (dest / member.name).resolve()
    if member.name.startswith("/") or not target.is_relative_to(dest):
        raise UnsafeArchive(f"{member.name}: outside the extraction directory")
    if member.isdev():
        raise UnsafeArchive(f"{member.name}: a device file")
    if member.issym() or member.islnk():
        base = target.parent if member.issym() else dest
        link = (base / member.linkname).resolve()
        if member.linkname.startswith("/") or not link.is_relative_to(dest):
            raise UnsafeArchive(f"{member.name}: links outside the extraction directory")


def extract_all(tar: tarfile.TarFile, dest: Path) -> None:
    """`tar.extractall(dest)` with the `data` filter's refusals, on any Python 3.11."""
    if hasattr(tarfile, "data_filter"):
        tar.extractall(dest, filter="data")
        return
    dest = Path(dest).resolve()
    for member in tar.getmembers():
        _check(member, dest)
    tar.extractall(dest)  # noqa: S202 - every member checked above
