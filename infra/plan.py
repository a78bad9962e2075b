"""Offline plan: run the real program under Pulumi's mocks, write what it would do.

    python -m infra.plan --stack dev --out DIR [--config-file FILE] [--set PATH=VALUE ...]

Reads `Pulumi.<stack>.yaml` (or FILE), applies `--set` overrides, runs `infra.stack.run()`
with deterministic mocks and writes:
  DIR/plan.json                       every resource (type, name, urn, inputs as the engine
                                      sees them: camelCase) and the resolved stack outputs
  DIR/userdata/<name>/user-data       exact bytes handed to EC2 before base64
  DIR/userdata/<name>/files/<path>    every file the node gets (from the user data itself
                                      or from the S3 payload)
  DIR/userdata/<name>/payload.tar.gz  the S3 payload (plan.json shows the object's
                                      contentBase64 as a summary)
  DIR/userdata/index.json             launch template -> user-data directory
All templates share one user data today, so <name> is `node`; if templates ever
diverge, each distinct user data gets the launch template's name. On success it prints
what it wrote (files, resource count); warnings go to stderr as `warning: path: message`.

`--set` takes the paths of `pulumi config set --path`: `capacity.nodes=4`,
`capacity.capacity_blocks[0].instance_count=4`, `tags["team.name"]=ml`, with or without
the `cluster.` (or `gpu-cluster:cluster.`) prefix; `aws:region=...` sets the region.
Values are stored as Pulumi stores them (see parse_set_value). Secure values
(`key: {secure: ...}`) cannot be decrypted offline: the plan uses SECRET_PLACEHOLDER
and never writes or prints the ciphertext.

Exit status: 0 written; 2 bad input, one line per problem (`Pulumi.x.yaml:LINE:COL: ...`,
`--set PATH: ...`, `--out DIR: ...`, or the config's `path: message`), nothing written;
1 an internal error (a bug), one line (GPU_CLUSTER_DEBUG=1 prints the traceback). Output
is byte-stable: the program runs at the fixed time PLAN_NOW (which Capacity Blocks have
started decides group sizes and scheduled actions), never at the wall-clock time.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import logging
import os
import re
import sys
import traceback
from collections.abc import Callable
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import grpc
import pulumi
import yaml
from pulumi.runtime import rpc

from model.containers import STACK_SECRET_PREFIX
from model.errors import one_line
from model.paths import CONFIG_KEY, CONFIG_NAMESPACE, ROOT

REPO = Path(__file__).resolve().parent.parent
FSX_ID = "fs-0123456789abcdef0"
FSX_MOUNT_NAME = "abcdefgh"
# The time plans and tests run the program at; the dev stack's block starts after it.
PLAN_NOW = datetime(2026, 12, 1, 0, 0, tzinfo=UTC)
ACCOUNT = "123456789012"
# Set to print the traceback of an internal error (a bug) instead of one line.
DEBUG_ENV = "GPU_CLUSTER_DEBUG"

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
# How plan.json shows a secret input (as `pulumi preview` does).
SECRET_SHOWN = "[secret]"


def _plain(value: Any) -> Any:
    """Mock inputs as JSON: ints arrive as floats from the engine; keep them whole.
    Secret values are recorded as "[secret]", as `pulumi preview` shows them."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict) and value.get(_SIG_KEY) == _SECRET_SIG:
        return SECRET_SHOWN
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


class EngineInvokeError(grpc.RpcError):
    """A data source's provider error as the engine returns it over gRPC: the SDK turns
    it into an exception the program can catch (any other exception raised by a mock's
    `call` is fatal to the whole run, which no real provider error is)."""

    def __init__(self, details: str):
        super().__init__(details)
        self._details = details

    def code(self) -> grpc.StatusCode:
        return grpc.StatusCode.UNKNOWN

    def details(self) -> str:
        return self._details


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
        fail_invokes: dict[str, str | Callable[[dict[str, Any]], str | None]] | None = None,
    ):
        """`blocks`: reservation id -> getCapacityBlockReservation answer (an id not in it
        fails like an unknown id); `zones`: the region's zones (default: a, b, c);
        `ami_names`: AMI id -> name (default: an Ubuntu 24.04 DLAMI name); `fail_invokes`:
        invoke token -> the provider's error text (or a function of the invoke's args
        giving it, None to answer normally), raised as the engine reports it."""
        self.region = region
        self.subnet_az = subnet_az
        self.subnet_vpc = subnet_vpc
        self.blocks = blocks or {}
        self.zones = zones if zones is not None else tuple(f"{region}{z}" for z in "abc")
        self.default_route = default_route
        self.vpc_dns_support = vpc_dns_support
        self.ami_names = ami_names or {}
        self.fail_invokes = fail_invokes or {}
        self.resources: list[dict[str, Any]] = []
        self.calls: list[dict[str, Any]] = []
        # (severity, message) of everything the program logged (pulumi.log.*): under a
        # real engine these are the diagnostics `pulumi preview` prints.
        self.log: list[tuple[str, str]] = []

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
        failure = self.fail_invokes.get(token)
        if callable(failure):
            failure = failure(_plain(dict(a)))
        if failure is not None:
            raise EngineInvokeError(f"invocation of {token} returned an error: {failure}")
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


