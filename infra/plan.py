"""Offline plan: run the real program under Pulumi's mocks, write what it would do.

    python -m infra.plan --stack dev --out DIR [--set dotted.path=value ...]

Reads `Pulumi.<stack>.yaml`, applies `--set` overrides (paths relative to the
`gpu-cluster:cluster` object, e.g. `capacity.nodes=4`, `capacity.capacity_blocks.0.instance_count=4`,
values parsed as YAML; `aws:region=...` sets the region), runs `infra.stack.run()` with
deterministic mocks and writes:
  DIR/plan.json                       every resource (type, name, urn, inputs as the engine
                                      sees them: camelCase) and the resolved stack outputs
  DIR/userdata/<name>/user-data       exact bytes handed to EC2 before base64
  DIR/userdata/<name>/files/<path>    every file the node gets (from the user data itself
                                      or from the S3 payload)
  DIR/userdata/<name>/payload.tar.gz  the S3 payload (plan.json shows the object's
                                      contentBase64 as a summary)
  DIR/userdata/index.json             launch template -> user-data directory
All templates share one user data today, so <name> is `node`; if templates ever
diverge, each distinct user data gets the launch template's name.
Bad config: the `path: message` lines on stderr, exit status 2. Output is byte-stable:
the program runs at the fixed time PLAN_NOW (which Capacity Blocks have started decides
group sizes and scheduled actions), never at the wall-clock time.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pulumi
import yaml
from pulumi.runtime import rpc

from model.config import CONFIG_KEY, CONFIG_NAMESPACE, STACK_SECRET_PREFIX

REPO = Path(__file__).resolve().parent.parent
FSX_ID = "fs-0123456789abcdef0"
FSX_MOUNT_NAME = "abcdefgh"
# The time plans and tests run the program at; the dev stack's block starts after it.
PLAN_NOW = datetime(2026, 12, 1, 0, 0, tzinfo=UTC)
ACCOUNT = "123456789012"

_ID_PREFIX = {
    "aws:ec2/vpc:Vpc": "vpc-",
    "aws:ec2/subnet:Subnet": "subnet-",
    "aws:ec2/internetGateway:InternetGateway": "igw-",
    "aws:ec2/eip:Eip": "eipalloc-",
    "aws:ec2/natGateway:NatGateway": "nat-",
    "aws:ec2/routeTable:RouteTable": "rtb-",
    "aws:ec2/securityGroup:SecurityGroup": "sg-",
    "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule": "sgr-",
    "aws:vpc/securityGroupEgressRule:SecurityGroupEgressRule": "sgr-",
    "aws:ec2/launchTemplate:LaunchTemplate": "lt-",
    "aws:ec2/placementGroup:PlacementGroup": "pg-",
    "aws:fsx/dataRepositoryAssociation:DataRepositoryAssociation": "dra-",
}


def _json_default(value: Any) -> str:
    """YAML reads an unquoted `2026-12-08T11:30:00Z` as a datetime; config is JSON text."""
    if isinstance(value, datetime):
        return value.isoformat().replace("+00:00", "Z")
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def _hex(name: str, n: int = 17) -> str:
    return hashlib.sha256(name.encode()).hexdigest()[:n]


# How the engine hands a secret input to the mocks: {SIG_KEY: SECRET_SIG, "value": ...}.
_SIG_KEY, _SECRET_SIG = rpc._special_sig_key, rpc._special_secret_sig
SECRET_PLACEHOLDER = "[secret]"
# Stack secrets the plan cannot decrypt (a stack file's `secure:` values) run as this.
PLAN_SECRET_VALUE = "plan-placeholder-not-a-real-secret"


def _plain(value: Any) -> Any:
    """Mock inputs as JSON: ints arrive as floats from the engine; keep them whole.
    Secret values are recorded as "[secret]", as `pulumi preview` shows them."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict) and value.get(_SIG_KEY) == _SECRET_SIG:
        return SECRET_PLACEHOLDER
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


