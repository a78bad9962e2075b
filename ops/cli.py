"""`gpu-cluster-ops <command>` (or `python3 -m ops`): argument parsing and dispatch.

Exit status, as every gpu-cluster CLI (clitools/exits.py, docs/cli.md): 0 ok; 1 a check
found a failure (preflight problems, a NO-GO gate or failed boot in `status`, a refused
image, a failed replacement stage, no offering); 2 usage or bad input (the stack file's
config included); 3 AWS or a node could not be reached or read; 4 an internal error.
Every argument is checked before the first AWS call (clitools/inputs.py).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from botocore.exceptions import BotoCoreError

from clitools import completion, exits, help, inputs
from clitools.errors import CliError, UsageError
from clitools.runner import guarded
from model.catalog import SUPPORTED_INSTANCE_TYPES
from model.errors import ConfigError
from model.slurm import SLURM_NAME
from ops import bake, blocks, health, logs, pin, preflight, replace, status
from ops.aws import Session, describe_error
from ops.cluster import node_ipv4
from ops.context import Context
from ops.stack import load_stack
from stackfile.errors import InputError
from stackfile.location import stack_name_problem

PROG = "gpu-cluster-ops"
# Bounds of the waits, in minutes: a replacement inside a block needs minutes of EC2
# cleanup [CB-LAUNCH] and a boot tens of minutes; a day is a typo, not a wait.
MAX_WAIT_MINUTES = 24 * 60
MAX_POLL_SECONDS = 3600


def _stack(text: str) -> str:
    problem = stack_name_problem(text)
    if problem:
        raise argparse.ArgumentTypeError(problem.removeprefix("--stack "))
    return text


def _region(text: str) -> str:
    from model import aws_rules

    problem = aws_rules.region_problem(text)
    if problem:
        raise argparse.ArgumentTypeError(problem)
    return text


def _node(text: str) -> str:
    if inputs.INSTANCE_ID.match(text) or node_ipv4(text):
        return text
    raise argparse.ArgumentTypeError(
        f"{text[:80]!r} is neither a Slurm node name (ip-10-0-1-5) nor an instance id (i-0123456789abcdef0)"
    )


def _step(text: str) -> str:
    try:
        return logs.resolve_step(text)
    except UsageError as err:
        raise argparse.ArgumentTypeError(err.lines[0]) from None


def _stack_dir(text: str) -> Path:
    try:
        return inputs.require_dir(text, "--stack-dir")
    except UsageError as err:
        raise argparse.ArgumentTypeError(err.lines[0].removeprefix("--stack-dir ")) from None
    except Exception as err:  # Unreadable: a missing directory is bad input here
        raise argparse.ArgumentTypeError(str(err).removeprefix("--stack-dir ")) from None


for _fn, _name in ((_stack, "stack"), (_region, "region"), (_node, "node"), (_step, "step"), (_stack_dir, "directory")):
    _fn.__name__ = _name


def _stack_args(sp: argparse.ArgumentParser) -> None:
    sp.add_argument("--stack", required=True, type=_stack, help="stack name: reads Pulumi.<stack>.yaml")
    sp.add_argument("--region", type=_region, help="override aws:region of the stack file")
    sp.add_argument("--json", action="store_true", help="machine-readable output on stdout")
    sp.add_argument(
        "--stack-dir",
        type=_stack_dir,
        default=None,
        metavar="DIR",
        help="directory holding the stack files (default: the working directory, as for pulumi)",
    )


def parser() -> argparse.ArgumentParser:
    p = help.parser(
        PROG,
        "Operate gpu-cluster clusters with boto3: preflight, Capacity Blocks, status, pins, node replacement.",
        "gpu-cluster-ops preflight --stack dev",
        "gpu-cluster-ops status --stack dev --json",
    )
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    sp = help.command(
        sub,
        "preflight",
        "check the stack file against the AWS account (offline checks first; they are reported without AWS too)",
        "gpu-cluster-ops preflight --stack dev",
    )
    _stack_args(sp)
    _find_blocks(sub)

    sp = help.command(
        sub,
        "status",
        "groups, blocks, instances and the first-boot gate; exit 1 on a NO-GO gate or a failed boot",
        "gpu-cluster-ops status --stack dev",
    )
    _stack_args(sp)
    sp.add_argument("--no-ssm", action="store_true", help="skip reading node status on the controller")

    sp = help.command(
        sub,
        "pin",
        "print the stack-file lines that pin the image and the FSx identity",
        "gpu-cluster-ops pin --stack dev --image --write",
    )
    _stack_args(sp)
    sp.add_argument("--image", action="store_true", help="resolve image.ssm_parameter to the AMI id to pin")
    sp.add_argument("--fsx", action="store_true", help="read the live file system's fsx.pinned values")
    sp.add_argument(
        "--file-system-id",
        type=inputs.aws_id(inputs.FILE_SYSTEM_ID, "fs-0123456789abcdef0"),
        help="the cluster's file system when several carry its tags",
    )
    sp.add_argument(
        "--write",
        action="store_true",
        help="set the key(s) in the stack file (text edit, comments kept; review with git diff)",
    )
    _bake_command(sub)
    _node_commands(sub)
    sp = help.command(sub, "completion", "print a shell completion script", "source <(gpu-cluster-ops completion bash)")
    sp.add_argument("shell", choices=("bash",), help="the shell (zsh: load bashcompinit first)")
    return p


def _bake_command(sub) -> None:
    """Its arguments are checked together, every problem at once, by ops/bake.py input_problems."""
    sp = help.command(
        sub,
        "bake",
        "bake a node image from step 20 on a build instance; print the pin",
        "gpu-cluster-ops bake --stack dev --bucket my-bake-bucket --write",
    )
    _stack_args(sp)
    sp.add_argument("--bucket", required=True, help="S3 bucket (yours) for the bake payload, deleted afterwards")
    sp.add_argument("--base-ami", help="image to bake from (default: what image.ssm_parameter names today)")
    sp.add_argument("--subnet-id", help="subnet of the build instance, with a NAT route (default network.subnet_id)")
    sp.add_argument("--security-group-id", help="security group of the build instance (default: the VPC's)")
    sp.add_argument("--instance-type", default="m7i.large", help="build instance type, x86_64")
    sp.add_argument("--name", help="AMI name (default gpu-cluster-<stack>-<UTC time>)")
    sp.add_argument("--timeout", type=float, default=60, help="minutes for each wait: the bake, the image")
    sp.add_argument("--keep-instance", action="store_true", help="do not terminate the build instance (inspection)")
    sp.add_argument("--write", action="store_true", help="set image.ami_id in the stack file (comments kept)")


def _find_blocks(sub) -> None:
    sp = help.command(
        sub,
        "find-blocks",
        "Capacity Block offerings and the stack-file snippet; --purchase buys one (no refund)",
        "gpu-cluster-ops find-blocks --instance-type p5.48xlarge --count 2 --days 7 --earliest 2026-12-08",
    )
    sp.add_argument("--instance-type", required=True, choices=SUPPORTED_INSTANCE_TYPES)
    sp.add_argument("--count", type=inputs.number(int, 1, 64), required=True, help="instances in the block (1-64)")
    sp.add_argument(
        "--days",
        type=inputs.number(int, 1, 182),
        required=True,
        help="duration: 1-14, or a multiple of 7 up to 182",
    )
    sp.add_argument("--earliest", help="earliest start (2026-12-08 or ISO-8601, UTC; not in the past)")
    sp.add_argument("--latest", help="latest end (2026-12-20 or ISO-8601, UTC)")
    sp.add_argument("--region", type=_region, help="AWS region (default: your AWS configuration)")
    sp.add_argument(
        "--name",
        default="a",
        type=inputs.name(SLURM_NAME, "a block name is a letter, then up to 31 letters, digits, '-' or '_'"),
        help="block name in the snippet",
    )
    offering = inputs.aws_id(inputs.OFFERING_ID, "cb-0123456789abcdefg")
    sp.add_argument(
        "--show", metavar="ID", type=offering, help="offering to print the snippet for (default: the first)"
    )
    sp.add_argument(
        "--purchase", metavar="ID", type=offering, help="buy this offering (asks for confirmation; no refund)"
    )
    sp.add_argument(
        "--yes-i-understand-no-refund", action="store_true", help="buy without the interactive confirmation (scripts)"
    )
    sp.add_argument("--json", action="store_true", help="machine-readable output on stdout")


def _node_commands(sub) -> None:
    """`replace`, `health` and `logs`: the commands that act on one node."""
    sp = help.command(
        sub,
        "replace",
        "show a node's jobs, confirm, drain, wait for its jobs, replace it through its group",
        "gpu-cluster-ops replace ip-10-0-1-6 --stack dev --wait 30",
    )
    sp.add_argument("node", type=_node, help="Slurm node name (ip-10-0-1-5) or instance id (i-...)")
    _stack_args(sp)
    sp.add_argument(
        "--yes", action="store_true", help="do not ask for confirmation (scripts; required without a terminal)"
    )
    minutes = inputs.number(float, 0, MAX_WAIT_MINUTES, "minutes")
    sp.add_argument(
        "--wait",
        type=minutes,
        default=0,
        metavar="MINUTES",
        help="let running jobs end or be requeued for up to this long (0: do not wait)",
    )
    sp.add_argument(
        "--force", action="store_true", help="requeue the node's jobs at once (cancel those that cannot be)"
    )
    sp.add_argument("--no-drain", action="store_true", help="do not drain in Slurm first (controller unreachable)")
    positive = inputs.number(float, 1, MAX_WAIT_MINUTES, "minutes")
    sp.add_argument("--instance-timeout", type=positive, default=30, help="minutes to wait for the new instance")
    sp.add_argument("--idle-timeout", type=positive, default=45, help="minutes to wait for the new node to be idle")
    sp.add_argument(
        "--poll", type=inputs.number(float, 1, MAX_POLL_SECONDS, "seconds"), default=30, help="seconds between checks"
    )

    sp = help.command(
        sub,
        "health",
        "run DCGM diagnostics (dcgmi diag -r LEVEL) on one node through SSM",
        "gpu-cluster-ops health ip-10-0-1-6 --stack dev --level 2",
    )
    sp.add_argument("node", type=_node, help="Slurm node name (ip-10-0-1-5) or instance id (i-...)")
    _stack_args(sp)
    sp.add_argument("--level", type=int, choices=(1, 2, 3), default=2, help="DCGM run level")
    sp.add_argument("--busy-ok", action="store_true", help="run even while jobs run on the node (they slow down)")

    sp = help.command(
        sub,
        "logs",
        "a node's logs from CloudWatch Logs, also after the node is gone (docs/logs.md)",
        "gpu-cluster-ops logs ip-10-0-1-6 --stack dev --step 50-slurm",
    )
    sp.add_argument("node", type=_node, help="Slurm node name (ip-10-0-1-5) or instance id (i-...)")
    _stack_args(sp)
    sp.add_argument("--step", type=_step, help="only this boot step's lines (50-slurm, 50 or slurm)")
    sp.add_argument("--log", choices=logs.LOGS, help="only this log")
    sp.add_argument(
        "--since",
        type=inputs.number(float, 1, 366 * 24 * 60, "minutes"),
        metavar="MINUTES",
        help="only the last MINUTES",
    )


def _dispatch(args: argparse.Namespace, ctx: Context, session_for: Callable[[str | None], Session]) -> int:
    if args.command == "completion":
        ctx.print(completion.bash(PROG, parser()).rstrip("\n"))
        return exits.OK
    if args.command == "preflight":
        return preflight.run(ctx, args, session_for)
    if args.command == "find-blocks":
        ctx.session = session_for(args.region)
        return blocks.run(ctx, args)
    stack = load_stack(args.stack, args.region, args.stack_dir)
    ctx.session = session_for(stack.region)
    if args.command == "pin":
        return pin.run(ctx, args, stack)
    if args.command == "bake":
        return bake.run(ctx, args, stack, ctx.clock.now(), pin.write_key)
    if args.command == "status":
        return status.run(
            ctx, args, stack.config.name, stack.region, stack.config.aws_name_base, stack.config, stack.name
        )
    if args.command == "health":
        return health.run(ctx, args, stack.config.name)
    if args.command == "logs":
        return logs.run(ctx, args, stack.config.aws_name_base)
    return replace.run(ctx, args, stack.config.name, stack.config.aws_name_base)


def main(
    argv: list[str] | None = None,
    ctx: Context | None = None,
    session_for: Callable[[str | None], Session] | None = None,
) -> int:
    args = parser().parse_args(argv)
    if getattr(args, "stack_dir", "") is None:
        # Resolved here, not at import: the directory `ops` is run from, as `pulumi` reads it.
        args.stack_dir = Path.cwd()
    context = ctx or Context(session=None)  # type: ignore[arg-type]
    factory = session_for or (lambda region: Session(region))

    def body() -> int:
        try:
            return _dispatch(args, context, factory)
        except ConfigError as err:
            print(str(err), file=context.err)
            return exits.USAGE
        except InputError:  # the stack file itself: the plan writer's lines, byte for byte
            raise
        except CliError as err:  # OpsError, a bad argument value: named by the command
            err.lines = [f"{PROG} {args.command}: {line}" for line in err.lines]
            raise
        except BotoCoreError as err:  # raised outside `call`: client creation (no region), credentials
            print(f"{PROG} {args.command}: {describe_error(err, 'AWS')}", file=context.err)
            return exits.UNREACHABLE

    return guarded(f"{PROG} {args.command}", body, context.err)


if __name__ == "__main__":
    sys.exit(main())