class _EngineLog(logging.Handler):
    """The mock engine's log (pulumi.log.* in the program) into a list."""

    def __init__(self, sink: list[tuple[str, str]]):
        super().__init__(logging.INFO)
        self.sink = sink

    def emit(self, record: logging.LogRecord) -> None:
        self.sink.append((record.levelname.lower(), record.getMessage()))


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
    logger = logging.getLogger("gpu-cluster.plan.engine")
    logger.handlers[:] = [_EngineLog(getattr(mocks, "log", []))]
    logger.setLevel(logging.INFO)
    logger.propagate = False
    pulumi.runtime.set_mocks(mocks, project="gpu-cluster", stack=stack, preview=False, monitor=monitor, logger=logger)
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
    capacity = raw_cluster.get("capacity")
    blocks = capacity.get("capacity_blocks") if isinstance(capacity, dict) else None
    # Any shape is possible here: the config check after this reports what is wrong.
    for b in blocks if isinstance(blocks, list) else ():
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


def plan_mocks(raw_cluster: Any, region: Any, subnet_az: str | None = None, now: datetime = PLAN_NOW) -> PlanMocks:
    """Mocks under which preflight passes: the existing subnet is in the configured AZ
    (unless `subnet_az` says otherwise) and the Capacity Blocks agree with the config."""
    if subnet_az is None and isinstance(raw_cluster, dict) and isinstance(raw_cluster.get("network"), dict):
        subnet_az = raw_cluster["network"].get("availability_zone")
    return PlanMocks(region or "us-east-1", subnet_az=subnet_az, blocks=declared_blocks(raw_cluster, now))


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
    if mocks is None:
        mocks = plan_mocks(raw_cluster, region, subnet_az, now)
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


# --- input: the stack file and --set ------------------------------------------------
#
# Everything below turns bad input into `InputError` lines (file, --set or --out first,
# then what it is about), never an exception with a traceback: a typo in a stack file
# is the most common failure of this CLI and must read like the config errors do.

# `pulumi config set --path --secret` stores a leaf as `{secure: <ciphertext>}`; only
# the Pulumi engine can decrypt it. The plan puts this stand-in in its place (inside
# AWS's tag-value character set, so a secret tag value does not trip a tag rule) and
# never copies the ciphertext anywhere.
SECRET_PLACEHOLDER = "secret-not-decrypted"
# Stack secrets outside the cluster object (`gpu-cluster:registry_password_*`) run as the same.
PLAN_SECRET_VALUE = SECRET_PLACEHOLDER
# Pulumi stack names: letters, digits, '-', '_' and '.'; also keeps `--stack` inside
# the repository (it becomes a file name).
_STACK_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")
# A stack file is a few hundred values; a YAML alias bomb expands into millions.
_MAX_VALUES = 100_000


# YAML types with no JSON form (the engine hands the program JSON).
_YAML_ONLY = {bytes: "binary data (!!binary)", set: "a set (!!set)", tuple: "a pair list (!!pairs)"}


class InputError(ValueError):
    """Bad input: one line per problem, each naming the file, `--set` or `--out` first."""

    def __init__(self, lines: list[str]):
        self.lines = list(lines)
        super().__init__("\n".join(self.lines))


