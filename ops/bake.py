"""bake: a node image baked from the very step 20 every node runs, and the line that pins it.

1. The base image: `--base-ami`, or the AMI `image.ssm_parameter` names today (the
   DLAMI), refused like `pin --image` refuses it.
2. The bake payload (userdata/bake.py: the stack's entry point, step 20, gpu-cluster-bake,
   the drop-ins and cluster.env) goes to `--bucket` under gpu-cluster-bake/<stack>/;
   the build instance gets a presigned URL for it, so it needs no instance role.
3. RunInstances (`--subnet-id`, default network.subnet_id: a private subnet with a NAT
   route, as the nodes use; `--instance-type`), with user data that runs
   `GPU_CLUSTER_BAKE=1 gpu-cluster-boot --only packages` (the command the local lanes
   run in their roots), prints the manifest on the serial console and powers off.
4. Bounded waits (`--timeout` minutes each): the instance stops; its console shows the
   result (GetConsoleOutput). A failed check (no Lustre module for the image's kernel, a
   version that differs) ends here with the reason, exit 1, nothing captured.
5. CreateImage of the stopped instance, the AMI and its snapshots tagged with the key
   versions, the manifest's sha256 and each download's digest (nodeside/bake.py
   image_tags) plus the stack's tags; wait until it is available.
6. The build instance is terminated and the payload deleted (also on failure, unless
   `--keep-instance`), then the `image.ami_id` line is printed (`--write` sets it,
   keeping the stack file's comments, as `pin --write`).

Why not EC2 Image Builder: docs/images.md ("Baking a node image"). IAM:
docs/bake-iam-policy.json. Exit status: 0 baked, 1 the bake's checks failed on the
build instance, 2 bad input (before any AWS call), 3 an AWS call or a bounded wait failed.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from model.aws_rules import is_resource_id, s3_bucket_problem
from model.paths import ROOT
from model.pins import PRODUCT
from nodeside import bake as manifest_mod
from ops.aws import OpsError, call
from ops.context import Context
from ops.image import describe_image, image_refusal, resolve_parameter, stack_pins
from ops.stack import Stack
from stackfile import edit
from userdata.bake import bake_payload, bake_user_data

POLL_SECONDS = 30.0
CONSOLE_GRACE = 300.0  # the console can lag the stop by minutes [EC2-CONSOLE]
KEY_PREFIX = "gpu-cluster-bake"
BAKE_TAG = "GpuClusterBake"  # on the build instance, its volume, the AMI: the bake's name
AMI_NAME = re.compile(r"[A-Za-z0-9()\[\] ./\-'@_]{3,128}")


class BakeFailed(Exception):
    """The bake's own checks failed on the build instance (exit 1)."""


@dataclass
class Build:
    name: str
    base_ami: str
    instance_id: str | None = None
    key: str | None = None


def input_problems(args: Any, stack: Stack) -> list[str]:
    """Everything wrong with the arguments, before any AWS call."""
    out = []
    bucket = s3_bucket_problem(args.bucket)
    if bucket:
        out.append(f"--bucket: {bucket}")
    for flag, prefix, value in (
        ("--base-ami", "ami", args.base_ami),
        ("--subnet-id", "subnet", args.subnet_id),
        ("--security-group-id", "sg", args.security_group_id),
    ):
        if value and not is_resource_id(prefix, value):
            out.append(f"{flag}: '{value}' is not a {prefix}-... id")
    if args.name and not AMI_NAME.fullmatch(args.name):
        out.append(
            f"--name: '{args.name}': an AMI name is 3-128 letters, digits and ( ) [ ] . / - ' @ _ or spaces [BOTO-EC2]"
        )
    if not (args.subnet_id or stack.config.network.subnet_id):
        out.append(
            "--subnet-id: required (the stack creates its VPC): a subnet with a route to the internet "
            "(NAT), where the build instance reaches the Ubuntu archive, GitHub and the FSx client repository"
        )
    if args.timeout <= 0 or args.timeout != args.timeout or args.timeout > 24 * 60:
        out.append(f"--timeout: {args.timeout} minutes; give 1 to 1440")
    spare = manifest_mod.MAX_TAGS - len(_fixed_tags(stack, "x", "ami-x")) - _IMAGE_TAG_COUNT
    if spare < 0:
        out.append(
            f"tags: the stack's {len(stack.config.tags)} tags and the image's own exceed AWS's "
            f"{manifest_mod.MAX_TAGS} per AMI by {-spare}; remove some from {ROOT}.tags"
        )
    return out


# Manifest, Baked, one per key version, one per pinned download.
_IMAGE_TAG_COUNT = 2 + len(manifest_mod.TAGGED_VERSIONS) + len(PRODUCT.downloads)


def _fixed_tags(stack: Stack, name: str, base: str) -> dict[str, str]:
    return {**stack.config.tags, "Name": name, BAKE_TAG: name, "GpuClusterImageBase": base}