class PlanMocks(pulumi.runtime.Mocks):
    """Deterministic ids and outputs; records every resource and invoke."""

    def __init__(
        self,
        region: str,
        subnet_az: str | None = None,
        subnet_vpc: str = "vpc-0a1b2c3d4e5f60718",
        blocks: dict[str, dict[str, Any]] | None = None,
        zones: tuple[str, ...] | None = None,
        default_route: str | None = "nat-0a1b2c3d4e5f60718",
        vpc_dns_support: bool = True,
        ami_names: dict[str, str] | None = None,
    ):
        """`blocks`: reservation id -> getCapacityBlockReservation answer (an id not in it
        fails like an unknown id); `zones`: the region's zones (default: a, b, c);
        `ami_names`: AMI id -> name (default: an Ubuntu 24.04 DLAMI name)."""
        self.region = region
        self.subnet_az = subnet_az
        self.subnet_vpc = subnet_vpc
        self.blocks = blocks or {}
        self.zones = zones if zones is not None else tuple(f"{region}{z}" for z in "abc")
        self.default_route = default_route
        self.vpc_dns_support = vpc_dns_support
        self.ami_names = ami_names or {}
        self.resources: list[dict[str, Any]] = []
        self.calls: list[dict[str, Any]] = []

    def new_resource(self, args):
        inputs = _plain(dict(args.inputs))
        self.resources.append({"type": args.typ, "name": args.name, "custom": bool(args.custom), "inputs": inputs})
        state = dict(args.inputs)
        typ, name = args.typ, args.name
        if not args.custom:
            return f"{name}_id", state
        rid = _ID_PREFIX.get(typ, "") + _hex(name)
        arn_name = state.get("name") or name
        if typ == "aws:fsx/lustreFileSystem:LustreFileSystem":
            rid = FSX_ID
            state.update(
                dnsName=f"{FSX_ID}.fsx.{self.region}.amazonaws.com",
                mountName=FSX_MOUNT_NAME,
                arn=f"arn:aws:fsx:{self.region}:123456789012:file-system/{FSX_ID}",
            )
        elif typ == "aws:ec2/launchTemplate:LaunchTemplate":
            state.update(
                latestVersion=1, defaultVersion=1, arn=f"arn:aws:ec2:{self.region}:123456789012:launch-template/{rid}"
            )
        elif typ == "aws:iam/role:Role":
            state.setdefault("name", f"{name}-{_hex(name, 7)}")
            rid = state["name"]
            state["arn"] = f"arn:aws:iam::123456789012:role/{rid}"
        elif typ == "aws:iam/instanceProfile:InstanceProfile":
            state.setdefault("name", f"{name}-{_hex(name, 7)}")
            rid = state["name"]
            state["arn"] = f"arn:aws:iam::123456789012:instance-profile/{rid}"
        elif typ == "aws:autoscaling/group:Group":
            rid = state.get("name") or name
            state["arn"] = (
                f"arn:aws:autoscaling:{self.region}:123456789012:autoScalingGroup:{_hex(name, 8)}:autoScalingGroupName/{rid}"
            )
        elif typ == "aws:s3/bucket:Bucket":
            bucket = state.get("bucket") or f"{state.get('bucketPrefix', name + '-')}{_hex(name, 12)}"
            rid = bucket
            state.update(bucket=bucket, arn=f"arn:aws:s3:::{bucket}")
        elif typ == "aws:ec2/placementGroup:PlacementGroup":
            state.setdefault("name", f"{name}-{_hex(name, 7)}")
        else:
            state.setdefault("arn", f"arn:aws:mock:{self.region}:123456789012:{arn_name}")
        return rid, state

    def call(self, args):
        self.calls.append({"token": args.token, "args": _plain(dict(args.args))})
        token, a = args.token, args.args
        if token == "aws:ec2/getSubnet:getSubnet":
            sid = a.get("id")
            return {
                "id": sid,
                "availabilityZone": self.subnet_az,
                "vpcId": self.subnet_vpc,
                "cidrBlock": "10.0.0.0/18",
                "arn": f"arn:aws:ec2:{self.region}:{ACCOUNT}:subnet/{sid}",
            }
        if token == "aws:ec2/getRouteTable:getRouteTable":
            routes = [{"cidrBlock": "10.0.0.0/16", "gatewayId": "local"}]
            if self.default_route:
                key = "natGatewayId" if self.default_route.startswith("nat-") else "gatewayId"
                routes.append({"cidrBlock": "0.0.0.0/0", key: self.default_route})
            return {
                "id": "rtb-0a1b2c3d4e5f60718",
                "routeTableId": "rtb-0a1b2c3d4e5f60718",
                "vpcId": self.subnet_vpc,
                "subnetId": a.get("subnetId"),
                "routes": routes,
            }
        if token == "aws:ec2/getVpc:getVpc":
            return {
                "id": a.get("id"),
                "cidrBlock": "10.0.0.0/16",
                "enableDnsSupport": self.vpc_dns_support,
                "enableDnsHostnames": True,
                "state": "available",
            }
        if token == "aws:index/getAvailabilityZones:getAvailabilityZones":
            return {
                "id": self.region,
                "names": list(self.zones),
                "zoneIds": [f"use2-az{i + 1}" for i in range(len(self.zones))],
            }
        if token == "aws:ec2/getAmi:getAmi":
            ami = a["filters"][0]["values"][0]
            name = self.ami_names.get(ami, "Deep Learning Base OSS Nvidia Driver GPU AMI (Ubuntu 24.04) 20261120")
            return {
                "id": ami,
                "imageId": ami,
                "name": name,
                "description": name,
                "architecture": "x86_64",
                "ownerId": "898082745236",
                "state": "available",
            }
        if token == "aws:index/getCallerIdentity:getCallerIdentity":
            return {
                "id": ACCOUNT,
                "accountId": ACCOUNT,
                "arn": f"arn:aws:iam::{ACCOUNT}:user/plan",
                "userId": "AIDAPLANMOCK",
            }
        if token == "aws:ec2/getCapacityBlockReservation:getCapacityBlockReservation":
            rid = a.get("id")
            if rid not in self.blocks:
                # A failed invoke, as the engine reports a provider error (the program
                # sees an exception it can catch; raising here would fail the whole run).
                return {}, [("id", f"reading EC2 Capacity Block Reservation ({rid}): couldn't find resource")]
            return {"id": rid, "capacityBlockId": rid, **self.blocks[rid]}
        raise NotImplementedError(f"no mock for invoke {args.token}; add one to infra/plan.py PlanMocks")