class _StackLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys, as Pulumi's own YAML reader does
    (PyYAML would silently keep the last one, and the plan would not be what
    `pulumi preview` refuses)."""

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            seen: dict[tuple[str, str], yaml.Node] = {}
            for key_node, _ in node.value:
                if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = (key_node.tag, key_node.value)
                if key in seen:
                    raise yaml.constructor.ConstructorError(
                        "while reading a mapping",
                        node.start_mark,
                        f"duplicate key {key_node.value!r} (first at line {seen[key].start_mark.line + 1})",
                        key_node.start_mark,
                    )
                seen[key] = key_node
        return super().construct_mapping(node, deep)


def _type_name(value: Any) -> str:
    if value is None:
        return "empty (null)"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return f"a {type(value).__name__}"


def _join(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    if re.fullmatch(r"[A-Za-z_$][A-Za-z0-9_$-]*", key):
        return f"{path}.{key}"
    return f"{path}[{json.dumps(key)}]"


def is_secure(value: Any) -> bool:
    """Pulumi's secure leaf: a mapping whose only key is `secure` (reserved by Pulumi)."""
    return isinstance(value, dict) and len(value) == 1 and "secure" in value


def to_config_tree(value: Any, path: str, secrets: list[str], problems: list[str]) -> Any:
    """YAML as the JSON the Pulumi engine hands the program: timestamps and dates as
    ISO text, keys as strings, secure leaves replaced by SECRET_PLACEHOLDER (their paths
    collected in `secrets`). What JSON cannot carry is a problem at its path."""
    count = [0]
    active: set[int] = set()

    def walk(v: Any, at: str) -> Any:
        count[0] += 1
        if count[0] > _MAX_VALUES:
            raise InputError([f"{path}: more than {_MAX_VALUES} values (a YAML alias expanding into itself?)"])
        if is_secure(v):
            secrets.append(at)
            return SECRET_PLACEHOLDER
        if isinstance(v, (dict, list)):
            if id(v) in active:
                problems.append(f"{at}: a YAML alias that contains itself; write the value out")
                return None
            active.add(id(v))
            try:
                if isinstance(v, dict):
                    out = {}
                    for k, item in v.items():
                        key = json.dumps(k) if isinstance(k, (bool, type(None))) else k
                        key = key if isinstance(key, str) else str(key)
                        out[key] = walk(item, _join(at, key))
                    return out
                return [walk(item, _join(at, i)) for i, item in enumerate(v)]
            finally:
                active.discard(id(v))
        if isinstance(v, datetime):
            return _json_default(v)
        if isinstance(v, date):
            return v.isoformat()
        if v is None or isinstance(v, (str, int, float, bool)):
            return v
        problems.append(
            f"{at}: {_YAML_ONLY.get(type(v), _type_name(v))} is not a config value; write a string, number, list or mapping"
        )
        return None

    return walk(value, path)


def load_stack_secrets(path: Path) -> tuple[dict[str, str], dict[str, str]]:
    """(secret, plain) registry passwords of the stack file (`gpu-cluster:registry_password_*`).

    The plan cannot decrypt `secure:` values and never needs them: they run as
    PLAN_SECRET_VALUE. A plain value is passed as plain config, so the plan fails on it
    exactly as `pulumi up` would (infra/stack.py wants it stored with --secret).
    """
    doc = yaml.load(path.read_text(), Loader=_StackLoader) or {}
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


def _mark(node: yaml.Node | None) -> str:
    return f":{node.start_mark.line + 1}:{node.start_mark.column + 1}" if node is not None else ""


def _child(node: yaml.Node | None, key: str) -> yaml.Node | None:
    if isinstance(node, yaml.MappingNode):
        for k, v in node.value:
            if isinstance(k, yaml.ScalarNode) and k.value == key:
                return v
    return None


def stack_file(stack: str, root: Path = REPO, config_file: Path | None = None) -> Path:
    if config_file is not None:
        return Path(config_file)
    if not _STACK_NAME.match(stack):
        raise InputError([f"--stack {stack!r}: a stack name is letters, digits, '-', '_' and '.'"])
    return root / f"Pulumi.{stack}.yaml"


