"""Auto Scaling for the lanes: the groups' machines, and TerminateInstanceInAutoScalingGroup.

Handlers for localcluster/aws_standin.py (`--handlers localcluster.asg_standin:handlers`).
The state directory holds `groups.json`, {group name: [instance ids]}, which the lane
keeps as it launches machines. A terminate request is answered as Auto Scaling answers it
[ASG-TERMINATE]: an instance of no group is a ValidationError, a decrementing terminate
is refused (the repair agent never asks for one, and the lane's groups keep their size),
and otherwise the instance leaves its group and the request is appended to
`terminations.jsonl`. The lane reads that file and does what Auto Scaling then does:
terminates the machine and launches a new one into the same group
(`LocalCluster.follow_terminations`).
"""

from __future__ import annotations

import datetime as dt
import json
import threading
import uuid
from pathlib import Path

from localcluster.aws_standin import Handlers, StandinError

GROUPS = "groups.json"
TERMINATIONS = "terminations.jsonl"
_lock = threading.Lock()


def read_groups(state: Path) -> dict[str, list[str]]:
    try:
        return json.loads((Path(state) / GROUPS).read_text())
    except (OSError, ValueError):
        return {}


def write_groups(state: Path, groups: dict[str, list[str]]) -> None:
    tmp = Path(state) / f".{GROUPS}.tmp"
    tmp.write_text(json.dumps(groups, indent=1, sort_keys=True))
    tmp.replace(Path(state) / GROUPS)


def add_instance(state: Path, group: str, instance_id: str) -> None:
    """The lane launched `instance_id` into `group`."""
    with _lock:
        groups = read_groups(state)
        groups.setdefault(group, [])
        if instance_id not in groups[group]:
            groups[group].append(instance_id)
        write_groups(state, groups)


def terminations(state: Path) -> list[dict]:
    path = Path(state) / TERMINATIONS
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def handlers(state: Path) -> Handlers:
    state = Path(state)

    def terminate(params: dict) -> dict:
        iid = params["InstanceId"]
        with _lock:
            groups = read_groups(state)
            group = next((g for g, ids in groups.items() if iid in ids), None)
            if group is None:
                raise StandinError(
                    "ValidationError", f"Instance Id not found - No managed instance found for instance ID: {iid}"
                )
            if params["ShouldDecrementDesiredCapacity"]:
                raise StandinError("ValidationError", "the lane's groups keep their size: decrementing is not stood in")
            groups[group].remove(iid)
            write_groups(state, groups)
            now = dt.datetime.now(dt.UTC)
            activity = {
                "ActivityId": str(uuid.uuid4()),
                "AutoScalingGroupName": group,
                "Description": f"Terminating EC2 instance: {iid}",
                "Cause": f"At {now:%Y-%m-%dT%H:%M:%SZ} instance {iid} was taken out of service in response to a user request.",
                "StartTime": now,
                "StatusCode": "InProgress",
                "Progress": 0,
            }
            with open(state / TERMINATIONS, "a") as f:
                f.write(json.dumps({"instance_id": iid, "group": group, "activity": activity["ActivityId"]}) + "\n")
        return {"Activity": activity}

    return {("autoscaling", "TerminateInstanceInAutoScalingGroup"): terminate}