def run_with_mocks(
    program,
    mocks: PlanMocks,
    stack: str = "dev",
    config: dict[str, str] | None = None,
    secret_keys: list[str] | None = None,
):
    """Run `program()` (declares resources, returns anything Output-able) under `mocks`.

    Waits for every registration, then returns (resolved value, urn lookup) where the
    lookup maps "name|type" to the resource's URN (which carries its parent's type).
    """
    from pulumi.runtime.mocks import MockMonitor
    from pulumi.runtime.settings import SETTINGS
    from pulumi.runtime.stack import run_pulumi_func
    from pulumi.runtime.sync_await import _sync_await

    monitor = MockMonitor(mocks)
    pulumi.runtime.set_mocks(mocks, project="gpu-cluster", stack=stack, preview=False, monitor=monitor)
    pulumi.runtime.set_all_config(config or {}, secret_keys or [])
    SETTINGS.rpc_manager.clear()
    SETTINGS.outputs.clear()
    resolved: dict[str, Any] = {}

    def program_and_wait():
        resolved["value"] = _sync_await(pulumi.Output.from_input(program()).future())

    _sync_await(run_pulumi_func(program_and_wait))
    urns = {
        reg.urn.split("::")[-1] + "|" + reg.urn.split("::")[2].split("$")[-1]: reg.urn
        for reg in monitor.resources.values()
    }
    return resolved.get("value"), urns


def declared_blocks(raw_cluster: Any, now: datetime = PLAN_NOW) -> dict[str, dict[str, Any]]:
    """getCapacityBlockReservation answers that agree with the stack file's blocks: the
    plan shows what the program does when preflight passes (state from `now`)."""
    out: dict[str, dict[str, Any]] = {}
    if not isinstance(raw_cluster, dict):
        return out
    instance_type = raw_cluster.get("instance_type")
    for b in (raw_cluster.get("capacity") or {}).get("capacity_blocks") or ():
        if not isinstance(b, dict) or "reservation_id" not in b:
            continue
        start, end = (_json_default(v) if isinstance(v, datetime) else v for v in (b.get("start"), b.get("end")))
        try:
            started = start is not None and datetime.fromisoformat(str(start).replace("Z", "+00:00")) <= now
        except (TypeError, ValueError):
            started = False  # the config check reports the bad date
        out[str(b["reservation_id"])] = {
            "state": "active" if started else "scheduled",
            "reservationType": "capacity-block",
            "instanceType": instance_type,
            "availabilityZone": b.get("availability_zone"),
            "instanceCount": b.get("instance_count"),
            "startDate": str(start) if start else "",
            "endDate": str(end) if end else "",
        }
    return out


