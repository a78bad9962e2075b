"""pin: the values the stack file must pin, read from AWS, printed as stack-file YAML.

`--image` resolves `image.ssm_parameter` to today's AMI id and describes it, so a
reviewer sees which image a PR pins; `--fsx` reads the live file system and prints the
`fsx.pinned` block (model/fsx_identity.py). Nothing is changed unless `--write` is
given, and then only that key, by a text edit that keeps the file's comments
(stackfile/edit.py). Exit status: 0 ok, 1 the image is one the program refuses, the
file system is not found or ambiguous, or `--write` was refused, 3 an AWS lookup failed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from clitools import exits
from model.config import parse_config
from model.errors import ConfigError
from model.fsx_identity import fsx_identity
from model.paths import ROOT
from ops.aws import OpsError
from ops.context import Context
from ops.fsx import find_file_system, fsx_name, live_identity
from ops.image import LUSTRE_CHECK, describe_image, image_refusal, resolve_parameter
from ops.stack import Stack, load_raw
from stackfile import edit
from stackfile.errors import InputError
from stackfile.location import stack_file


def _image(ctx: Context, stack: Stack) -> tuple[dict[str, Any], list[str], bool]:
    cfg = stack.config
    param = cfg.image.ssm_parameter
    ami = resolve_parameter(ctx.session.client("ssm"), param)
    img = describe_image(ctx.session.client("ec2"), ami)
    if img is None:
        raise OpsError(f"SSM parameter {param} names {ami}, which EC2 does not know in {stack.region}")
    refusal = image_refusal(img)
    yaml_lines = edit.scalar_line("ami_id", img.ami_id, img.name)
    doc = {
        "ami_id": img.ami_id,
        "name": img.name,
        "creation_date": img.creation_date,
        "architecture": img.architecture,
        "ssm_parameter": param,
        "refused": refusal,
        "pinned_now": cfg.image.ami_id,
        "yaml": "\n".join(yaml_lines),
        "lustre_check": LUSTRE_CHECK,
    }
    text = [
        f"image {img.ami_id} from {param} ({stack.region})",
        f"  name:         {img.name}",
        f"  created:      {img.creation_date}",
        f"  architecture: {img.architecture}",
    ]
    if refusal:
        text.append(f"refused: {ROOT}.image.ami_id: {refusal}")
        return doc, text, False
    if cfg.image.ami_id == img.ami_id:
        text.append(f"image.ami_id already pins {img.ami_id}")
    elif cfg.image.ami_id:
        text.append(
            f"image.ami_id pins {cfg.image.ami_id} today; pinning {img.ami_id} makes a new launch template "
            "version: nodes launched after `pulumi up` boot it, running nodes keep the old image until replaced "
            "(`python3 -m ops replace`)"
        )
    text += [f"# {stack.name}: under {ROOT}.image in Pulumi.{stack.name}.yaml", *yaml_lines]
    if cfg.image.allow_unpinned:
        text.append("# and remove image.allow_unpinned (a pinned image and allow_unpinned are refused together)")
    text += [
        "before pinning a new image, check its kernel has a Lustre client (FSx's client packages trail new "
        "kernels); on a node booted from it run:",
        f"  {LUSTRE_CHECK}",
        "and expect a Candidate version, not (none)",
    ]
    return doc, text, True


def _diff(old: Any, new: Any) -> list[str]:
    return [
        f"{f} {getattr(old, f)!r} -> {getattr(new, f)!r}"
        for f in type(new).model_fields
        if getattr(old, f) != getattr(new, f)
    ]


def _fsx(ctx: Context, stack: Stack, file_system_id: str | None) -> tuple[dict[str, Any], list[str]]:
    cfg = stack.config
    ctx.progress(f"pin {stack.name}: finding FSx file system {fsx_name(cfg.name)} in {stack.region} ...")
    fs = find_file_system(ctx.session.client("fsx"), cfg.name, stack.region, file_system_id)
    live = live_identity(fs, cfg, ctx.session.client("ec2"))
    values = live.model_dump(exclude_none=True)
    yaml_lines = edit.mapping_lines("pinned", values)
    from_config = fsx_identity(cfg)
    config_diff = _diff(live, from_config)
    doc = {
        "file_system_id": fs["FileSystemId"],
        "lifecycle": fs.get("Lifecycle"),
        "pinned": values,
        "pinned_now": cfg.fsx.pinned.model_dump(exclude_none=True) if cfg.fsx.pinned else None,
        "config_differs": config_diff,
        "yaml": "\n".join(yaml_lines),
    }
    text = [f"file system {fs['FileSystemId']} ({fs.get('Lifecycle', '?')}, {fsx_name(cfg.name)}) in {stack.region}"]
    if cfg.fsx.pinned == live:
        text.append("fsx.pinned already matches the live file system")
    elif cfg.fsx.pinned is not None:
        text.append(f"fsx.pinned differs from the live file system: {'; '.join(_diff(cfg.fsx.pinned, live))}")
    if config_diff:
        # Pinning the live values is still right: it makes `pulumi up` refuse this
        # config instead of replacing the file system.
        text.append(
            f"warning: this config would replace the file system ({'; '.join(config_diff)}); with these "
            "values pinned `pulumi up` refuses it until the config matches again"
        )
    text += [f"# {stack.name}: under {ROOT}.fsx in Pulumi.{stack.name}.yaml (replace any pinned: block)", *yaml_lines]
    return doc, text


def write_key(root: Path, stack: Stack, keys: list[str], lines: list[str], value: Any) -> str:
    file = stack_file(stack.name, root)
    before = file.read_text()
    try:
        edit.write_key(file, keys, lines, value)
    except edit.EditRefused as err:
        raise OpsError(str(err)) from None
    try:
        parse_config(load_raw(stack.name, root)[0], stack=stack.name, base_dir=root)
    except (ConfigError, InputError) as err:
        file.write_text(before)  # never leave a stack file `pulumi up` cannot read
        problems = [f"{p}: {m}" for p, m in err.problems] if isinstance(err, ConfigError) else err.lines
        raise OpsError(
            f"not written: with {'.'.join(keys)} set, {file.name} has config problems: " + "; ".join(problems)
        ) from err
    return f"wrote {ROOT}.{'.'.join(keys)} in {file.name}; review it with `git diff {file.name}`"


def run(ctx: Context, args: Any, stack: Stack) -> int:
    want_image = args.image or not args.fsx
    want_fsx = args.fsx or not args.image
    doc: dict[str, Any] = {"stack": stack.name, "region": stack.region}
    text: list[str] = []
    ok = True
    writes: list[tuple[list[str], list[str], Any]] = []
    if want_image:
        image_doc, image_text, ok = _image(ctx, stack)
        doc["image"], text = image_doc, text + image_text
        if ok:
            writes.append((["image", "ami_id"], image_doc["yaml"].splitlines(), image_doc["ami_id"]))
    if want_fsx:
        fsx_doc, fsx_text = _fsx(ctx, stack, args.file_system_id)
        doc["fsx"], text = fsx_doc, text + ([""] if text else []) + fsx_text
        writes.append((["fsx", "pinned"], fsx_doc["yaml"].splitlines(), fsx_doc["pinned"]))
    if not args.json:
        ctx.print("\n".join(text))  # first: a refused --write points the operator at these lines
    doc["written"] = []
    if args.write and ok:
        for keys, lines, value in writes:
            doc["written"].append(write_key(args.stack_dir, stack, keys, lines, value))
            if not args.json:
                ctx.print(doc["written"][-1])
    if args.json:
        ctx.print(json.dumps(doc, indent=2))
    return exits.OK if ok else exits.FAILED
