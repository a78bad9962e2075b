"""The mock engine: the real program under Pulumi's mocks, with deterministic answers.

`PlanMocks` gives every resource a stable id and the outputs the program reads (FSx dns
and mount name, launch template versions, role names), answers the data sources the
program calls (subnet, route table, VPC, zones, AMI, caller identity, Capacity Blocks,
the live Auto Scaling groups: none unless given, a first deployment)
and records every resource, invoke and log line. `run_under_mocks` runs `infra.stack.run()`
with a raw cluster object as config, at a fixed time; the plan writer (offline/plan.py)
and the tests use it, so tests see exactly what `python -m offline.plan` writes.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import grpc
import pulumi
from pulumi.runtime import resource as sdk_resource
from pulumi.runtime import rpc
from pulumi.runtime.proto import source_pb2

from model.paths import CONFIG_KEY, CONFIG_NAMESPACE
from stackfile.tree import json_default

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


class EngineInvokeError(grpc.RpcError):  # type: ignore[misc]  # grpc ships no type information
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
        groups: dict[str, dict[str, Any]] | None = None,
    ):
        """`blocks`: reservation id -> getCapacityBlockReservation answer (an id not in it
        fails like an unknown id); `zones`: the region's zones (default: a, b, c);
        `ami_names`: AMI id -> name (default: an Ubuntu 24.04 DLAMI name); `fail_invokes`:
        invoke token -> the provider's error text (or a function of the invoke's args
        giving it, None to answer normally), raised as the engine reports it; `groups`:
        live Auto Scaling group name -> getGroup answer (desiredCapacity, tags, ...); none
        by default: the stack is deployed for the first time."""
        self.region = region
        self.subnet_az = subnet_az
        self.subnet_vpc = subnet_vpc
        self.blocks = blocks or {}
        self.zones = zones if zones is not None else tuple(f"{region}{z}" for z in "abc")
        self.default_route = default_route
        self.vpc_dns_support = vpc_dns_support
        self.ami_names = ami_names or {}
        self.fail_invokes = fail_invokes or {}
        self.groups = groups or {}
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
        elif typ == "aws:rds/instance:Instance":
            ident = state.get("identifier") or name
            rid = ident
            address = f"{ident}.c0a1b2c3d4e5.{self.region}.rds.amazonaws.com"
            secret = f"arn:aws:secretsmanager:{self.region}:{ACCOUNT}:secret:rds!db-{_hex(name, 8)}-a1b2c3"
            state.update(
                address=address,
                endpoint=f"{address}:{state.get('port', 3306)}",
                port=state.get("port", 3306),
                arn=f"arn:aws:rds:{self.region}:{ACCOUNT}:db:{ident}",
                masterUserSecrets=[{"secretArn": secret, "secretStatus": "active", "kmsKeyId": ""}],
            )
        elif typ == "aws:ec2/placementGroup:PlacementGroup":
            state.setdefault("name", f"{name}-{_hex(name, 7)}")
        elif typ == "aws:cloudwatch/logGroup:LogGroup":
            # The provider's `arn` has no trailing `:*` (the API's has) [CW-AGENT-IAM].
            rid = state.get("name") or name
            state["arn"] = f"arn:aws:logs:{self.region}:{ACCOUNT}:log-group:{rid}"
        elif typ == "aws:cloudwatch/dashboard:Dashboard":
            rid = state.get("dashboardName") or name
            state["dashboardArn"] = f"arn:aws:cloudwatch::{ACCOUNT}:dashboard/{rid}"
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
        answer = self._ANSWERS.get(token)
        if answer is None:
            raise NotImplementedError(f"no mock for invoke {args.token}; add one to offline/mocks.py PlanMocks")
        return answer(self, a)

    def _subnet(self, a):
        sid = a.get("id")
        return {
            "id": sid,
            "availabilityZone": self.subnet_az,
            "vpcId": self.subnet_vpc,
            "cidrBlock": "10.0.0.0/18",
            "arn": f"arn:aws:ec2:{self.region}:{ACCOUNT}:subnet/{sid}",
        }

    def _route_table(self, a):
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

    def _vpc(self, a):
        return {
            "id": a.get("id"),
            "cidrBlock": "10.0.0.0/16",
            "enableDnsSupport": self.vpc_dns_support,
            "enableDnsHostnames": True,
            "state": "available",
        }

    def _zones(self, a):
        return {
            "id": self.region,
            "names": list(self.zones),
            "zoneIds": [f"use2-az{i + 1}" for i in range(len(self.zones))],
        }

    def _ami(self, a):
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

    def _caller(self, a):
        return {
            "id": ACCOUNT,
            "accountId": ACCOUNT,
            "arn": f"arn:aws:iam::{ACCOUNT}:user/plan",
            "userId": "AIDAPLANMOCK",
        }

    def _capacity_block(self, a):
        rid = a.get("id")
        if rid not in self.blocks:
            # A failed invoke, as the engine reports a provider error (the program
            # sees an exception it can catch; raising here would fail the whole run).
            return {}, [("id", f"reading EC2 Capacity Block Reservation ({rid}): couldn't find resource")]
        return {"id": rid, "capacityBlockId": rid, **self.blocks[rid]}

    def _groups(self, a):
        # The aws_autoscaling_groups data source: only the names that exist, no error.
        names = [n for n in a.get("names") or () if n in self.groups]
        return {"id": self.region, "names": names, "arns": [self._group_arn(n) for n in names]}

    def _group_arn(self, name: str) -> str:
        return (
            f"arn:aws:autoscaling:{self.region}:{ACCOUNT}:autoScalingGroup:{_hex(name, 8)}:autoScalingGroupName/{name}"
        )

    def _group(self, a):
        name = a.get("name")
        if name not in self.groups:
            # The provider's words for a name DescribeAutoScalingGroups does not return.
            return {}, [("name", f"reading Auto Scaling Group ({name}): empty result")]
        return {"id": name, "name": name, "arn": self._group_arn(name), **self.groups[name]}

    # invoke token -> its answer (the data sources the program calls).
    _ANSWERS: dict[str, Callable[[PlanMocks, Any], Any]] = {
        "aws:ec2/getSubnet:getSubnet": _subnet,
        "aws:ec2/getRouteTable:getRouteTable": _route_table,
        "aws:ec2/getVpc:getVpc": _vpc,
        "aws:index/getAvailabilityZones:getAvailabilityZones": _zones,
        "aws:ec2/getAmi:getAmi": _ami,
        "aws:index/getCallerIdentity:getCallerIdentity": _caller,
        "aws:ec2/getCapacityBlockReservation:getCapacityBlockReservation": _capacity_block,
        "aws:autoscaling/getAmiIds:getAmiIds": _groups,
        "aws:autoscaling/getGroup:getGroup": _group,
    }


# The resource options that change what the engine does with a resource, as plan.json
# names them, each with its value when the program does not set it.
OPTION_DEFAULTS: dict[str, Any] = {
    "protect": False,
    "ignore_changes": [],
    "delete_before_replace": False,
    "replace_on_changes": [],
    "retain_on_delete": False,
    "parent": None,
}


def request_facts(request: Any) -> dict[str, Any]:
    """Dependencies and engine-relevant options of one RegisterResource request.

    Pulumi's Mocks callbacks receive only type, name and inputs; what the engine orders
    and guards by (depends_on plus every input's resource dependencies, protect,
    ignore_changes, ...) is in the request itself [P-SDK]. Lists are
    sorted so the plan is byte-stable whatever order the program registers in.
    """
    options = {
        "protect": bool(request.protect) if request.HasField("protect") else False,
        "ignore_changes": sorted(request.ignoreChanges),
        "delete_before_replace": bool(request.deleteBeforeReplace),
        "replace_on_changes": sorted(request.replaceOnChanges),
        "retain_on_delete": bool(request.retainOnDelete) if request.HasField("retainOnDelete") else False,
        "parent": request.parent or None,
    }
    return {"dependencies": sorted(set(request.dependencies)), "options": options}


def _recording_monitor(mocks: pulumi.runtime.Mocks):
    """Pulumi's MockMonitor, keeping each registration's dependencies and options."""
    from pulumi.runtime.mocks import MockMonitor

    class RecordingMonitor(MockMonitor):
        def __init__(self, m: pulumi.runtime.Mocks):
            super().__init__(m)
            # URN -> request_facts(); the SDK registers from worker threads, so facts are
            # keyed by URN, never "the resource being registered now".
            self.facts: dict[str, dict[str, Any]] = {}

        def RegisterResource(self, request):  # noqa: N802 - the gRPC method's name
            response = super().RegisterResource(request)
            self.facts[response.urn] = request_facts(request)
            return response

    return RecordingMonitor(mocks)


class _EngineLog(logging.Handler):
    """The mock engine's log (pulumi.log.* in the program) into a list."""

    def __init__(self, sink: list[tuple[str, str]]):
        super().__init__(logging.INFO)
        self.sink = sink

    def emit(self, record: logging.LogRecord) -> None:
        self.sink.append((record.levelname.lower(), record.getMessage()))