def run_under_mocks(
    raw_cluster: Any,
    region: str,
    stack: str = "dev",
    subnet_az: str | None = None,
    mocks: PlanMocks | None = None,
    now: datetime = PLAN_NOW,
    extra_config: dict[str, str] | None = None,
    secrets: dict[str, str] | None = None,
    allow_example_values: bool = True,
):
    """Run `infra.stack.run()` with `raw_cluster` as config under fresh mocks, at `now`.

    Plans render the shipped stack files' example ids (`model/placeholders.py`); with
    `allow_example_values=False` the program refuses them as `pulumi up` does.

    Returns (mocks, urns, outputs, node_files). Raises pulumi.RunError for bad config.
    `subnet_az` is the AZ the mocked existing subnet reports (default: the configured AZ);
    the mocked Capacity Blocks agree with the config unless `mocks` says otherwise.
    `extra_config` / `secrets`: further config keys (`gpu-cluster:registry_password_ngc`),
    plain or as `pulumi config set --secret` stores them.
    """
    if subnet_az is None and isinstance(raw_cluster, dict):
        subnet_az = (raw_cluster.get("network") or {}).get("availability_zone")
    if mocks is None:
        mocks = PlanMocks(region or "us-east-1", subnet_az=subnet_az, blocks=declared_blocks(raw_cluster, now))
    config = {f"{CONFIG_NAMESPACE}:{CONFIG_KEY}": json.dumps(raw_cluster, default=_json_default)}
    if region:
        config["aws:region"] = region
    config.update(extra_config or {})
    config.update(secrets or {})

    def program():
        from infra import stack as stack_mod

        result = stack_mod.run(now=now, allow_example_values=allow_example_values)
        return pulumi.Output.all(pulumi.Output.from_input(result.outputs), result.node_files)

    (outputs, node_files), urns = run_with_mocks(
        program, mocks, stack=stack, config=config, secret_keys=sorted(secrets or {})
    )
    return mocks, urns, outputs, node_files


def load_stack_config(stack: str, root: Path = REPO) -> tuple[dict[str, Any], str]:
    path = root / f"Pulumi.{stack}.yaml"
    if not path.exists():
        raise SystemExit(
            f"no stack file {path.name}; stacks: " + ", ".join(sorted(p.name[7:-5] for p in root.glob("Pulumi.*.yaml")))
        )
    doc = yaml.safe_load(path.read_text()) or {}
    config = doc.get("config") or {}
    return config.get(f"{CONFIG_NAMESPACE}:{CONFIG_KEY}"), config.get("aws:region")


def load_stack_secrets(stack: str, root: Path = REPO) -> tuple[dict[str, str], dict[str, str]]:
    """(secret, plain) registry passwords of the stack file (`gpu-cluster:registry_password_*`).

    The plan cannot decrypt `secure:` values and never needs them: they run as
    PLAN_SECRET_VALUE. A plain value is passed as plain config, so the plan fails on it
    exactly as `pulumi up` would (infra/stack.py wants it stored with --secret).
    """
    doc = yaml.safe_load((root / f"Pulumi.{stack}.yaml").read_text()) or {}
    secret: dict[str, str] = {}
    plain: dict[str, str] = {}
    for key, value in (doc.get("config") or {}).items():
        if not key.startswith(f"{CONFIG_NAMESPACE}:{STACK_SECRET_PREFIX}"):
            continue
        if isinstance(value, dict) and "secure" in value:
            secret[key] = PLAN_SECRET_VALUE
        else:
            plain[key] = str(value)
    return secret, plain


