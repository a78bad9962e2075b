"""find-blocks: Capacity Block offerings, the stack-file snippet, and a guarded purchase.

Offerings come from DescribeCapacityBlockOfferings (at most 6, closest start dates
first; blocks start and end at 11:30 UTC [CB-USE]). A purchase cannot be cancelled
or refunded [CB-USE], so `--purchase` shows the offering and buys only after the
operator types its id (or passes --yes-i-understand-no-refund in a script).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from typing import Any

from clitools import exits, inputs
from clitools.errors import UsageError
from model.preflight import iso
from ops.aws import OpsError, call
from ops.context import Context

PLATFORM = "Linux/UNIX"  # the DLAMI's platform; a block launches only its own [CB-LAUNCH]
NO_REFUND = (
    "A Capacity Block purchase cannot be cancelled or refunded: you pay the whole "
    "upfront fee even if you never launch an instance."
)


@dataclass(frozen=True)
class Offering:
    offering_id: str
    instance_type: str
    instance_count: int
    availability_zone: str
    start: str  # ISO-8601 UTC
    end: str
    duration_hours: int
    upfront_fee: str
    currency: str

    @classmethod
    def from_api(cls, o: dict[str, Any]) -> Offering:
        return cls(
            o["CapacityBlockOfferingId"],
            o["InstanceType"],
            o["InstanceCount"],
            o["AvailabilityZone"],
            iso(o["StartDate"]),
            iso(o["EndDate"]),
            o.get("CapacityBlockDurationHours", 0),
            o.get("UpfrontFee", "?"),
            o.get("CurrencyCode", ""),
        )


# How far ahead a search may reach: a sanity bound on --earliest/--latest (blocks are
# offered weeks ahead, and last at most 182 days [CB-USE]); a later date is a typo.
SEARCH_HORIZON = timedelta(days=366 + 182)


def parse_day(text: str, what: str, now: datetime) -> datetime:
    """`2026-12-08` or a full ISO-8601 time, as UTC, from today to SEARCH_HORIZON ahead."""
    when = inputs.utc_time(text, what)
    inputs.not_before(when, now, what)
    if when > now + SEARCH_HORIZON:
        raise UsageError(f"{what} {when.date()}: more than {SEARCH_HORIZON.days} days ahead; give a nearer date")
    return when


def search(
    ctx: Context, instance_type: str, count: int, days: int, earliest: datetime | None, latest: datetime | None
) -> list[Offering]:
    # 1-day steps up to 14 days, then 7-day steps up to 182 days [CB-USE].
    if days < 1 or days > 182 or (days > 14 and days % 7):
        raise UsageError(f"--days {days}: blocks last 1-14 days, or a multiple of 7 days up to 182")
    params: dict[str, Any] = {"InstanceType": instance_type, "InstanceCount": count, "CapacityDurationHours": days * 24}
    if earliest:
        params["StartDateRange"] = earliest
    if latest:
        params["EndDateRange"] = latest
    ec2 = ctx.session.client("ec2")
    offerings, token = [], None
    while True:
        page = call(
            ec2,
            "describe_capacity_block_offerings",
            "searching Capacity Block offerings",
            **params,
            **({"NextToken": token} if token else {}),
        )
        offerings += [Offering.from_api(o) for o in page.get("CapacityBlockOfferings", [])]
        token = page.get("NextToken")
        if not token:
            return sorted(offerings, key=lambda o: (o.start, o.end, o.availability_zone, o.offering_id))


def snippet(block_name: str, count: int, az: str, start: str, end: str, reservation_id: str | None) -> str:
    """The `capacity.capacity_blocks` entry for a block, as YAML to paste."""
    rid = reservation_id or "cr-...   # the id --purchase prints; offerings have no reservation id yet"
    return (
        "capacity_blocks:\n"
        f"  - name: {block_name}\n"
        f"    reservation_id: {rid}\n"
        f"    instance_count: {count}\n"
        f"    availability_zone: {az}\n"
        f"    start: '{start}'\n"
        f"    end: '{end}'\n"
    )


def table(offerings: list[Offering]) -> str:
    rows = [("OFFERING", "START (UTC)", "END (UTC)", "AZ", "COUNT", "UPFRONT FEE")]
    rows += [
        (
            o.offering_id,
            o.start,
            o.end,
            o.availability_zone,
            str(o.instance_count),
            f"{o.upfront_fee} {o.currency}".strip(),
        )
        for o in offerings
    ]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows) + "\n"


def _confirm(ctx: Context, o: Offering, yes: bool) -> None:
    ctx.progress(
        f"About to buy {o.offering_id}: {o.instance_count} x {o.instance_type} in {o.availability_zone}, "
        f"{o.start} to {o.end}, upfront fee {o.upfront_fee} {o.currency}."
    )
    ctx.progress(NO_REFUND)
    if yes:
        return
    if not ctx.interactive:
        raise UsageError(
            "refusing to buy without confirmation: run in a terminal and type the offering id, "
            "or pass --yes-i-understand-no-refund"
        )
    answer = ctx.prompt(f"Type the offering id ({o.offering_id}) to buy it, anything else to stop: ").strip()
    if answer != o.offering_id:
        raise OpsError("not confirmed; nothing was bought")


def purchase(ctx: Context, o: Offering, cluster_tag: dict[str, str]) -> dict[str, Any]:
    tags = [{"Key": k, "Value": v} for k, v in sorted(cluster_tag.items())]
    params: dict[str, Any] = {"CapacityBlockOfferingId": o.offering_id, "InstancePlatform": PLATFORM}
    if tags:
        params["TagSpecifications"] = [{"ResourceType": "capacity-reservation", "Tags": tags}]
    response = call(ctx.session.client("ec2"), "purchase_capacity_block", f"buying {o.offering_id}", **params)
    reservation: dict[str, Any] = response["CapacityReservation"]
    return reservation


def run(ctx: Context, args: Any) -> int:
    now = ctx.clock.now()
    earliest = parse_day(args.earliest, "--earliest", now) if args.earliest is not None else None
    latest = parse_day(args.latest, "--latest", now) if args.latest is not None else None
    if earliest and latest and latest <= earliest + timedelta(hours=args.days * 24):
        raise UsageError(f"--latest must leave room for {args.days} days after --earliest")
    offerings = search(ctx, args.instance_type, args.count, args.days, earliest, latest)
    wanted = args.purchase or args.show
    if wanted and wanted not in {o.offering_id for o in offerings}:
        raise OpsError(
            f"offering {wanted} is not among the current offerings for these parameters "
            "(offerings change often); search again and pick one from the list"
        )
    chosen = next((o for o in offerings if o.offering_id == wanted), offerings[0] if offerings else None)
    result: dict[str, Any] = {"offerings": [asdict(o) for o in offerings], "chosen": asdict(chosen) if chosen else None}
    reservation = None
    if args.purchase and chosen:
        _confirm(ctx, chosen, args.yes_i_understand_no_refund)
        reservation = purchase(ctx, chosen, {})
        result["purchased"] = {
            "reservation_id": reservation["CapacityReservationId"],
            "state": reservation.get("State", ""),
            "start": iso(reservation.get("StartDate")),
            "end": iso(reservation.get("EndDate")),
        }
    if chosen:
        start = iso(reservation["StartDate"]) if reservation and reservation.get("StartDate") else chosen.start
        end = iso(reservation["EndDate"]) if reservation and reservation.get("EndDate") else chosen.end
        result["snippet"] = snippet(
            args.name,
            chosen.instance_count,
            chosen.availability_zone,
            start,
            end,
            reservation["CapacityReservationId"] if reservation else None,
        )
    if args.json:
        ctx.print(json.dumps(result, indent=2, sort_keys=True))
        return exits.OK if offerings else exits.FAILED
    if chosen is None:  # no offerings (a --show id not among them was refused above)
        ctx.print(
            f"no Capacity Block offering for {args.count} x {args.instance_type} for {args.days} days "
            "in this range; try other dates, fewer instances or a shorter duration"
        )
        return exits.FAILED
    _print(ctx, offerings, chosen, reservation, result["snippet"])
    return 0


def _print(
    ctx: Context, offerings: list[Offering], chosen: Offering, reservation: dict[str, Any] | None, snip: str
) -> None:
    ctx.print(table(offerings).rstrip("\n"))
    ctx.print()
    if reservation:
        ctx.print(
            f"Bought {chosen.offering_id}: reservation {reservation['CapacityReservationId']} "
            f"({reservation.get('State', '?')}). Under gpu-cluster:cluster.capacity in Pulumi.<stack>.yaml:"
        )
    else:
        ctx.print(
            f"Stack-file snippet for {chosen.offering_id} (under gpu-cluster:cluster.capacity; "
            f"network.availability_zone must be {chosen.availability_zone}):"
        )
    ctx.print(snip.rstrip("\n"))
    if not reservation:
        ctx.print()
        ctx.print(f"Buy it with --purchase {chosen.offering_id}. {NO_REFUND}")