def read_stack_file(path: Path, root: Path = REPO) -> tuple[Any, Any, list[str], list[str]]:
    """(raw cluster object, aws:region, secret paths, problems) from a stack file.

    Raises InputError when the file cannot be used at all (missing, unreadable, not
    YAML, not a `config:` mapping)."""
    name = str(path) if path.parent != root else path.name
    if not path.exists():
        stacks = ", ".join(sorted(p.name[7:-5] for p in root.glob("Pulumi.*.yaml"))) or "none"
        raise InputError([f"{name}: no such stack file; stacks here: {stacks} (pulumi stack init NAME, then copy one)"])
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as err:
        raise InputError(
            [f"{name}: not UTF-8 text (byte {err.object[err.start]:#04x} at offset {err.start})"]
        ) from None
    except OSError as err:
        raise InputError([f"{name}: cannot read: {err.strerror or err}"]) from None
    loader = _StackLoader(text)
    try:
        node = loader.get_single_node()
        doc = loader.construct_document(node) if node is not None else None
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        where = f":{mark.line + 1}:{mark.column + 1}" if mark else ""
        what = " ".join(str(err.problem or err.context or "cannot be read").split())
        ctx = f" ({' '.join(err.context.split())})" if err.context and err.problem else ""
        raise InputError([f"{name}{where}: YAML error: {what}{ctx}"]) from None
    except yaml.YAMLError as err:
        raise InputError([f"{name}: YAML error: {' '.join(str(err).split())}"]) from None
    except RecursionError:
        raise InputError([f"{name}: nested too deeply to be a stack file"]) from None
    finally:
        loader.dispose()
    usage = "a stack file is a mapping with `config:` holding `gpu-cluster:cluster:` (see Pulumi.dev.yaml)"
    if doc is None:
        raise InputError([f"{name}: empty; {usage}"])
    if not isinstance(doc, dict):
        raise InputError([f"{name}{_mark(node)}: the file is {_type_name(doc)}, not a mapping; {usage}"])
    config_node = _child(node, "config")
    config = doc.get("config")
    if config is None:
        raise InputError([f"{name}{_mark(config_node or node)}: no `config:` mapping; {usage}"])
    if not isinstance(config, dict):
        raise InputError([f"{name}{_mark(config_node)}: `config:` is {_type_name(config)}, not a mapping; {usage}"])
    problems: list[str] = []
    secrets: list[str] = []
    cluster_node = _child(config_node, ROOT)
    raw = config.get(ROOT)
    if is_secure(raw):
        raise InputError(
            [
                f"{name}{_mark(cluster_node)}: {ROOT} is one secure value; the offline plan cannot decrypt it. "
                f"Keep the object in plain text and make only secret leaves secure "
                f"(pulumi config set --path --secret 'cluster.<key>' ...)"
            ]
        )
    if raw is not None and not isinstance(raw, dict):
        raise InputError(
            [
                f"{name}{_mark(cluster_node)}: {ROOT} is {_type_name(raw)}, not a mapping of settings "
                "(name, instance_type, network, capacity, ...); see Pulumi.dev.yaml"
            ]
        )
    raw = to_config_tree(raw, ROOT, secrets, problems)
    region = config.get("aws:region")
    if region is not None and not isinstance(region, str):
        region_node = _child(config_node, "aws:region")
        what = (
            "a secure value (the region is not a secret; keep it in plain text)"
            if is_secure(region)
            else _type_name(region)
        )
        problems.append(f"{name}{_mark(region_node)}: aws:region is {what}; write a region name such as us-east-2")
    return raw, region, secrets, problems


def load_stack_config(stack: str, root: Path = REPO, config_file: Path | None = None) -> tuple[Any, Any]:
    """(raw `gpu-cluster:cluster` object, aws:region) of a stack; InputError if unusable."""
    raw, region, _, problems = read_stack_file(stack_file(stack, root, config_file), root)
    if problems:
        raise InputError(problems)
    return raw, region


# --- `--set`: the path syntax of `pulumi config set --path` ---------------------------
#
# Paths: `a.b`, `a[0]`, `a["key.with.dots"]` (with `\"` inside quotes), optionally led
# by `cluster.` or `gpu-cluster:cluster.`; a bare `.N` on a list indexes it too (this
# CLI accepted `capacity_blocks.0.x` first). As in Pulumi, an index may be the list's
# length (appends) and no more, and missing maps/lists on the way are created.
# Values: what `pulumi config set --path` stores (`true`/`false` are booleans, whole
# numbers without a leading zero are integers, anything else is a string, so `2.15`
# and `yes` stay strings), plus one extension: a value starting with `[`, `{` or a
# quote is YAML flow (a list, a mapping, a quoted string), which Pulumi can only
# build with one command per leaf.


