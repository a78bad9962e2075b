"""The input layer: file arguments read with a size bound and a type check, outputs
checked before any work, numbers finite and in range, ids in their AWS shape, times
parsed in a bounded range. Each refusal is one line naming the argument and the fix.

A device or a FIFO given as a file is refused before it is opened: `/dev/zero` would
be read without end, a FIFO would block the open until a writer appears.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import stat
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

from clitools.errors import Unreadable, UsageError

MiB = 1 << 20

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
)


def kind_of(mode: int) -> str:
    """'a directory', 'a character device' ... for a mode that is not a regular file."""
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def _stat(path: Path, what: str) -> os.stat_result:
    try:
        return os.stat(path)
    except FileNotFoundError:
        raise Unreadable(f"{what} {path}: no such file") from None
    except NotADirectoryError:
        raise Unreadable(f"{what} {path}: a part of the path is a file, not a directory") from None
    except OSError as err:
        raise Unreadable(f"{what} {path}: cannot read: {err.strerror or err}") from None


def read_bytes(path: Path | str, what: str, limit: int) -> bytes:
    """The bytes of a regular file of at most `limit` bytes; UsageError for the wrong
    kind of file or one too large, Unreadable when it cannot be read."""
    path = Path(path)
    st = _stat(path, what)
    if not stat.S_ISREG(st.st_mode):
        raise UsageError(f"{what} {path}: {kind_of(st.st_mode)}, not a regular file; give a file")
    if st.st_size > limit:
        raise UsageError(f"{what} {path}: {st.st_size} bytes, more than the {_size(limit)} this reads")
    try:
        with open(path, "rb") as f:
            data = f.read(limit + 1)
    except OSError as err:
        raise Unreadable(f"{what} {path}: cannot read: {err.strerror or err}") from None
    if len(data) > limit:  # grew since the stat
        raise UsageError(f"{what} {path}: more than the {_size(limit)} this reads")
    return data


def read_text(path: Path | str, what: str, limit: int) -> str:
    """A UTF-8 text file (read_bytes' checks, then a strict decode)."""
    data = read_bytes(path, what, limit)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise UsageError(f"{what} {path}: not UTF-8 text (byte {data[err.start]:#04x} at offset {err.start})") from None


def _size(limit: int) -> str:
    return f"{limit // MiB} MiB" if limit >= MiB else f"{limit} bytes"


def require_dir(path: Path | str, what: str) -> Path:
    path = Path(path)
    st = _stat(path, what)
    if not stat.S_ISDIR(st.st_mode):
        raise UsageError(f"{what} {path}: {kind_of(st.st_mode)}, not a directory; give a directory")
    return path


def _existing_ancestor(path: Path) -> Path:
    probe = path
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    return probe


def check_output_file(path: Path | str, what: str) -> Path:
    """`path` can be written as a file (created, with its directories, if missing);
    checked before any work, so a typo costs nothing."""
    path = Path(path)
    try:
        if path.exists():
            st = os.stat(path)
            if not stat.S_ISREG(st.st_mode):
                raise UsageError(f"{what} {path}: {kind_of(st.st_mode)}; give a file name to write")
            if not os.access(path, os.W_OK):
                raise UsageError(f"{what} {path}: not writable by this user")
            return path
        probe = _existing_ancestor(path.parent)
        if not probe.is_dir():
            raise UsageError(f"{what} {path}: {probe} is a file, so the file cannot be created below it")
        if not os.access(probe, os.W_OK | os.X_OK):
            raise UsageError(f"{what} {path}: {probe} is not writable by this user")
        # The directories now: a path the kernel refuses (under /proc, a read-only
        # mount) fails here, before the work, not after it.
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise UsageError(f"{what} {path}: {err.strerror or err}") from None
    return path


def check_output_dir(path: Path | str, what: str) -> Path:
    """`path` is a directory that exists and is writable, or can be created."""
    path = Path(path)
    try:
        if path.exists() and not path.is_dir():
            raise UsageError(f"{what} {path}: an existing file, not a directory; give a directory (created if missing)")
        probe = _existing_ancestor(path)
        if not probe.is_dir():
            raise UsageError(f"{what} {path}: {probe} is a file, so the directory cannot be created there")
        if not os.access(probe, os.W_OK | os.X_OK):
            raise UsageError(f"{what} {path}: {probe} is not writable by this user")
    except OSError as err:
        raise UsageError(f"{what} {path}: {err.strerror or err}") from None
    return path


# --- argparse types: each refusal is argparse's one `argument --x: ...` line, exit 2 ------


def _typed(name: str, fn: Callable[[str], object]) -> Callable[[str], object]:
    fn.__name__ = name  # argparse names the type in "invalid <name> value"
    return fn


def number(kind: type, low: float | None = None, high: float | None = None, unit: str = "") -> Callable[[str], object]:
    """A finite int or float in [low, high]; nan, inf and out-of-range values refused."""
    word = "whole number" if kind is int else "number"
    span = _span(low, high, unit)

    def parse(text: str) -> object:
        try:
            value = kind(text)
        except (ValueError, OverflowError):
            raise argparse.ArgumentTypeError(f"{text!r} is not a {word}{span}") from None
        if not math.isfinite(value) or (low is not None and value < low) or (high is not None and value > high):
            raise argparse.ArgumentTypeError(f"{text!r} is out of range: give a {word}{span}")
        return value

    return _typed(word, parse)


def _span(low: float | None, high: float | None, unit: str) -> str:
    u = f" {unit}" if unit else ""
    if low is not None and high is not None:
        return f" from {low:g} to {high:g}{u}"
    if low is not None:
        return f" of at least {low:g}{u}"
    return f" of at most {high:g}{u}" if high is not None else ""


# EC2 and FSx ids: a prefix and 8 or 17 hex digits (EC2), 8 to 21 for FSx file systems.
INSTANCE_ID = re.compile(r"^i-(?:[0-9a-f]{8}|[0-9a-f]{17})$")
FILE_SYSTEM_ID = re.compile(r"^fs-[0-9a-f]{8,21}$")
# Capacity Block offering ids as EC2 prints them (`cb-` and 17 letters or digits).
OFFERING_ID = re.compile(r"^cb-[0-9a-z]{8,32}$")


def aws_id(pattern: re.Pattern[str], example: str) -> Callable[[str], object]:
    def parse(text: str) -> object:
        if not pattern.match(text):
            raise argparse.ArgumentTypeError(f"{text[:80]!r} is not shaped like an AWS id such as {example}")
        return text

    return _typed("id", parse)


def name(pattern: re.Pattern[str], rule: str) -> Callable[[str], object]:
    """A name that must match `pattern` (`rule` says what it is, for the message)."""

    def parse(text: str) -> object:
        if not pattern.fullmatch(text):
            raise argparse.ArgumentTypeError(f"{text[:80]!r}: {rule}")
        return text

    return _typed("name", parse)


# Times: the years a time may name. A date outside them is a typo, and an offset applied
# to a date at the calendar's edge (9999-12-31) would overflow.
EARLIEST_YEAR, LATEST_YEAR = 2000, 2200


def utc_time(text: str, what: str, zone_required: bool = False) -> datetime:
    """`2026-12-08` or an ISO-8601 time as an aware UTC time in a bounded range;
    UsageError (one line) otherwise. Without a zone the time is UTC, unless a zone is
    required (then a zone-less time is refused: it would silently mean local time)."""
    if zone_required:
        hint = "give an ISO-8601 time with a zone, e.g. 2026-12-08T12:00:00Z or +01:00"
    else:
        hint = "give a date like 2026-12-08 or a time like 2026-12-08T11:30:00Z"
    shown = text[:80]
    stripped = text.strip()
    try:
        when = datetime.fromisoformat(stripped.replace("z", "Z")) if stripped else None
    except ValueError:
        when = None
    if when is None:
        raise UsageError(f"{what} {shown}: is not an ISO-8601 time; {hint}")
    if when.tzinfo is None or when.utcoffset() is None:
        if zone_required:
            raise UsageError(f"{what} {shown}: has no zone; {hint}")
        when = when.replace(tzinfo=UTC)
    if not EARLIEST_YEAR <= when.year <= LATEST_YEAR:
        raise UsageError(f"{what} {shown}: year {when.year} is outside {EARLIEST_YEAR}-{LATEST_YEAR}; {hint}")
    return when.astimezone(UTC)


def not_before(when: datetime, now: datetime, what: str, slack: timedelta = timedelta(days=1)) -> None:
    if when < now - slack:
        raise UsageError(f"{what} {when.date()}: in the past (today is {now.date()}); give a later date")
