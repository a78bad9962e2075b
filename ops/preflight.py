"""preflight: the stack file against the AWS account, every problem at once.

The checks themselves are pure (`model/preflight.py`); this module reads the facts.
Exit status: 0 clean (warnings allowed), 2 problems (config or account).
"""

from __future__ import annotations

import json
from typing import Any

from model.config import ConfigError
from model.preflight import errors, preflight_findings
from ops.context import Context
from ops.facts import gather
from ops.stack import load_stack


def run(ctx: Context, args: Any, session_for) -> int:
    try:
        stack = load_stack(args.stack, args.region, args.stack_dir)
    except ConfigError as err:
        lines = [f"{p}: {m}" for p, m in err.problems]
        if args.json:
            ctx.print(json.dumps({"stack": args.stack, "ok": False,
                                  "problems": [{"path": p, "message": m, "severity": "error"} for p, m in err.problems]},
                                 indent=2))
        else:
            ctx.print("\n".join(lines))
            ctx.print(f"preflight {args.stack}: {len(lines)} config problem(s); fix the stack file first")
        return 2
    session = session_for(stack.region)
    ctx.session = session
    ctx.progress(f"preflight {stack.name}: checking {stack.config.name} in {stack.region} ...")
    findings = preflight_findings(stack.config, gather(session, stack.config, ctx.clock.now()))
    bad = errors(findings)
    warnings = len(findings) - len(bad)
    if args.json:
        ctx.print(json.dumps({"stack": stack.name, "region": stack.region, "ok": not bad,
                              "problems": [{"path": f.path, "message": f.message, "severity": f.severity}
                                           for f in findings]}, indent=2))
    else:
        for f in findings:
            ctx.print(f.line())
        verdict = f"{len(bad)} problem(s)" if bad else "OK"
        ctx.print(f"preflight {stack.name} ({stack.region}): {verdict}, {warnings} warning(s)")
    return 2 if bad else 0