def parse_config_path(text: str) -> list[str | int]:
    """Pulumi's property path grammar; ValueError with the reason."""
    parts: list[str | int] = []
    i = 0
    while i < len(text):
        c = text[i]
        if c == ".":
            i += 1
        elif c == "[":
            if text.startswith('["', i):
                key, j = [], i + 2
                while True:
                    if j >= len(text):
                        raise ValueError("missing closing quote in a quoted key")
                    if text[j] == '"':
                        j += 1
                        break
                    if text.startswith('\\"', j):
                        key.append('"')
                        j += 2
                    else:
                        key.append(text[j])
                        j += 1
                if j >= len(text) or text[j] != "]":
                    raise ValueError("missing ']' after a quoted key")
                parts.append("".join(key))
                i = j + 1
            else:
                close = text.find("]", i)
                if close == -1:
                    raise ValueError("missing ']' after a list index")
                index = text[i + 1 : close]
                if not re.fullmatch(r"\d+", index):
                    raise ValueError(f'[{index}] is not a list index (a whole number from 0, or ["key"] for a key)')
                parts.append(int(index))
                i = close + 1
        else:
            j = i
            while j < len(text) and text[j] not in ".[":
                j += 1
            parts.append(text[i:j])
            i = j
    if not parts:
        raise ValueError("empty path")
    if any(p == "" for p in parts):
        raise ValueError("empty key")
    return parts


def parse_set_value(text: str) -> Any:
    if text[:1] in ("[", "{", '"', "'"):
        try:
            return yaml.load(text, Loader=_StackLoader)
        except yaml.MarkedYAMLError as err:
            mark = err.problem_mark
            where = f" at character {mark.column + 1}" if mark and mark.line == 0 else ""
            raise ValueError(f"the value does not parse as YAML flow{where}: {err.problem or err.context}") from None
    if text in ("true", "false"):
        return text == "true"
    if re.fullmatch(r"-?(0|[1-9][0-9]*)", text):
        return int(text)
    return text


def _display(parts: list[str | int]) -> str:
    path = "cluster"
    for p in parts:
        path = _join(path, p)
    return path


def apply_override(raw: Any, assignment: str, secrets: list[str] | None = None) -> Any:
    """A copy of `raw` with one `PATH=VALUE` applied (syntax above); InputError if not."""
    path_text, sep, text = assignment.partition("=")
    shown = path_text or assignment
    if not sep or not path_text.strip():
        raise InputError([f"--set {shown}: expected PATH=VALUE, e.g. capacity.nodes=4 or 'tags[\"team.name\"]=ml'"])

    def fail(msg: str) -> InputError:
        return InputError([f"--set {path_text}: {msg}"])

    ns, colon, rest = path_text.partition(":")
    if colon and not re.search(r"[.\[]", ns):
        if ns != CONFIG_NAMESPACE:
            raise fail(f"only {ROOT} (and aws:region) can be set here, not the {ns}: namespace")
        path_text_inner = rest
    else:
        path_text_inner = path_text
    try:
        parts = parse_config_path(path_text_inner)
    except ValueError as err:
        raise fail(f"not a config path: {err}") from None
    if colon and (not parts or parts[0] != CONFIG_KEY):
        raise fail(f"a {CONFIG_NAMESPACE}: path starts with {ROOT}")
    if parts and parts[0] == CONFIG_KEY:
        parts = parts[1:]
    if not parts:
        raise fail("set single keys (e.g. capacity.nodes=4); the whole object lives in the stack file")
    try:
        value = parse_set_value(text)
    except ValueError as err:
        raise fail(str(err)) from None
    problems: list[str] = []
    set_secrets: list[str] = []
    value = to_config_tree(value, _display(parts), set_secrets, problems)
    if problems:
        raise InputError([f"--set {p}" for p in problems])
    if secrets is not None:
        secrets.extend(s.replace("cluster", ROOT, 1) for s in set_secrets)

    tree = json.loads(json.dumps(raw if raw is not None else {}))
    node: Any = tree
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        here = _display(parts[:i])
        if isinstance(node, list):
            if isinstance(part, str):
                if not part.isdigit():
                    raise fail(f"{here} is a list; index it with [N], not .{part}")
                part = int(part)
            if part > len(node):
                size = f"{len(node)} item{'s' if len(node) != 1 else ''}"
                change = f"[0] to [{len(node) - 1}]" if len(node) > 1 else "[0]"
                use = f"use {change} to change one, [{len(node)}] to append" if node else "use [0] to append"
                raise fail(f"index {part} is out of range: {here} has {size} ({use})")
            if part == len(node):
                node.append(None)
        elif isinstance(node, dict):
            if isinstance(part, int):
                raise fail(f'{here} is a mapping, not a list; use .key or ["key"], not [{part}]')
        else:
            raise fail(
                f"{here} is {_type_name(node)}, so it has no {'item' if isinstance(part, int) else 'key'} "
                f"{part if isinstance(part, int) else repr(part)}; set {here} itself"
            )
        if last:
            node[part] = value
            break
        nxt = parts[i + 1]
        child = node[part] if isinstance(node, list) else node.get(part)
        if child is None:
            child = [] if isinstance(nxt, int) else {}
            node[part] = child
        node = child
    return tree


