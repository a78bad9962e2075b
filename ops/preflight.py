"""preflight: the stack file against the AWS account, every problem at once.

The checks themselves are pure (`model/preflight.py`); this module reads the facts.
It runs the program's deploy-time rules first (`model.deploy.deploy_problems`: block
dates and scale-in, pinned image, pinned FSx identity) and checks the pinned AMI the
way the program does, and the program's live controller-move check (ops/facts.py
controller_move_findings), so a clean preflight means `pulumi up` passes its own preflight.
Example ids left from a shipped stack file (`model/placeholders.py`) are config
problems: refused before any AWS call, as the program refuses them before any lookup.
The offline checks (the deploy-time rules) are reported even when AWS cannot be reached.
Exit status (clitools/exits.py): 0 clean (warnings allowed), 1 problems found (deploy
rules or the account), 2 config problems, 3 AWS could not be reached.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from botocore.exceptions import BotoCoreError

from clitools import exits
from model.deploy import deploy_problems
from model.errors import ConfigError
from model.placeholders import example_value_problems
from model.preflight import Finding, errors, path, preflight_findings
from ops.aws import OpsError, describe_error
from ops.context import Context
from ops.facts import controller_move_findings, gather
from ops.image import describe_image, image_refusal, manifest_problem
from ops.stack import Stack, load_stack


def _config_refusal(ctx: Context, args: Any, problems: list[tuple[str, str]]) -> int:
    if args.json:
        doc = {
            "stack": args.stack,
            "ok": False,
            "problems": [{"path": p, "message": m, "severity": "error"} for p, m in problems],
        }
        ctx.print(json.dumps(doc, indent=2))
    else:
        ctx.print("\n".join(f"{p}: {m}" for p, m in problems))
        ctx.print(f"preflight {args.stack}: {len(problems)} config problem(s); fix the stack file first")
    return exits.USAGE


def _account(ctx: Context, stack: Stack, session_for, now: datetime) -> tuple[list[Finding], str | None]:
    """The AWS account's findings, or ([], why) when AWS cannot be reached at all."""
    try:
        session = session_for(stack.region)
        ctx.session = session
        ctx.progress(f"preflight {stack.name}: checking {stack.config.name} in {stack.region} ...")
        account = preflight_findings(stack.config, gather(session, stack.config, now), stack.name)
        moves = controller_move_findings(session.client("autoscaling"), stack.config, now)
        return image_findings(session, stack.config.image.ami_id, stack.region) + account + moves, None
    except OpsError as err:
        return [], str(err)
    except BotoCoreError as err:  # client creation, credentials
        return [], describe_error(err, "reading AWS")


def run(ctx: Context, args: Any, session_for) -> int:
    """Exit 0 clean (warnings allowed), 1 problems found, 2 the stack file's config is
    bad, 3 AWS could not be reached (the offline checks are still reported)."""
    now = ctx.clock.now()
    try:
        stack = load_stack(args.stack, args.region, args.stack_dir)
    except ConfigError as err:
        return _config_refusal(ctx, args, err.problems)
    examples = example_value_problems(stack.config, stack.region)
    offline = deploy_problems(stack.config, now, stack.region)
    if examples:
        return _config_refusal(ctx, args, offline + examples)
    findings = [Finding(p, m) for p, m in offline]
    account, unreachable = _account(ctx, stack, session_for, now)
    findings += account
    bad = errors(findings)
    warnings = len(findings) - len(bad)
    if args.json:
        doc: dict[str, Any] = {
            "stack": stack.name,
            "region": stack.region,
            "ok": not bad and unreachable is None,
            "problems": [{"path": f.path, "message": f.message, "severity": f.severity} for f in findings],
        }
        if unreachable:
            doc["aws_unreachable"] = unreachable
        ctx.print(json.dumps(doc, indent=2))
    else:
        for f in findings:
            ctx.print(f.line())
        if unreachable:
            ctx.print(f"AWS checks not run: {unreachable}")
        verdict = f"{len(bad)} problem(s)" if bad else "OK"
        scope = " (offline checks only)" if unreachable else ""
        ctx.print(f"preflight {stack.name} ({stack.region}): {verdict}, {warnings} warning(s){scope}")
    if bad:
        return exits.FAILED
    return exits.UNREACHABLE if unreachable else exits.OK


def image_findings(session, ami_id: str | None, region: str) -> list[Finding]:
    """The pinned AMI exists in this region and is one the program accepts."""
    if not ami_id:
        return []  # deploy_problems says it must be pinned (unless allow_unpinned)
    where = path("image", "ami_id")
    try:
        img = describe_image(session.client("ec2"), ami_id)
    except OpsError as err:
        return [Finding(where, f"could not check: {err}")]
    if img is None:
        return [
            Finding(
                where,
                f"{ami_id} does not exist in {region}; AMI ids are per region: pin the id the DLAMI "
                f"parameter gives here (`python3 -m ops pin --image --stack <stack>`)",
            )
        ]
    refusal = image_refusal(img)
    if refusal:
        return [Finding(where, refusal)]
    # The pinned image's manifest (its tags) against the stack's pins.
    problem = manifest_problem(img)
    return [Finding(where, problem[1], problem[0])] if problem else []
