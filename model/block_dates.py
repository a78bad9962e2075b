"""A declared block's dates against EC2's record of the reservation (preflight, `ops status`).

A later EndDate on the same reservation id is an extension [CB-EXTEND]: the program
keeps scaling in and draining at the declared end until the stack file says the new
one; after `pulumi up` the running nodes read it from the published block ends
(model/block_ends.py). An earlier end or a moved start is a stack file that names
another block than it thinks. Each problem gives the exact one-line edit.
"""

from __future__ import annotations

from datetime import UTC, datetime

from model.capacity import CapacityBlock, iso_utc
from model.paths import loc_to_path


def date_edit_command(i: int, key: str, value: datetime, stack: str | None = None) -> str:
    """The one-line stack edit that declares a block's date as EC2 records it."""
    where = f" --stack {stack}" if stack else ""
    return (
        f"pulumi config set{where} --path '{loc_to_path(('capacity', 'capacity_blocks', i, key))}' '{iso_utc(value)}'"
    )


def _message(b: CapacityBlock, key: str, declared: datetime, actual: datetime) -> str:
    if key == "end" and actual > declared:
        return (
            f"block {b.reservation_id} was extended: EC2 says it ends at {iso_utc(actual)}, the stack file "
            f"{iso_utc(declared)}; until the stack file says so the group scales in and Slurm drains the block "
            f"at the old end. Declare the new end, then `pulumi up` (running nodes learn it without a restart)"
        )
    if key == "end":
        return (
            f"block {b.reservation_id} ends at {iso_utc(actual)}, earlier than the declared {iso_utc(declared)} "
            f"(an end never moves earlier: is this entry's reservation id another block?); EC2 terminates its "
            f"instances 30 minutes before {iso_utc(actual)}, so declare that end"
        )
    return (
        f"block {b.reservation_id} starts at {iso_utc(actual)}, not {iso_utc(declared)}; the group would scale "
        f"out at the wrong time: declare the block's start"
    )


def date_problems(
    i: int, b: CapacityBlock, start: datetime | None, end: datetime | None, stack: str | None = None
) -> list[tuple[str, str]]:
    """(config path, message with the edit) per declared date EC2 disagrees with; `start`,
    `end`: the reservation's StartDate/EndDate (None: not known)."""
    out = []
    for key, actual in (("start", start), ("end", end)):
        declared = getattr(b, key, None)
        if declared is None or actual is None:
            continue
        declared = declared if declared.tzinfo else declared.replace(tzinfo=UTC)
        if declared == actual:
            continue
        edit = f"{date_edit_command(i, key, actual, stack)} (or in the stack file: {key}: '{iso_utc(actual)}')"
        out.append(
            (loc_to_path(("capacity", "capacity_blocks", i, key)), f"{_message(b, key, declared, actual)}: {edit}")
        )
    return out