def warning_lines(mocks: PlanMocks) -> list[str]:
    """What the program logged as warnings (config and preflight), as `pulumi preview` shows them."""
    return [one_line(f"warning: {message}") for severity, message in mocks.log if severity == "warning"]


def check_out(out: Path) -> None:
    """`--out` is a directory we can create or write; InputError otherwise (checked
    before the program runs, so a typo costs nothing)."""
    try:
        if out.exists() and not out.is_dir():
            raise InputError([f"--out {out}: an existing file, not a directory; give a directory (created if missing)"])
        probe = out
        while not probe.exists() and probe != probe.parent:
            probe = probe.parent
        if not probe.is_dir():
            raise InputError([f"--out {out}: {probe} is a file, so the directory cannot be created there"])
        if not os.access(probe, os.W_OK | os.X_OK):
            raise InputError([f"--out {out}: {probe} is not writable by this user"])
    except OSError as err:
        raise InputError([f"--out {out}: {err.strerror or err}"]) from None


def _with_secret_notes(lines: list[str], secrets: list[str]) -> list[str]:
    """A config error about a secure value says so: the offline plan checked the
    placeholder, not the real value (which `pulumi preview` decrypts and checks)."""
    out = []
    for line in lines:
        path = line.split(": ", 1)[0]
        if any(path == s or path.startswith(s + ".") or path.startswith(s + "[") for s in secrets):
            line += (
                f" (a secure value: the offline plan cannot decrypt it and checked {SECRET_PLACEHOLDER!r} in its place)"
            )
        out.append(line)
    return out


