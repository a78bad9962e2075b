"""preflight: the stack file against the AWS account, every problem at once.

The checks themselves are pure (`model/preflight.py`); this module reads the facts.
It runs the program's deploy-time rules first (`model.deploy.deploy_problems`: block
dates and scale-in, pinned image, pinned FSx identity) and checks the pinned AMI the
way the program does, so a clean preflight means `pulumi up` passes its own preflight.
Example ids left from a shipped stack file (`model/placeholders.py`) are config
problems: refused before any AWS call, as the program refuses them before any lookup.
Exit status: 0 clean (warnings allowed), 2 problems (config or account).
"""

from __future__ import annotations

import json
from typing import Any

from model.deploy import deploy_problems
from model.errors import ConfigError
from model.placeholders import example_value_problems
from model.preflight import Finding, errors, path, preflight_findings
from ops.aws import OpsError
from ops.context import Context
from ops.facts import gather
from ops.image import describe_image, image_refusal
from ops.stack import load_stack


def run(ctx: Context, args: Any, session_for) -> int:
    try:
        stack = load_stack(args.stack, args.region, args.stack_dir)
        examples = example_value_problems(stack.config, stack.region)
        if examples:
            raise ConfigError(deploy_problems(stack.config, ctx.clock.now(), stack.region) + examples)
    except ConfigError as err:
        lines = [f"{p}: {m}" for p, m in err.problems]
        if args.json:
            ctx.print(
                json.dumps(
                    {
                        "stack": args.stack,
                        "ok": False,
                        "problems": [{"path": p, "message": m, "severity": "error"} for p, m in err.problems],
                    },
                    indent=2,
                )
            )
        else:
            ctx.print("\n".join(lines))
            ctx.print(f"preflight {args.stack}: {len(lines)} config problem(s); fix the stack file first")
        return 2
    session = session_for(stack.region)
    ctx.session = session
    ctx.progress(f"preflight {stack.name}: checking {stack.config.name} in {stack.region} ...")
    now = ctx.clock.now()
    account = preflight_findings(stack.config, gather(session, stack.config, now), stack.name)
    findings = [Finding(p, m) for p, m in deploy_problems(stack.config, now, stack.region)]
    findings += image_findings(session, stack.config.image.ami_id, stack.region) + account
    bad = errors(findings)
    warnings = len(findings) - len(bad)
    if args.json:
        ctx.print(
            json.dumps(
                {
                    "stack": stack.name,
                    "region": stack.region,
                    "ok": not bad,
                    "problems": [{"path": f.path, "message": f.message, "severity": f.severity} for f in findings],
                },
                indent=2,
            )
        )
    else:
        for f in findings:
            ctx.print(f.line())
        verdict = f"{len(bad)} problem(s)" if bad else "OK"
        ctx.print(f"preflight {stack.name} ({stack.region}): {verdict}, {warnings} warning(s)")
    return 2 if bad else 0


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
    return [Finding(where, refusal)] if refusal else []
