"""`python3 -m ops <command>`: argument parsing and dispatch.

Exit status: 0 ok, 1 an AWS call or wait failed (one clear line on stderr),
2 bad config or preflight problems, 3 no Capacity Block offering found.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from botocore.exceptions import BotoCoreError

from model.catalog import SUPPORTED_INSTANCE_TYPES
from model.errors import ConfigError, one_line
from ops import blocks, health, pin, preflight, replace, status
from ops.aws import OpsError, Session, describe_error
from ops.context import Context
from ops.stack import load_stack
from stackfile.errors import InputError


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="gpu-cluster-ops", description="Operate gpu-cluster clusters (boto3).")
    sub = p.add_subparsers(dest="command", required=True)

    def stack_args(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--stack", required=True, help="stack name: reads Pulumi.<stack>.yaml")
        sp.add_argument("--region", help="override aws:region of the stack file")
        sp.add_argument("--json", action="store_true", help="machine-readable output on stdout")
        sp.add_argument(
            "--stack-dir",
            type=Path,
            default=None,
            help="directory holding the stack files (default: the working directory, as for pulumi)",
        )

    sp = sub.add_parser("preflight", help="check the stack file against the AWS account")
    stack_args(sp)

    sp = sub.add_parser("find-blocks", help="Capacity Block offerings and the stack-file snippet")
    sp.add_argument("--instance-type", required=True, choices=SUPPORTED_INSTANCE_TYPES)
    sp.add_argument("--count", type=int, required=True, help="instances in the block (1-64)")
    sp.add_argument("--days", type=int, required=True, help="duration: 1-14, or a multiple of 7 up to 182")
    sp.add_argument("--earliest", help="earliest start (2026-12-08 or ISO-8601, UTC)")
    sp.add_argument("--latest", help="latest end (2026-12-20 or ISO-8601, UTC)")
    sp.add_argument("--region", required=False, help="AWS region (default: your AWS configuration)")
    sp.add_argument("--name", default="a", help="block name in the snippet (default: a)")
    sp.add_argument("--show", metavar="ID", help="offering to print the snippet for (default: the first)")
    sp.add_argument("--purchase", metavar="ID", help="buy this offering (asks for confirmation; no refund)")
    sp.add_argument(
        "--yes-i-understand-no-refund", action="store_true", help="buy without the interactive confirmation (scripts)"
    )
    sp.add_argument("--json", action="store_true")

    sp = sub.add_parser("status", help="groups, blocks, instances and the first-boot gate")
    stack_args(sp)
    sp.add_argument("--no-ssm", action="store_true", help="skip reading node status on the controller")

    sp = sub.add_parser("pin", help="print the stack-file lines that pin the image and the FSx identity")
    stack_args(sp)
    sp.add_argument("--image", action="store_true", help="resolve image.ssm_parameter to the AMI id to pin")
    sp.add_argument("--fsx", action="store_true", help="read the live file system's fsx.pinned values")
    sp.add_argument("--file-system-id", help="the cluster's file system when several carry its tags")
    sp.add_argument(
        "--write",
        action="store_true",
        help="set the key(s) in the stack file (text edit, comments kept; review with git diff)",
    )

    _node_commands(sub, stack_args)
    return p


def _node_commands(sub, stack_args: Callable[[argparse.ArgumentParser], None]) -> None:
    """`replace` and `health`: the commands that act on one node."""
    sp = sub.add_parser(
        "replace", help="show a node's jobs, confirm, drain, wait for its jobs, replace it through its group"
    )
    sp.add_argument("node", help="Slurm node name (ip-10-0-1-5) or instance id (i-...)")
    stack_args(sp)
    sp.add_argument(
        "--yes", action="store_true", help="do not ask for confirmation (scripts; required without a terminal)"
    )
    sp.add_argument(
        "--wait",
        type=float,
        default=0,
        metavar="MINUTES",
        help="let running jobs end or be requeued for up to this long",
    )
    sp.add_argument(
        "--force", action="store_true", help="requeue the node's jobs at once (cancel those that cannot be)"
    )
    sp.add_argument("--no-drain", action="store_true", help="do not drain in Slurm first (controller unreachable)")
    sp.add_argument("--instance-timeout", type=float, default=30, help="minutes to wait for the new instance")
    sp.add_argument("--idle-timeout", type=float, default=45, help="minutes to wait for the new node to be idle")
    sp.add_argument("--poll", type=float, default=30, help="seconds between checks")

    sp = sub.add_parser("health", help="run DCGM diagnostics (dcgmi diag -r LEVEL) on one node through SSM")
    sp.add_argument("node", help="Slurm node name (ip-10-0-1-5) or instance id (i-...)")
    stack_args(sp)
    sp.add_argument("--level", type=int, choices=(1, 2, 3), default=2, help="DCGM run level (default 2)")
    sp.add_argument("--busy-ok", action="store_true", help="run even while jobs run on the node (they slow down)")


def main(
    argv: list[str] | None = None,
    ctx: Context | None = None,
    session_for: Callable[[str | None], Session] | None = None,
) -> int:
    args = parser().parse_args(argv)
    if getattr(args, "stack_dir", "") is None:
        # Resolved here, not at import: the directory `ops` is run from, as `pulumi` reads it.
        args.stack_dir = Path.cwd()
    session_for = session_for or (lambda region: Session(region))
    ctx = ctx or Context(session=None)  # type: ignore[arg-type]
    try:
        if args.command == "preflight":
            return preflight.run(ctx, args, session_for)
        if args.command == "find-blocks":
            ctx.session = session_for(args.region)
            return blocks.run(ctx, args)
        stack = load_stack(args.stack, args.region, args.stack_dir)
        ctx.session = session_for(stack.region)
        if args.command == "pin":
            return pin.run(ctx, args, stack)
        if args.command == "status":
            return status.run(
                ctx, args, stack.config.name, stack.region, stack.config.aws_name_base, stack.config, stack.name
            )
        if args.command == "health":
            return health.run(ctx, args, stack.config.name)
        return replace.run(ctx, args, stack.config.name, stack.config.aws_name_base)
    except ConfigError as err:
        print(str(err), file=ctx.err)
        return 2
    except InputError as err:  # the stack file itself: the plan writer's lines, byte for byte
        for line in err.lines:
            print(one_line(line), file=ctx.err)
        return 2
    except OpsError as err:
        print(f"gpu-cluster-ops {args.command}: {err}", file=ctx.err)
        return 1
    except BotoCoreError as err:  # raised outside `call`: client creation (no region), credentials
        print(f"gpu-cluster-ops {args.command}: {describe_error(err, 'AWS')}", file=ctx.err)
        return 1
    except KeyboardInterrupt:
        print(f"gpu-cluster-ops {args.command}: interrupted", file=ctx.err)
        return 130


if __name__ == "__main__":
    sys.exit(main())
