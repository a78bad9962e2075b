"""The strict stack-file reader: what Pulumi's own YAML reader refuses is refused here,
each problem as `FILE:LINE:COL: ...`, never a traceback (a typo in a stack file is the
most common input error and must read like the config errors do)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from clitools import exits, inputs
from clitools.errors import CliError
from model.containers import STACK_SECRET_PREFIX
from model.paths import CONFIG_NAMESPACE, ROOT
from stackfile.errors import InputError
from stackfile.location import stack_names
from stackfile.tree import SECRET_PLACEHOLDER, is_secure, to_config_tree, type_name

# Stack secrets outside the cluster object (`gpu-cluster:registry_password_*`) run as the same.
PLAN_SECRET_VALUE = SECRET_PLACEHOLDER
# A stack file is a few kilobytes; the bound keeps a device or a huge file from being
# read into memory (a YAML alias bomb is bounded by to_config_tree's value count).
MAX_STACK_FILE = 4 * inputs.MiB
_USAGE = "a stack file is a mapping with `config:` holding `gpu-cluster:cluster:` (see Pulumi.dev.yaml)"


class StackLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys, as Pulumi's own YAML reader does
    (PyYAML would silently keep the last one, and the plan would not be what
    `pulumi preview` refuses)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
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


def _mark(node: yaml.Node | None) -> str:
    return f":{node.start_mark.line + 1}:{node.start_mark.column + 1}" if node is not None else ""


def _child(node: yaml.Node | None, key: str) -> yaml.Node | None:
    if isinstance(node, yaml.MappingNode):
        for k, v in node.value:
            if isinstance(k, yaml.ScalarNode) and k.value == key:
                child: yaml.Node = v
                return child
    return None


def _text(path: Path, name: str, root: Path) -> str:
    """The file's text: a regular file of at most MAX_STACK_FILE bytes, UTF-8."""
    if not path.exists():
        stacks = ", ".join(stack_names(root)) or "none"
        raise InputError(
            [f"{name}: no such stack file; stacks here: {stacks} (pulumi stack init NAME, then copy one)"],
            code=exits.UNREACHABLE,
        )
    try:
        data = inputs.read_bytes(path, "stack file", MAX_STACK_FILE)
    except CliError as err:
        # inputs names the file by its path; a stack file is named as the reader names it
        raise InputError([f"{name}: {line.split(': ', 1)[-1]}" for line in err.lines], code=err.code) from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise InputError([f"{name}: not UTF-8 text (byte {data[err.start]:#04x} at offset {err.start})"]) from None


def _document(text: str, name: str) -> tuple[yaml.Node | None, Any]:
    """(node tree, loaded document) of one YAML document; its errors as FILE:LINE:COL."""
    loader = StackLoader(text)
    try:
        node = loader.get_single_node()
        return node, (loader.construct_document(node) if node is not None else None)
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


def _config(node: yaml.Node | None, doc: Any, name: str) -> tuple[yaml.Node | None, dict[str, Any]]:
    """The `config:` mapping (and its node); InputError if the file has none."""
    if doc is None:
        raise InputError([f"{name}: empty; {_USAGE}"])
    if not isinstance(doc, dict):
        raise InputError([f"{name}{_mark(node)}: the file is {type_name(doc)}, not a mapping; {_USAGE}"])
    config_node = _child(node, "config")
    config = doc.get("config")
    if config is None:
        raise InputError([f"{name}{_mark(config_node or node)}: no `config:` mapping; {_USAGE}"])
    if not isinstance(config, dict):
        raise InputError([f"{name}{_mark(config_node)}: `config:` is {type_name(config)}, not a mapping; {_USAGE}"])
    return config_node, config


def _check_cluster(raw: Any, where: str) -> None:
    if is_secure(raw):
        raise InputError(
            [
                f"{where}: {ROOT} is one secure value; the offline plan cannot decrypt it. "
                f"Keep the object in plain text and make only secret leaves secure "
                f"(pulumi config set --path --secret 'cluster.<key>' ...)"
            ]
        )
    if raw is not None and not isinstance(raw, dict):
        raise InputError(
            [
                f"{where}: {ROOT} is {type_name(raw)}, not a mapping of settings "
                "(name, instance_type, network, capacity, ...); see Pulumi.dev.yaml"
            ]
        )


def _region_problem(region: Any, where: str) -> list[str]:
    if region is None or isinstance(region, str):
        return []
    what = (
        "a secure value (the region is not a secret; keep it in plain text)" if is_secure(region) else type_name(region)
    )
    return [f"{where}: aws:region is {what}; write a region name such as us-east-2"]


def read_stack_file(path: Path, root: Path) -> tuple[Any, Any, list[str], list[str]]:
    """(raw cluster object, aws:region, secret paths, problems) from a stack file; a file
    in `root` (the project directory) is named by its name alone.

    Raises InputError when the file cannot be used at all (missing, unreadable, not
    YAML, not a `config:` mapping)."""
    name = str(path) if path.parent != root else path.name
    node, doc = _document(_text(path, name, root), name)
    config_node, config = _config(node, doc, name)
    raw = config.get(ROOT)
    _check_cluster(raw, f"{name}{_mark(_child(config_node, ROOT))}")
    problems: list[str] = []
    secrets: list[str] = []
    raw = to_config_tree(raw, ROOT, secrets, problems)
    region = config.get("aws:region")
    problems += _region_problem(region, f"{name}{_mark(_child(config_node, 'aws:region'))}")
    return raw, region, secrets, problems


def load_stack_secrets(path: Path) -> tuple[dict[str, str], dict[str, str]]:
    """(secret, plain) registry passwords of the stack file (`gpu-cluster:registry_password_*`).

    Offline readers cannot decrypt `secure:` values and never need them: they run as
    PLAN_SECRET_VALUE. A plain value is passed as plain config, so the plan fails on it
    exactly as `pulumi up` would (infra/stack.py wants it stored with --secret).
    """
    doc = yaml.load(_text(path, path.name, path.parent), Loader=StackLoader) or {}
    if not isinstance(doc, dict):
        return {}, {}
    secret: dict[str, str] = {}
    plain: dict[str, str] = {}
    config = doc.get("config")
    for key, value in (config if isinstance(config, dict) else {}).items():
        if not key.startswith(f"{CONFIG_NAMESPACE}:{STACK_SECRET_PREFIX}"):
            continue
        if isinstance(value, dict) and "secure" in value:
            secret[key] = PLAN_SECRET_VALUE
        else:
            plain[key] = str(value)
    return secret, plain