def _tag_list(tags: dict[str, str]) -> list[dict[str, str]]:
    return [{"Key": k, "Value": v} for k, v in tags.items()]


def _base(ctx: Context, args: Any, stack: Stack) -> str:
    ec2 = ctx.session.client("ec2")
    ami = args.base_ami or resolve_parameter(ctx.session.client("ssm"), stack.config.image.ssm_parameter)
    img = describe_image(ec2, ami)
    if img is None:
        raise OpsError(f"base image {ami} does not exist in {stack.region}")
    refusal = image_refusal(img)
    if refusal:
        raise OpsError(f"base image {ami} ({img.name}): {refusal}")
    ctx.progress(f"bake {stack.name}: base image {ami} ({img.name})")
    return ami


def _launch(ctx: Context, args: Any, stack: Stack, build: Build, tags: dict[str, str]) -> None:
    tar, sha = bake_payload(stack.config)
    s3 = ctx.session.client("s3")
    build.key = f"{KEY_PREFIX}/{stack.name}/{sha}.tar.gz"
    call(s3, "put_object", f"uploading the bake payload to s3://{args.bucket}/{build.key}",
         Bucket=args.bucket, Key=build.key, Body=tar)  # fmt: skip
    # The URL must outlive the wait for the instance; SigV4 allows at most 7 days.
    url = s3.generate_presigned_url(
        "get_object", Params={"Bucket": args.bucket, "Key": build.key}, ExpiresIn=int(args.timeout * 60) + 3600
    )
    interface: dict[str, Any] = {"DeviceIndex": 0, "SubnetId": args.subnet_id or stack.config.network.subnet_id}
    if args.security_group_id:
        interface["Groups"] = [args.security_group_id]
    reply = call(
        ctx.session.client("ec2"),
        "run_instances",
        f"launching the build instance ({args.instance_type}) from {build.base_ami}",
        ImageId=build.base_ami,
        InstanceType=args.instance_type,
        MinCount=1,
        MaxCount=1,
        UserData=bake_user_data(url, sha),
        NetworkInterfaces=[interface],
        InstanceInitiatedShutdownBehavior="stop",
        MetadataOptions={"HttpTokens": "required", "HttpEndpoint": "enabled"},
        TagSpecifications=[{"ResourceType": t, "Tags": _tag_list(tags)} for t in ("instance", "volume")],
    )
    build.instance_id = reply["Instances"][0]["InstanceId"]
    ctx.progress(f"bake {stack.name}: build instance {build.instance_id} is baking (the packages step, then power off)")


def _wait(ctx: Context, what: str, timeout_s: float, check) -> Any:
    """Poll `check()` (None: not yet) every POLL_SECONDS, at most `timeout_s`."""
    start = ctx.clock.monotonic()
    while True:
        got = check()
        if got is not None:
            return got
        elapsed = ctx.clock.monotonic() - start
        if elapsed >= timeout_s:
            raise OpsError(f"gave up after {timeout_s / 60:.0f} min waiting for {what}")
        ctx.progress(f"  ... waiting for {what} ({elapsed / 60:.1f} min)")
        ctx.clock.sleep(POLL_SECONDS)


def _stopped(ctx: Context, build: Build) -> str | None:
    reply = call(ctx.session.client("ec2"), "describe_instances", f"describing {build.instance_id}",
                 InstanceIds=[build.instance_id])  # fmt: skip
    state = reply["Reservations"][0]["Instances"][0]["State"]["Name"]
    if state in ("terminated", "shutting-down"):
        raise OpsError(f"build instance {build.instance_id} is {state}: it did not stop by itself")
    return state if state == "stopped" else None


def _console_result(ctx: Context, build: Build) -> tuple[dict, str] | None:
    reply = call(ctx.session.client("ec2"), "get_console_output", f"reading {build.instance_id}'s console",
                 InstanceId=build.instance_id, Latest=True)  # fmt: skip
    # botocore decodes the base64 Output itself (its GetConsoleOutput after-call handler).
    text = str(reply.get("Output") or "")
    try:
        got = manifest_mod.parse_result(text)
    except manifest_mod.BakeError as err:
        raise OpsError(f"build instance {build.instance_id}: {err}") from None
    if isinstance(got, str):
        log = [ln.split("gpu-cluster-bake log: ", 1)[1] for ln in text.splitlines() if "gpu-cluster-bake log: " in ln]
        raise BakeFailed("\n".join([got, *(f"  {ln.rstrip()}" for ln in log[-15:])]))
    return got


