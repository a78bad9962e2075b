"""A cluster's life against a model of the documented semantics (tests/model/test_timeline.py).

`World` holds what AWS has (groups, their instances, scheduled actions, the real Capacity
Blocks) and what the engine stored (the state). `up(t, raw)` runs the REAL program under
the plan's mocks at `t` (offline.mocks.run_under_mocks, cached by config, schedule and
EC2's answer) and applies the diff the way the engine and provider do; `tick(t)` plays
Auto Scaling and EC2 forward. Every rule is cited in docs/sources.md:

- the engine diffs the declared inputs against the stored state, not against AWS; with
  `refresh` the state is first read back from AWS [P-PROJECT]; an input in
  `ignore_changes` is never sent after creation [P-IGNORE];
- the group update sends min/max/desired only when each changed against the state [TF-ASG];
- a scheduled action with a start time in the past is refused; a one-time action sets the
  sizes at its time and is gone once it ran [ASG-PUT-SCHED];
- a launch before the block starts fails [CB-FLEET]; EC2 terminates a block's instances
  30 minutes before its end [CB-USE]; an extension moves the end, same id [CB-EXTEND];
- group tag changes reach only instances launched later [ASG-TAGS]; so a node drains at
  the end it booted with, unless the program publishes the block's end (decision D3);
- an S3 object takes at most 10 tags [S3-OBJ-TAGS].

Violations of the invariants are collected in `World.violations` (strings naming the time).
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pulumi
import yaml

from model.block_ends import BLOCK_ENDS_KEY
from model.capacity import EC2_BLOCK_END_LEAD_MINUTES, iso_utc
from model.config import parse_config
from model.controller import controller_block
from model.errors import ConfigError
from model.preflight import asg_name
from model.schedule import CREATION_LEAD, cluster_schedule, schedule_problems
from offline.mocks import PlanMocks, run_under_mocks
from tests.support.mocks import REGION, valid_raw

REPO = Path(__file__).resolve().parents[2]
ASG = "aws:autoscaling/group:Group"
SCHED = "aws:autoscaling/schedule:Schedule"
OBJ = "aws:s3/bucketObjectv2:BucketObjectv2"
STEP = timedelta(minutes=5)
LAUNCH = timedelta(minutes=15)  # launch to a running node (the model's launch time)
APPLY = timedelta(minutes=2)  # when an update's requests reach AWS after it starts
FSX_CREATE = timedelta(minutes=20)  # a first up creates groups and actions after FSx
EC2_END = timedelta(minutes=EC2_BLOCK_END_LEAD_MINUTES)
S3_OBJECT_TAGS = 10
T0 = datetime(2026, 12, 1, 0, 0, tzinfo=UTC)
STACK = "dev"  # run_under_mocks' stack: the groups' fixed names derive from it


def project_refresh() -> bool:
    """Whether Pulumi.yaml makes every run refresh first (`options: refresh: always`)."""
    project = yaml.safe_load((REPO / "Pulumi.yaml").read_text())
    return (project.get("options") or {}).get("refresh") == "always"


def block(name: str, rid: str, count: int, start: datetime, end: datetime) -> dict[str, Any]:
    return {
        "name": name,
        "reservation_id": rid,
        "instance_count": count,
        "availability_zone": "us-east-2b",
        "start": iso_utc(start),
        "end": iso_utc(end),
    }


def cluster(
    blocks: list[dict[str, Any]],
    nodes: int | None = None,
    tags: dict[str, str] | None = None,
    controller: dict[str, str] | None = None,
) -> dict:
    """A stack config over `blocks`; with two or more blocks and no `controller`, the
    controller is hosted by the first block (the config then requires it named)."""
    raw = valid_raw()
    raw["capacity"] = {"nodes": nodes or sum(b["instance_count"] for b in blocks), "capacity_blocks": blocks}
    if tags is not None:
        raw["tags"] = tags
    if controller is None and len(blocks) >= 2:
        controller = {"block": blocks[0]["name"]}
    if controller is not None:
        raw["controller"] = controller
    return raw


_CACHE: dict[tuple, dict[str, Any] | None] = {}
STATS = {"program_runs": 0, "cache_hits": 0}


def _t(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def live_groups(groups: dict[str, Group]) -> dict[str, dict[str, Any]]:
    """The world's groups as the program's Auto Scaling lookups see them (getGroup):
    the sizes Auto Scaling holds now and the group's tags (GpuClusterBlock names the block
    a group follows; its reservation target is not in the data source)."""
    return {
        name: {
            **g.sizes,
            "tags": [{"key": k, "value": v, "propagateAtLaunch": True} for k, v in sorted(g.tags.items())],
        }
        for name, g in groups.items()
    }


def declare(
    raw: dict, now: datetime, ec2: dict[str, list[datetime]], groups: dict[str, Group] | None = None
) -> dict[str, Any] | None:
    """What the real program declares at `now` ({"resources", "outputs"}), None if refused.

    EC2's answers come from the model's real blocks (an extension EC2 knows and the
    config does not is what preflight sees), the Auto Scaling lookups from the world's
    `groups` (none: a first deployment). Cached by everything the run reads."""
    try:
        cfg = parse_config(copy.deepcopy(raw))
    except ConfigError:
        return None  # refused before anything is created, as `pulumi up` refuses it
    # Only the groups the program looks up (the controller's and its host block's) key
    # the cache: the others' sizes change every tick and are never read.
    host = controller_block(cfg.controller, cfg.capacity)
    read = {asg_name(STACK, n) for n in ("controller", f"block-{host}")}
    live = live_groups({n: g for n, g in (groups or {}).items() if n in read})
    answers = {
        rid: {
            "state": "active" if s <= now else "scheduled",
            "reservationType": "capacity-block",
            "instanceType": raw["instance_type"],
            "availabilityZone": "us-east-2b",
            "instanceCount": next(
                b["instance_count"] for b in raw["capacity"]["capacity_blocks"] if b["reservation_id"] == rid
            ),
            "startDate": iso_utc(s),
            "endDate": iso_utc(e),
        }
        for rid, (s, e) in ec2.items()
        if any(b["reservation_id"] == rid for b in raw["capacity"]["capacity_blocks"])
    }
    refused = tuple(path for path, _ in schedule_problems(cfg, now))
    key = (
        json.dumps(raw, sort_keys=True),
        cluster_schedule(cfg, now).groups,
        refused,
        json.dumps(answers, sort_keys=True),
        json.dumps(live, sort_keys=True),
    )
    if key in _CACHE:
        STATS["cache_hits"] += 1
        return _CACHE[key]
    STATS["program_runs"] += 1
    mocks = PlanMocks(REGION, subnet_az="us-east-2b", blocks=answers, groups=live)
    try:
        _, _, outputs, _ = run_under_mocks(raw, REGION, mocks=mocks, now=now)
        result: dict[str, Any] | None = {
            "resources": {(r["type"], r["name"]): r["inputs"] for r in mocks.resources if r["custom"]},
            "outputs": outputs,
        }
    except pulumi.RunError:
        result = None
    _CACHE[key] = result
    return result


def published_ends(resources: dict[tuple[str, str], dict]) -> dict[str, datetime]:
    """Block ends the program publishes to running nodes (decision D3): the object at
    BLOCK_ENDS_KEY, read as the controller's block_end_fetch reads it (per block its
    reservation id and end). Empty when the program publishes none (on-demand stacks)."""
    for (typ, _), inputs in resources.items():
        if typ == OBJ and inputs.get("key") == BLOCK_ENDS_KEY:
            doc = json.loads(inputs["content"])
            return {b["reservation_id"]: _t(b["end"]) for b in doc["blocks"].values()}
    return {}


@dataclass
class Instance:
    group: str
    role: str
    reservation: str | None
    running_at: datetime
    tags: dict[str, str]
    drained: bool = False


@dataclass
class Group:
    name: str
    sizes: dict[str, int]
    target: str | None
    tags: dict[str, str]
    instances: list[Instance] = field(default_factory=list)
    failing_since: datetime | None = None


def _sizes(inputs: dict) -> dict[str, int]:
    return {k: int(inputs[k]) for k in ("minSize", "maxSize", "desiredCapacity")}


def _target(inputs: dict) -> str | None:
    spec = inputs.get("capacityReservationSpecification") or {}
    ids = (spec.get("capacityReservationTarget") or {}).get("capacityReservationIds") or []
    return ids[0] if ids else None


class World:
    def __init__(self, refresh: bool, ignore_changes: dict[str, set[str]] | None = None):
        self.refresh = refresh
        self.ignore = ignore_changes or {}
        self.ec2: dict[str, list[datetime]] = {}
        self.groups: dict[str, Group] = {}  # by AWS group name
        self.actions: dict[tuple[str, str], tuple[datetime, int]] = {}
        self.state: dict[tuple[str, str], dict] = {}
        self.applied: tuple[datetime, dict, dict] | None = None  # (time, raw, declared)
        self.last_failure: dict[str, datetime] = {}
        self.violations: list[str] = []
        self._seen: set[str] = set()
        self.checks = 0

    def _flag(self, t: datetime, what: str) -> None:
        """A violation, once per kind (a group below size is reported when it starts)."""
        kind = what.split(" since ")[0]
        if kind not in self._seen:
            self._seen.add(kind)
            self.violations.append(f"{iso_utc(t)}: {what}")

    # --- EC2 ---------------------------------------------------------------------
    def buy(self, rid: str, start: datetime, end: datetime) -> None:
        self.ec2[rid] = [start, end]

    def extend(self, rid: str, days: int) -> None:
        self.ec2[rid][1] += timedelta(days=days)

    def fail(self, t: datetime, group: str) -> None:
        """An instance of `group` (AWS name) fails its status checks: Auto Scaling replaces it."""
        g = self.groups.get(group)
        live = [i for i in g.instances if i.running_at <= t] if g else []
        if g and live:
            g.instances.remove(live[0])
            self.last_failure[group] = t

    # --- the engine --------------------------------------------------------------
    def _refresh(self) -> None:
        for key in list(self.state):
            typ, _ = key
            inputs = self.state[key]
            if typ == ASG and inputs["name"] in self.groups:
                inputs.update(self.groups[inputs["name"]].sizes)
            elif typ == SCHED and (inputs["autoscalingGroupName"], inputs["scheduledActionName"]) not in self.actions:
                del self.state[key]

    def preview(self, t: datetime, raw: dict) -> bool:
        return declare(raw, t, self.ec2, self.groups) is not None

    def up(self, t: datetime, raw: dict) -> bool:
        declared = declare(raw, t, self.ec2, self.groups)
        if declared is None:
            return False  # refused before any change
        if self.refresh:
            self._refresh()
        at = t + (FSX_CREATE if not self.state else APPLY)
        resources = declared["resources"]
        kept = {b["reservation_id"] for b in raw["capacity"]["capacity_blocks"]}
        for key, inputs in resources.items():
            if key[0] == OBJ and len(inputs.get("tags") or {}) > S3_OBJECT_TAGS:
                self._flag(t, f"S3 refuses {key[1]} with {len(inputs['tags'])} tags")
        for key in [k for k in self.state if k not in resources]:
            self._delete(t, key, kept)
        for key, inputs in resources.items():
            if key[0] == ASG:
                self._group(t, key, inputs, kept)
        for key, inputs in resources.items():
            old = self.state.get(key)
            if key[0] == SCHED and old != inputs:
                if old is not None:  # a new name or group replaces the action [TF-FORCENEW]
                    self.actions.pop((old["autoscalingGroupName"], old["scheduledActionName"]), None)
                self._put_action(at, inputs)
        self.state = {k: copy.deepcopy(v) for k, v in resources.items() if k[0] in (ASG, SCHED, OBJ)}
        self.applied = (t, raw, declared)
        return True

    def _delete(self, t: datetime, key: tuple[str, str], kept: set[str]) -> None:
        inputs = self.state[key]
        if key[0] == ASG:
            g = self.groups.pop(inputs["name"], None)
            if g and g.target in kept and any(i.role == "worker" and i.running_at <= t for i in g.instances):
                self._flag(t, f"the edit deleted {g.name} with running workers")
        elif key[0] == SCHED:
            self.actions.pop((inputs["autoscalingGroupName"], inputs["scheduledActionName"]), None)

    def _group(self, t: datetime, key: tuple[str, str], inputs: dict, kept: set[str]) -> None:
        tags = {x["key"]: x["value"] for x in inputs.get("tags") or []}
        old = self.state.get(key)
        g = self.groups.get(inputs["name"])
        if old is None or g is None:
            self.groups[inputs["name"]] = Group(inputs["name"], _sizes(inputs), _target(inputs), tags)
            return
        ignored = self.ignore.get(ASG, set())
        for k, v in _sizes(inputs).items():
            if k not in ignored and old[k] != v:  # [TF-ASG]: only what changed is sent
                g.sizes[k] = v
        dropped = g.target not in kept  # the edit removed this group's block: its nodes go
        g.target, g.tags = _target(inputs), tags  # [ASG-TAGS]: running instances keep theirs
        extra = len(g.instances) - g.sizes["desiredCapacity"]
        for inst in g.instances[len(g.instances) - extra :] if extra > 0 else []:
            if inst.role == "worker" and inst.running_at <= t and not dropped:
                self._flag(t, f"the edit shrank {g.name} and terminated a running worker")
        if extra > 0:
            del g.instances[len(g.instances) - extra :]

    def _put_action(self, at: datetime, inputs: dict) -> None:
        start = _t(inputs["startTime"])
        if start <= at:
            self._flag(at, f"Auto Scaling refuses {inputs['scheduledActionName']} at {inputs['startTime']} (past)")
            return
        self.actions[(inputs["autoscalingGroupName"], inputs["scheduledActionName"])] = (
            start,
            int(inputs["desiredCapacity"]),
        )

    # --- Auto Scaling and EC2 ------------------------------------------------------
    def tick(self, t: datetime) -> None:
        for key, (start, size) in sorted(self.actions.items(), key=lambda kv: kv[1][0]):
            if start <= t and key[0] in self.groups:
                self.groups[key[0]].sizes = dict.fromkeys(("minSize", "maxSize", "desiredCapacity"), size)
                del self.actions[key]
        margin = timedelta(minutes=self._margin())
        published = published_ends(self.applied[2]["resources"]) if self.applied else {}
        for g in self.groups.values():
            ending = [i for i in g.instances if i.reservation and t >= self.ec2[i.reservation][1] - EC2_END]
            if ending:  # a node left in an old block (the group moved on) is replaced
                g.instances = [i for i in g.instances if i not in ending]
                self.last_failure[g.name] = t
            for inst in g.instances:
                self._drain(t, inst, published, margin)
            self._reconcile(t, g)
        self._check(t, margin)

    def _margin(self) -> int:
        return self.applied[1]["capacity"].get("block_end_margin_minutes", 40) if self.applied else 40

    def _drain(self, t: datetime, inst: Instance, published: dict[str, datetime], margin: timedelta) -> None:
        if inst.drained or inst.reservation is None or inst.running_at > t:
            return
        known = published.get(inst.reservation) or _t(inst.tags["GpuClusterBlockEnd"])
        real = self.ec2[inst.reservation][1]
        if t >= known - margin:
            inst.drained = True
            if known < real:
                self._flag(
                    t, f"a node of {inst.group} drained at its old end {iso_utc(known)}; the block ends {iso_utc(real)}"
                )

    def _reconcile(self, t: datetime, g: Group) -> None:
        want = g.sizes["desiredCapacity"]
        if len(g.instances) > want:
            del g.instances[want:]
        if len(g.instances) >= want:
            g.failing_since = None
            return
        start, end = self.ec2[g.target] if g.target else (T0, datetime.max.replace(tzinfo=UTC))
        if t < start or t >= end - EC2_END:  # [CB-FLEET] / the block is ending
            g.failing_since = g.failing_since or t
            if t - g.failing_since > CREATION_LEAD:
                self._flag(t, f"{g.name} has failed launches since {iso_utc(g.failing_since)}")
            return
        role = g.tags.get("GpuClusterRole", "worker")
        while len(g.instances) < want:
            g.instances.append(Instance(g.name, role, g.target, t + LAUNCH, dict(g.tags)))
        g.failing_since = None

    def _check(self, t: datetime, margin: timedelta) -> None:
        """During every applied block the groups (the controller's too) run at size."""
        if self.applied is None:
            return
        since, _, declared = self.applied
        for name, out in (declared["outputs"].get("node_groups") or {}).items():
            rid = out.get("capacity_block_id")
            if rid is None:
                continue
            start, _ = self.ec2[rid]
            ready = max(start, since, self.last_failure.get(out["asg_name"], since)) + LAUNCH + STEP
            stop = _t(out["block_end"]) - margin
            if not ready <= t < stop:
                continue
            self.checks += 1
            g = self.groups.get(out["asg_name"])
            running = sum(1 for i in g.instances if i.running_at <= t) if g else 0
            if running < out["size"]:
                self._flag(t, f"{name} runs {running} of {out['size']} during its block")


Event = tuple[datetime, str, Any]


def play(world: World, events: list[Event], until: datetime) -> World:
    """Apply `events` ((time, kind, arg): up/preview raw, buy (rid, start, end), extend
    (rid, days), fail group) in order, ticking Auto Scaling every STEP from T0."""
    pending = sorted(events, key=lambda e: e[0])
    t = T0
    while t <= until:
        while pending and pending[0][0] <= t:
            _, kind, arg = pending.pop(0)
            if kind == "up":
                world.up(t, arg)
            elif kind == "preview":
                world.preview(t, arg)
            elif kind == "buy":
                world.buy(*arg)
            elif kind == "extend":
                world.extend(*arg)
            elif kind == "fail":
                world.fail(t, arg)
        world.tick(t)
        t += STEP
    return world