def write_plan(
    stack: str,
    out: Path,
    overrides: list[str] = (),
    root: Path = REPO,
    config_file: Path | None = None,
    secrets: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Render the plan into `out`. InputError for bad input (stack file, --set, --out)
    or a config the program refuses; anything else is a bug. `secrets`: stack secret
    values to run with (tests), over the stack file's placeholders."""
    path = stack_file(stack, root, config_file)
    raw, region, secret_paths, problems = read_stack_file(path, root)
    file_secrets, plain = load_stack_secrets(path)
    recorded = []
    for assignment in overrides:
        if assignment.startswith("aws:region="):
            region = assignment.partition("=")[2]
            if not region:
                problems.append("--set aws:region: empty; give a region name such as us-east-2")
            recorded.append(assignment)
            continue
        try:
            before = len(secret_paths)
            raw = apply_override(raw, assignment, secret_paths)
            # The ciphertext of a `{secure: ...}` value never reaches plan.json.
            recorded.append(assignment if len(secret_paths) == before else assignment.partition("=")[0] + "=<secure>")
        except InputError as err:
            problems += err.lines
    check = []
    try:
        check_out(out)
    except InputError as err:
        check = err.lines
    if problems or check:
        raise InputError(problems + check)
    mocks = plan_mocks(raw, region)
    try:
        _, urns, outputs, node_files = run_under_mocks(
            raw, region, stack=stack, mocks=mocks, extra_config=plain, secrets={**file_secrets, **(secrets or {})}
        )
    except pulumi.RunError as err:
        raise InputError(warning_lines(mocks) + _with_secret_notes(str(err).split("\n"), secret_paths)) from None
    try:
        return _write_outputs(stack, out, recorded, region, mocks, urns, outputs, node_files)
    except OSError as err:
        raise InputError([f"--out {out}: cannot write {err.filename or out}: {err.strerror or err}"]) from None


def _write_outputs(stack, out, overrides, region, mocks, urns, outputs, node_files) -> dict[str, Any]:
    resources = []
    for r in mocks.resources:
        r = {**r, "urn": urns.get(f"{r['name']}|{r['type']}")}
        if r["type"] == "aws:s3/bucketObjectv2:BucketObjectv2" and "contentBase64" in r["inputs"]:
            body = base64.b64decode(r["inputs"]["contentBase64"])
            digest = f"<{len(body)} bytes, sha256 {hashlib.sha256(body).hexdigest()}: see userdata/*/payload.tar.gz>"
            r["inputs"] = {**r["inputs"], "contentBase64": digest}
        resources.append(r)
    resources.sort(key=lambda r: (r["urn"] or "", r["type"], r["name"]))
    plan = {
        "generated_by": f"python -m infra.plan --stack {stack} (infra/plan.py, Pulumi mocks); do not edit",
        "stack": stack,
        "region": region,
        "overrides": list(overrides),
        "resources": resources,
        "outputs": outputs,
        "warnings": warning_lines(mocks),
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


def summary(plan: dict[str, Any], out: Path) -> list[str]:
    """What a successful render wrote, for the terminal."""
    cloud = sum(1 for r in plan["resources"] if r["custom"])
    lines = [
        f"wrote {out / 'plan.json'}: {len(plan['resources'])} resources ({cloud} AWS, "
        f"{len(plan['resources']) - cloud} components), {len(plan['outputs'] or {})} stack outputs"
    ]
    index = out / "userdata" / "index.json"
    if index.exists():
        by_dir: dict[str, list[str]] = {}
        for template, dirname in json.loads(index.read_text()).items():
            by_dir.setdefault(dirname, []).append(template)
        for dirname, templates in sorted(by_dir.items()):
            d = out / "userdata" / dirname
            files = sum(1 for p in (d / "files").rglob("*") if p.is_file()) if (d / "files").is_dir() else 0
            size = (d / "user-data").stat().st_size
            lines.append(
                f"wrote {d}/: user-data ({size} bytes, for {', '.join(sorted(templates))}), "
                f"payload.tar.gz, files/ ({files} node files)"
            )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m infra.plan", description=__doc__.split("\n")[0])
    parser.add_argument("--stack", required=True, help="stack name: reads Pulumi.<stack>.yaml")
    parser.add_argument("--out", required=True, type=Path, help="output directory (created if missing)")
    parser.add_argument(
        "--config-file",
        type=Path,
        help="read this stack file instead of Pulumi.<stack>.yaml (as `pulumi --config-file`)",
    )
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="PATH=VALUE",
        help="override a config value, path as for `pulumi config set --path` (with or without the "
        "`cluster.` prefix), e.g. capacity.capacity_blocks[0].instance_count=4; repeatable",
    )
    args = parser.parse_args(argv)
    try:
        plan = write_plan(args.stack, args.out, args.overrides, config_file=args.config_file)
        lines = summary(plan, args.out)
    except InputError as err:
        for line in err.lines:
            print(one_line(line), file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Exception as err:  # noqa: BLE001 - a bug: one line, the traceback on request
        if os.environ.get(DEBUG_ENV):
            traceback.print_exc()
        text = one_line(" ".join(str(err).split()))
        print(
            f"internal error: {type(err).__name__}: {text[:500]}; rerun with {DEBUG_ENV}=1 for the traceback",
            file=sys.stderr,
        )
        return 1
    for line in plan["warnings"]:
        print(line, file=sys.stderr)
    for line in lines:
        print(line)
    return 0


def close_event_loops() -> None:
    """Close the event loops the mocked run left open, before interpreter exit.

    A program refused half-way (a RunError from a registration callback) leaves a loop
    open with tasks pending; at exit the garbage collector may close the loop's self-pipe
    socket before the loop itself, whose finalizer then prints an "Exception ignored ...
    Invalid file descriptor: -1" traceback: noise on a clean refusal. Closing every open
    loop here, while its sockets are still intact, leaves nothing to finalize.
    """
    import asyncio
    import gc

    for obj in gc.get_objects():
        if isinstance(obj, asyncio.AbstractEventLoop) and not obj.is_closed() and not obj.is_running():
            for task in asyncio.all_tasks(obj):
                task.cancel()
            obj.close()


if __name__ == "__main__":
    os.environ.setdefault("PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION", "true")
    code = main()
    close_event_loops()
    sys.exit(code)