def apply_override(raw: Any, assignment: str) -> Any:
    """`a.b.0.c=value` (or `a.b[0].c=value`) applied to a copy of `raw`."""
    path, sep, text = assignment.partition("=")
    if not sep or not path:
        raise ValueError(f"--set {assignment!r}: use dotted.path=value")
    value = yaml.safe_load(text) if text != "" else ""
    parts = [p for p in path.replace("[", ".").replace("]", "").split(".") if p]
    raw = json.loads(json.dumps(raw if raw is not None else {}, default=_json_default))
    node = raw
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        if isinstance(node, list):
            idx = int(part)
            while len(node) <= idx:
                node.append({})
            if last:
                node[idx] = value
            else:
                node = node[idx]
        else:
            if last:
                node[part] = value
            else:
                nxt = parts[i + 1]
                node = node.setdefault(part, [] if nxt.isdigit() else {})
    return raw


def write_plan(
    stack: str, out: Path, overrides: list[str] = (), root: Path = REPO, secrets: dict[str, str] | None = None
) -> dict[str, Any]:
    """`secrets`: stack secret values to run with (tests), over the stack file's placeholders."""
    raw, region = load_stack_config(stack, root)
    file_secrets, plain = load_stack_secrets(stack, root)
    for assignment in overrides:
        if assignment.startswith("aws:region="):
            region = assignment.partition("=")[2]
        else:
            raw = apply_override(raw, assignment)
    mocks, urns, outputs, node_files = run_under_mocks(
        raw, region, stack=stack, extra_config=plain, secrets={**file_secrets, **(secrets or {})}
    )

    resources = []
    for r in mocks.resources:
        r = {**r, "urn": urns.get(f"{r['name']}|{r['type']}")}
        if r["type"] == "aws:s3/bucketObjectv2:BucketObjectv2" and "contentBase64" in r["inputs"]:
            body = base64.b64decode(r["inputs"]["contentBase64"])
            summary = f"<{len(body)} bytes, sha256 {hashlib.sha256(body).hexdigest()}: see userdata/*/payload.tar.gz>"
            r["inputs"] = {**r["inputs"], "contentBase64": summary}
        resources.append(r)
    resources.sort(key=lambda r: (r["urn"] or "", r["type"], r["name"]))
    plan = {
        "generated_by": f"python -m infra.plan --stack {stack} (infra/plan.py, Pulumi mocks); do not edit",
        "stack": stack,
        "region": region,
        "overrides": list(overrides),
        "resources": resources,
        "outputs": outputs,
    }

    out.mkdir(parents=True, exist_ok=True)
    (out / "plan.json").write_text(json.dumps(plan, indent=2, sort_keys=True) + "\n")

    # Distinct user data, as EC2 receives it (decoded from the templates' inputs).
    by_bytes: dict[bytes, list[str]] = {}
    for r in resources:
        if r["type"] == "aws:ec2/launchTemplate:LaunchTemplate":
            by_bytes.setdefault(base64.b64decode(r["inputs"]["userData"]), []).append(r["name"])
    index = {}
    ud_root = out / "userdata"
    for data, names in sorted(by_bytes.items(), key=lambda kv: sorted(kv[1])[0]):
        dirname = "node" if len(by_bytes) == 1 else sorted(names)[0]
        target = ud_root / dirname
        target.mkdir(parents=True, exist_ok=True)
        (target / "user-data").write_bytes(data)
        if data == node_files.user_data:
            (target / "payload.tar.gz").write_bytes(node_files.s3_payload[1])
            for path, content in sorted(node_files.files.items()):
                dest = target / "files" / path.lstrip("/")
                dest.parent.mkdir(parents=True, exist_ok=True)
                dest.write_bytes(content)
        for n in names:
            index[n] = dirname
    if by_bytes:
        (ud_root / "index.json").write_text(json.dumps(index, indent=2, sort_keys=True) + "\n")
    return plan


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m infra.plan", description=__doc__.split("\n")[0])
    parser.add_argument("--stack", required=True, help="stack name: reads Pulumi.<stack>.yaml")
    parser.add_argument("--out", required=True, type=Path, help="output directory")
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="PATH=VALUE",
        help="override a config value (path relative to gpu-cluster:cluster); repeatable",
    )
    args = parser.parse_args(argv)
    try:
        write_plan(args.stack, args.out, args.overrides)
    except pulumi.RunError as err:
        print(str(err), file=sys.stderr)
        return 2
    except ValueError as err:
        print(str(err), file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION", "true")
    sys.exit(main())
