"""Offline plan: run the real program under Pulumi's mocks, write what it would do.

    python -m offline.plan --stack dev --out DIR [--config-file FILE] [--set PATH=VALUE ...] [--at TIME]

Reads `Pulumi.<stack>.yaml` (or FILE), applies `--set` overrides, runs `infra.stack.run()`
with deterministic mocks and writes:
  DIR/plan.json                       every resource (type, name, urn, inputs as the engine
                                      sees them: camelCase; dependencies: the URNs the
                                      engine creates it after, sorted; options: protect,
                                      ignore_changes, delete_before_replace,
                                      replace_on_changes, retain_on_delete, parent), the
                                      time it renders at and the resolved stack outputs
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
Values are stored as Pulumi stores them (stackfile/setpath.py). Secure values
(`key: {secure: ...}`) cannot be decrypted offline: the plan uses SECRET_PLACEHOLDER
and never writes or prints the ciphertext.

Exit status (clitools/exits.py): 0 written; 2 bad input, one line per problem
(`Pulumi.x.yaml:LINE:COL: ...`, `--set PATH: ...`, `--out DIR: ...`, or the config's
`path: message`), nothing written; 3 the stack file cannot be read (missing,
unreadable); 4 an internal error (a bug), one line (GPU_CLUSTER_DEBUG=1 prints the
traceback). Output
is byte-stable: the program runs at the fixed time PLAN_NOW (offline/mocks.py: which
Capacity Blocks have started decides group sizes and scheduled actions), never at the
wall-clock time. `--at TIME` (ISO-8601 with a zone: 2026-12-08T12:00:00Z) runs it at
TIME instead: what a `pulumi up` at that moment would declare.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pulumi

from clitools import exits, help, inputs
from clitools.errors import UsageError
from clitools.runner import guarded
from model.errors import one_line
from offline.mocks import PLAN_NOW, PlanMocks, plan_mocks, run_under_mocks
from stackfile.engine import read_config, source_from_env
from stackfile.errors import InputError
from stackfile.location import stack_file
from stackfile.reader import load_stack_secrets, read_stack_file
from stackfile.setpath import apply_override
from stackfile.tree import SECRET_PLACEHOLDER

REPO = Path(__file__).resolve().parent.parent
DEBUG_ENV = exits.DEBUG_ENV


def load_stack_config(stack: str, root: Path = REPO, config_file: Path | None = None) -> tuple[Any, Any]:
    """(raw `gpu-cluster:cluster` object, aws:region) of a stack; InputError if unusable."""
    raw, region, _, problems = read_stack_file(stack_file(stack, root, config_file), root)
    if problems:
        raise InputError(problems)
    return raw, region


def parse_at(text: str) -> datetime:
    """`--at`'s value as an aware UTC time; InputError (one line) otherwise. A zone is
    required: the block times it is compared with are absolute, and a zone-less time
    would silently mean the machine's local time. The year is bounded
    (clitools/inputs.py): a time at the calendar's edge would overflow once the program
    applies its offsets."""
    try:
        return inputs.utc_time(text, "--at", zone_required=True)
    except UsageError as err:
        raise InputError(err.lines) from None


def warning_lines(mocks: PlanMocks) -> list[str]:
    """What the program logged as warnings (config and preflight), as `pulumi preview` shows them."""
    return [one_line(f"warning: {message}") for severity, message in mocks.log if severity == "warning"]


def check_out(out: Path) -> None:
    """`--out` is a directory we can create or write; InputError otherwise (checked
    before the program runs, so a typo costs nothing)."""
    try:
        inputs.check_output_dir(out, "--out")
    except UsageError as err:
        raise InputError(err.lines) from None


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
    overrides: Sequence[str] = (),
    root: Path = REPO,
    config_file: Path | None = None,
    secrets: dict[str, str] | None = None,
    at: datetime = PLAN_NOW,
    source: str = "files",
) -> dict[str, Any]:
    """Render the plan into `out`, the program running at `at`. InputError for bad input
    (stack file, --set, --out) or a config the program refuses; anything else is a bug.
    `secrets`: stack secret values to run with (tests), over the stack file's placeholders.
    `source`: where the config comes from (stackfile/engine.py); the command line reads it
    as the engine does, tests and goldens from the files alone."""
    got = read_config(stack, root, config_file, source)
    raw, region, secret_paths, problems, path = got.raw, got.region, got.secret_paths, got.problems, got.path
    for note in got.notes:
        print(f"note: {note}", file=sys.stderr)
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
    except UsageError as err:
        check = err.lines
    if problems or check:
        raise InputError(problems + check)
    mocks = plan_mocks(raw, region, now=at)
    try:
        _, urns, outputs, node_files = run_under_mocks(
            raw,
            region,
            stack=stack,
            mocks=mocks,
            now=at,
            extra_config=plain,
            secrets={**file_secrets, **(secrets or {})},
        )
    except pulumi.RunError as err:
        raise InputError(warning_lines(mocks) + _with_secret_notes(str(err).split("\n"), secret_paths)) from None
    try:
        return _write_outputs(stack, out, recorded, region, mocks, urns, outputs, node_files, at)
    except OSError as err:
        raise InputError([f"--out {out}: cannot write {err.filename or out}: {err.strerror or err}"]) from None


def _write_outputs(stack, out, overrides, region, mocks, urns, outputs, node_files, at) -> dict[str, Any]:
    resources = []
    for r in mocks.resources:
        r = {**r, "urn": urns.get(f"{r['name']}|{r['type']}")}
        if r["type"] == "aws:s3/bucketObjectv2:BucketObjectv2" and "contentBase64" in r["inputs"]:
            body = base64.b64decode(r["inputs"]["contentBase64"])
            digest = f"<{len(body)} bytes, sha256 {hashlib.sha256(body).hexdigest()}: see userdata/*/payload.tar.gz>"
            r["inputs"] = {**r["inputs"], "contentBase64": digest}
        resources.append(r)
    resources.sort(key=lambda r: (r["urn"] or "", r["type"], r["name"]))
    at_arg = "" if at == PLAN_NOW else f" --at {_iso(at)}"
    plan = {
        "generated_by": f"python -m offline.plan --stack {stack}{at_arg} (offline/plan.py, Pulumi mocks); do not edit",
        "at": _iso(at),
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


def _iso(when: datetime) -> str:
    return when.astimezone(UTC).isoformat().replace("+00:00", "Z")


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


def parser() -> argparse.ArgumentParser:
    p = help.parser(
        "python -m offline.plan",
        "Offline plan: run the real program under Pulumi's mocks and write every resource and node file.",
        "python -m offline.plan --stack dev --out build/render-dev",
        "python -m offline.plan --stack dev --out /tmp/p --set capacity.nodes=1 --at 2026-12-08T12:00:00Z",
    )
    p.add_argument("--stack", required=True, help="stack name: reads Pulumi.<stack>.yaml")
    p.add_argument("--out", required=True, type=Path, metavar="DIR", help="output directory (created if missing)")
    p.add_argument(
        "--config-file",
        type=Path,
        metavar="FILE",
        help="read this stack file instead of Pulumi.<stack>.yaml (as `pulumi --config-file`)",
    )
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="PATH=VALUE",
        help="override a config value, path as for `pulumi config set --path` (with or without the "
        "`cluster.` prefix), e.g. capacity.capacity_blocks[0].instance_count=4; repeatable (default: none)",
    )
    p.add_argument(
        "--at",
        metavar="TIME",
        help="run the program at TIME (ISO-8601 with a zone, e.g. 2026-12-08T12:00:00Z) instead of the fixed "
        f"plan time {_iso(PLAN_NOW)}: what `pulumi up` would declare then (group sizes, scheduled actions)",
    )
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)

    def body() -> int:
        at = PLAN_NOW if args.at is None else parse_at(args.at)
        # The stack files of the directory the command runs in, as `pulumi` reads them (an
        # installed package has no stack files beside its modules).
        plan = write_plan(
            args.stack,
            args.out,
            args.overrides,
            Path.cwd(),
            config_file=args.config_file,
            at=at,
            source=source_from_env(),
        )
        lines = summary(plan, args.out)
        for line in plan["warnings"]:
            print(line, file=sys.stderr)
        for line in lines:
            print(line)
        return exits.OK

    return guarded("python -m offline.plan", body)


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