@contextlib.contextmanager
def _without_source_positions() -> Iterator[None]:
    """The SDK walks the Python stack for every registration and turns each frame into a
    file URI (source positions for the CLI's diagnostics): about a fifth of a mocked run's
    time, and the mock monitor never reads them. Empty traces while `program` runs; the
    SDK's own function is put back after (a real `pulumi up` never comes here)."""
    real = getattr(sdk_resource, "_get_stack_trace", None)
    if real is None:  # another SDK version: nothing to skip
        yield
        return
    sdk_resource._get_stack_trace = source_pb2.StackTrace
    try:
        yield
    finally:
        sdk_resource._get_stack_trace = real


def run_with_mocks(
    program,
    mocks: PlanMocks,
    stack: str = "dev",
    config: dict[str, str] | None = None,
    secret_keys: list[str] | None = None,
    project: str = "gpu-cluster",
):
    """Run `program()` (declares resources, returns anything Output-able) under `mocks`,
    as project `project` (another program that uses the GpuCluster component has its own).

    Waits for every registration, then returns (resolved value, urn lookup) where the
    lookup maps "name|type" to the resource's URN (which carries its parent's type).
    Each record in `mocks.resources` gets the registration's `dependencies` (URNs) and
    `options` (OPTION_DEFAULTS' keys), which the Mocks callbacks are not given.
    """
    from pulumi.runtime.settings import ROOT, SETTINGS
    from pulumi.runtime.stack import run_pulumi_func
    from pulumi.runtime.sync_await import _sync_await

    # set_mocks makes a root stack resource only when there is none: without this, a
    # second run in one process (another stack name) would parent every resource to the
    # first run's stack.
    ROOT.set(None)
    monitor = _recording_monitor(mocks)
    logger = logging.getLogger("gpu-cluster.plan.engine")
    logger.handlers[:] = [_EngineLog(getattr(mocks, "log", []))]
    logger.setLevel(logging.INFO)
    logger.propagate = False
    pulumi.runtime.set_mocks(mocks, project=project, stack=stack, preview=False, monitor=monitor, logger=logger)
    pulumi.runtime.set_all_config(config or {}, secret_keys or [])
    SETTINGS.rpc_manager.clear()
    SETTINGS.outputs.clear()
    resolved: dict[str, Any] = {}

    def program_and_wait():
        resolved["value"] = _sync_await(pulumi.Output.from_input(program()).future())

    with _without_source_positions():
        _sync_await(run_pulumi_func(program_and_wait))
    urns = {
        reg.urn.split("::")[-1] + "|" + reg.urn.split("::")[2].split("$")[-1]: reg.urn
        for reg in monitor.resources.values()
    }
    for record in getattr(mocks, "resources", []):
        facts = monitor.facts.get(urns.get(f"{record['name']}|{record['type']}", ""))
        if facts is not None:
            record.update(facts)
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
        start, end = (json_default(v) if isinstance(v, datetime) else v for v in (b.get("start"), b.get("end")))
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
    config = {f"{CONFIG_NAMESPACE}:{CONFIG_KEY}": json.dumps(raw_cluster, default=json_default)}
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
