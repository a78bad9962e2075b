"""EC2's DescribeInstanceTopology for the local lanes, served by the AWS stand-in
(localcluster/aws_standin.py) in the controller machine's network namespace.

The lane records each machine it launches in `<state>/topology.json` (`place`): its
instance id and the network nodes EC2 would report for it. The handler answers the
controller's refresh (nodeside/topology.py) the way the API does [TOPO-API]: only the
instances asked for, `MaxResults` refused beside `InstanceIds`, at most 100 ids, and
small pages (two instances) so every lane refresh of three or more nodes follows
`NextToken`. A test moves an instance by calling `place` again.

Run by the lane as `python -m localcluster.aws_standin --handlers
localcluster.topology_standin:handlers --state <state>`.
"""

from __future__ import annotations

import fcntl
import json
from pathlib import Path

from localcluster.aws_standin import Handlers, StandinError

STATE_FILE = "topology.json"
PAGE = 2
MAX_IDS = 100


def lane_network_nodes(serial: int) -> list[str]:
    """Where the lane puts its n-th machine: one top and middle node, two leaves, the
    machines alternating between them (so a 2-node lane already has two leaves)."""
    return ["nn-0c0ffee000000001", "nn-0c0ffee000000011", f"nn-0c0ffee00000011{serial % 2}"]


def place(state: Path, instance_id: str, network_nodes: list[str], instance_type: str = "p5.48xlarge") -> None:
    """Record (or move) one instance in the stand-in's table."""
    state.mkdir(parents=True, exist_ok=True)
    path = state / STATE_FILE
    with open(state / ".topology.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        table = json.loads(path.read_text()) if path.exists() else {}
        table[instance_id] = {"InstanceType": instance_type, "NetworkNodes": list(network_nodes)}
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(table, indent=1, sort_keys=True))
        tmp.replace(path)


def placed(state: Path) -> dict[str, dict]:
    path = state / STATE_FILE
    return json.loads(path.read_text()) if path.exists() else {}


def handlers(state: Path) -> Handlers:
    state = Path(state)

    def describe_instance_topology(params: dict) -> dict:
        ids = params.get("InstanceIds") or []
        if ids and "MaxResults" in params:
            raise StandinError(
                "InvalidParameterCombination", "The parameter InstanceIds cannot be used with the parameter MaxResults"
            )
        if len(ids) > MAX_IDS:
            raise StandinError("InvalidParameterValue", f"at most {MAX_IDS} instance IDs may be specified")
        table = placed(state)
        items = [
            {
                "InstanceId": iid,
                "InstanceType": table[iid]["InstanceType"],
                "NetworkNodes": table[iid]["NetworkNodes"],
                "AvailabilityZone": "us-east-2b",
                "ZoneId": "use2-az2",
            }
            for iid in (ids or sorted(table))
            if iid in table
        ]
        start = int(params.get("NextToken") or 0)
        out: dict = {"Instances": items[start : start + PAGE]}
        if start + PAGE < len(items):
            out["NextToken"] = str(start + PAGE)
        return out

    return {("ec2", "DescribeInstanceTopology"): describe_instance_topology}