def _capture(ctx: Context, args: Any, build: Build, tags: dict[str, str], manifest: dict) -> str:
    ec2 = ctx.session.client("ec2")
    v = manifest["versions"]
    description = (
        f"gpu-cluster node image from {build.base_ami}: kernel {v['kernel']}, Slurm {v['slurm']}, "
        f"Enroot {v['enroot']}, Pyxis {v['pyxis']}, Lustre {v['lustre']}"
    )[:255]
    reply = call(ec2, "create_image", f"creating image {build.name} from {build.instance_id}",
                 InstanceId=build.instance_id, Name=build.name, Description=description,
                 TagSpecifications=[{"ResourceType": t, "Tags": _tag_list(tags)} for t in ("image", "snapshot")])  # fmt: skip
    ami = str(reply["ImageId"])
    ctx.progress(f"bake: image {ami} is being created (snapshots take minutes)")

    def available() -> str | None:
        images = call(ec2, "describe_images", f"describing {ami}", ImageIds=[ami])["Images"]
        state = images[0]["State"] if images else "pending"
        if state in ("failed", "error", "invalid", "deregistered"):
            reason = images[0].get("StateReason", {}).get("Message", "")
            raise OpsError(f"image {ami} is {state}: {reason}")
        return ami if state == "available" else None

    return str(_wait(ctx, f"image {ami} to be available", args.timeout * 60, available))


def _cleanup(ctx: Context, args: Any, build: Build) -> None:
    """Terminate the build instance and delete the payload; report, never raise."""
    if build.instance_id and not args.keep_instance:
        try:
            call(ctx.session.client("ec2"), "terminate_instances", f"terminating {build.instance_id}",
                 InstanceIds=[build.instance_id])  # fmt: skip
            ctx.progress(f"bake: build instance {build.instance_id} terminated")
        except OpsError as err:
            ctx.progress(f"bake: {err}; terminate {build.instance_id} by hand")
    elif build.instance_id:
        ctx.progress(f"bake: build instance {build.instance_id} kept (--keep-instance); terminate it when done")
    if build.key:
        try:
            call(ctx.session.client("s3"), "delete_object", f"deleting s3://{args.bucket}/{build.key}",
                 Bucket=args.bucket, Key=build.key)  # fmt: skip
        except OpsError as err:
            ctx.progress(f"bake: {err}")


def _report(stack: Stack, build: Build, ami: str, manifest: dict, digest: str) -> tuple[dict[str, Any], list[str]]:
    v = manifest["versions"]
    yaml_lines = edit.scalar_line("ami_id", ami, build.name)
    text = [
        f"baked {ami} ({build.name}) from {build.base_ami} in {stack.region}",
        *(f"  {k:<7} {v[k]}" for k in manifest_mod.TAGGED_VERSIONS),
        f"  manifest sha256 {digest} ({manifest_mod.MANIFEST} on the image)",
        f"# {stack.name}: under {ROOT}.image in Pulumi.{stack.name}.yaml",
        *yaml_lines,
    ]
    doc = {"ami_id": ami, "name": build.name, "base_ami": build.base_ami, "manifest_sha256": digest,
           "versions": v, "manifest": manifest, "yaml": "\n".join(yaml_lines)}  # fmt: skip
    return doc, text


def _bake(ctx: Context, args: Any, stack: Stack, build: Build) -> tuple[str, dict, str]:
    build.base_ami = _base(ctx, args, stack)
    tags = _fixed_tags(stack, build.name, build.base_ami)
    _launch(ctx, args, stack, build, tags)
    _wait(ctx, f"build instance {build.instance_id} to stop", args.timeout * 60, lambda: _stopped(ctx, build))
    manifest, digest = _wait(
        ctx, f"the bake's result on {build.instance_id}'s console", CONSOLE_GRACE, lambda: _console_result(ctx, build)
    )
    problems = manifest_mod.pin_problems(manifest, stack_pins())
    if problems:
        raise BakeFailed("the image does not carry this repository's pins: " + "; ".join(problems))
    tags.update(manifest_mod.image_tags(manifest, digest))
    return _capture(ctx, args, build, tags, manifest), manifest, digest


def run(ctx: Context, args: Any, stack: Stack, now: datetime, write) -> int:
    problems = input_problems(args, stack)
    if problems:
        for p in problems:
            print(f"gpu-cluster-ops bake: {p}", file=ctx.err)
        return 2
    build = Build(name=args.name or f"gpu-cluster-{stack.name}-{now:%Y%m%d-%H%M%S}", base_ami="")
    try:
        ami, manifest, digest = _bake(ctx, args, stack, build)
    except BakeFailed as err:
        print(f"gpu-cluster-ops bake: the bake failed on {build.instance_id}: {err}", file=ctx.err)
        return 1
    except OpsError as err:
        print(f"gpu-cluster-ops bake: {err}", file=ctx.err)
        return 3
    finally:
        _cleanup(ctx, args, build)
    doc, text = _report(stack, build, ami, manifest, digest)
    rc = 0
    if args.write:
        try:
            doc["written"] = write(args.stack_dir, stack, ["image", "ami_id"], doc["yaml"].splitlines(), ami)
        except OpsError as err:  # the image exists: print the line to paste by hand
            doc["written"], rc = f"not written: {err}", 2
        text.append(doc["written"])
    ctx.print(json.dumps(doc, indent=2, sort_keys=True) if args.json else "\n".join(text))
    return rc
