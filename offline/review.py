"""Review diff: what a change does to every stack, offline, for a pull request.

    python -m offline.review --base <ref> [--format text|markdown] [--out FILE] [--stack NAME ...]
    make diff BASE=<ref> [FORMAT=markdown] [OUT=FILE]

Renders every stack (each `Pulumi.<stack>.yaml` at either revision) twice with the
offline plan writer (`python -m offline.plan`, Pulumi mocks, no cloud credentials): once
from the base revision, extracted with `git archive` into a temporary directory (the
base may have different code, so it runs in its own process from its own tree; the
user's checkout is never touched), and once from the working tree as it is, uncommitted
edits included. Then it reports, per stack: resources added, replaced, changed (each
changed input as `path: old -> new`, long values elided, secrets never printed) and
removed; dependency and resource-option changes (protect, ignore_changes, ...: what the
engine does, which inputs alone do not show; a resource whose inputs are the same but
whose dependencies or options differ is "engine facts only": AWS sees no call); what
happens to running nodes; and the node files that changed, each with a short unified
diff.

Replacement cannot be asked of the provider here, so `FORCE_NEW` lists, per resource
type this program declares, the inputs whose change makes the provider replace the
resource (its `ForceNew` schema fields [TF-FSX] [TF-FORCENEW]) and those it updates in
place. An input in neither list, or a type not in the table, is reported as
"changed (may replace)": an unknown is never shown as safe. A replaced resource gets a
new id, so resources that refer to it change too; when such a reference is itself a
replace-on-change input, the dependent is replaced as well (a replaced security group
replaces the file system).

With `--cache-dir DIR` a render is kept under DIR by the hash of everything it reads (every
file of the tree it runs from, the stack name, the plan module, the interpreter), so a
tree rendered before, or the same content at both revisions, is rendered once; a stack
that fails to render is never kept.

Anything that replaces or deletes the FSx file system comes first, in a banner.
Exit status (clitools/exits.py): 0 with or without changes; 1 when a stack does not
render at the working tree (the report says why); 2 for a bad base revision, not a git
checkout, or an --out that cannot be written (checked before rendering); 3 when git or
the disk fails; 4 an internal error.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import difflib
import hashlib
import importlib.metadata
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from clitools import exits, help, inputs
from clitools.errors import Unreadable, UsageError
from clitools.runner import guarded
from model.archive import extract_all
from model.block_ends import BLOCK_ENDS_KEY
from stackfile.location import stack_name_problem

REPO = Path(__file__).resolve().parent.parent
MARKER = "<!-- gpu-cluster-review -->"
FSX_TYPE = "aws:fsx/lustreFileSystem:LustreFileSystem"
LT_TYPE = "aws:ec2/launchTemplate:LaunchTemplate"
ASG_TYPE = "aws:autoscaling/group:Group"
SCHEDULE_TYPE = "aws:autoscaling/schedule:Schedule"
PAYLOAD_TYPE = "aws:s3/bucketObjectv2:BucketObjectv2"  # the node payload and the published block ends
ROLLOUT = "see README 'Rolling out a template change on purpose'"
# Lines of unified diff shown per node file; the rest is counted.
DIFF_LINES = 40
# Values longer than this are shown as their length and a hash.
MAX_VALUE = 120
# Markdown report size, below GitHub's comment limit with room for a workflow's footer.
MD_LIMIT = 60000


def _names(words: str) -> frozenset[str]:
    return frozenset(words.split())


# type -> (inputs whose change replaces the resource, inputs updated in place), engine
# (camelCase) names, top-level. From the provider schema's ForceNew / RequiresReplace
# fields [TF-FSX] [TF-FORCENEW]; `tags` is always in place. FSx storageCapacity and
# metadataConfiguration update in place except a decrease (see _replace_keys).
FORCE_NEW: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    FSX_TYPE: (
        _names(
            "backupId copyTagsToBackups deploymentType driveCacheType exportPath "
            "fileSystemTypeVersion importPath importedFileChunkSize kmsKeyId securityGroupIds "
            "storageType subnetIds"
        ),
        _names(
            "autoImportPolicy automaticBackupRetentionDays dailyAutomaticBackupStartTime "
            "dataCompressionType finalBackupTags logConfiguration perUnitStorageThroughput "
            "rootSquashConfiguration skipFinalBackup weeklyMaintenanceStartTime storageCapacity "
            "metadataConfiguration"
        ),
    ),
    "aws:fsx/dataRepositoryAssociation:DataRepositoryAssociation": (
        _names("batchImportMetaDataOnCreate dataRepositoryPath fileSystemId fileSystemPath importedFileChunkSize"),
        _names("s3 deleteDataInFilesystem"),
    ),
    LT_TYPE: (
        _names("name namePrefix"),
        _names(
            "blockDeviceMappings capacityReservationSpecification cpuOptions defaultVersion "
            "description disableApiStop disableApiTermination ebsOptimized iamInstanceProfile imageId "
            "instanceInitiatedShutdownBehavior instanceMarketOptions instanceType keyName "
            "metadataOptions monitoring networkInterfaces placement tagSpecifications "
            "updateDefaultVersion userData vpcSecurityGroupIds"
        ),
    ),
    "aws:ec2/placementGroup:PlacementGroup": (
        _names("name partitionCount spreadLevel strategy"),
        _names(""),
    ),
    ASG_TYPE: (
        _names("name namePrefix"),
        _names(
            "availabilityZones capacityRebalance capacityReservationSpecification defaultCooldown "
            "desiredCapacity forceDelete healthCheckGracePeriod healthCheckType launchTemplate "
            "maxSize minSize protectFromScaleIn suspendedProcesses terminationPolicies "
            "vpcZoneIdentifiers waitForCapacityTimeout"
        ),
    ),
    SCHEDULE_TYPE: (
        _names("autoscalingGroupName scheduledActionName"),
        _names("desiredCapacity endTime maxSize minSize recurrence startTime timeZone"),
    ),
    "aws:iam/role:Role": (
        _names("name namePrefix path"),
        _names("assumeRolePolicy description maxSessionDuration permissionsBoundary"),
    ),
    "aws:iam/instanceProfile:InstanceProfile": (
        _names("name namePrefix path"),
        _names("role"),
    ),
    "aws:iam/rolePolicy:RolePolicy": (
        _names("name namePrefix role"),
        _names("policy"),
    ),
    "aws:iam/rolePolicyAttachment:RolePolicyAttachment": (
        _names("policyArn role"),
        _names(""),
    ),
    "aws:ec2/securityGroup:SecurityGroup": (
        _names("description name namePrefix vpcId"),
        _names("egress ingress revokeRulesOnDelete"),
    ),
    "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule": (
        _names("securityGroupId"),
        _names("cidrIpv4 cidrIpv6 description fromPort ipProtocol prefixListId referencedSecurityGroupId toPort"),
    ),
    "aws:s3/bucket:Bucket": (
        _names("bucket bucketPrefix"),
        _names("forceDestroy"),
    ),
    "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock": (
        _names("bucket"),
        _names("blockPublicAcls blockPublicPolicy ignorePublicAcls restrictPublicBuckets"),
    ),
    PAYLOAD_TYPE: (
        _names("bucket key"),
        _names("content contentBase64 contentType source etag serverSideEncryption"),
    ),
    "aws:ec2/vpc:Vpc": (
        _names("cidrBlock ipv4IpamPoolId ipv4NetmaskLength"),
        _names("enableDnsHostnames enableDnsSupport instanceTenancy"),
    ),
    "aws:ec2/subnet:Subnet": (
        _names("availabilityZone availabilityZoneId cidrBlock vpcId"),
        _names("mapPublicIpOnLaunch"),
    ),
    "aws:ec2/internetGateway:InternetGateway": (_names(""), _names("vpcId")),
    "aws:ec2/eip:Eip": (_names("domain vpc publicIpv4Pool"), _names("instance networkInterface")),
    "aws:ec2/natGateway:NatGateway": (
        _names("allocationId connectivityType privateIp subnetId"),
        _names(""),
    ),
    "aws:ec2/routeTable:RouteTable": (_names("vpcId"), _names("routes propagatingVgws")),
    "aws:ec2/route:Route": (
        _names("destinationCidrBlock destinationIpv6CidrBlock routeTableId"),
        _names("gatewayId natGatewayId networkInterfaceId vpcEndpointId"),
    ),
    "aws:ec2/routeTableAssociation:RouteTableAssociation": (
        _names("gatewayId subnetId"),
        _names("routeTableId"),
    ),
    "aws:ec2/vpcEndpoint:VpcEndpoint": (
        _names("serviceName vpcEndpointType vpcId"),
        _names("policy privateDnsEnabled routeTableIds securityGroupIds subnetIds"),
    ),
    # the log group keeps its events across retention and key changes (PutRetentionPolicy,
    # AssociateKmsKey); a new name is a new group, the old one's events deleted with it
    "aws:cloudwatch/logGroup:LogGroup": (
        _names("name namePrefix logGroupClass"),
        _names("retentionInDays kmsKeyId skipDestroy"),
    ),
    "aws:cloudwatch/dashboard:Dashboard": (_names("dashboardName"), _names("dashboardBody")),
}
FORCE_NEW["aws:vpc/securityGroupEgressRule:SecurityGroupEgressRule"] = FORCE_NEW[
    "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule"
]

# Secrets: Pulumi's secret wrapper as the mocks record it, input names that say so, and
# values that look like key material. Their values are never printed, only that they
# changed.
_SECRET_SIG = ("4dabf18193072939515e22adb298388d", "1b47061264138c4ac30d75fd1eb44270")
_SECRET_WORDS = {"password", "passwd", "secret", "secrets", "token", "credential", "credentials", "apikey"}
_SECRET_VALUE = re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----|\bAKIA[0-9A-Z]{16}\b|^v1:[A-Za-z0-9+/=]{8,}:")
_SECRET_ASSIGNMENT = re.compile(
    r"(?i)(\b[A-Za-z0-9_]*(?:password|passwd|secret|token|credential|api_?key|private_?key)[A-Za-z0-9_]*"
    r"[\"']?\s*[=:]\s*[\"']?)([^\s\"'$][^\s\"']*)"
)
SECRET = "[secret]"


class ReviewError(UsageError):
    """A problem the user fixes (bad ref, not a checkout): one line, exit status 2."""


def _words(key: str) -> list[str]:
    return [w.lower() for w in re.findall(r"[A-Z]?[a-z0-9]+|[A-Z]+(?![a-z])", key)]


def _secret_key(key: str) -> bool:
    words = _words(key)
    joined = {a + b for a, b in zip(words, words[1:], strict=False)}
    return bool(_SECRET_WORDS.intersection(words) or {"privatekey", "apikey"} & joined)


def _has_secret(value: Any) -> bool:
    """A whole dict or list shown at once (an added item) hides nothing secret inside."""
    if isinstance(value, dict):
        if isinstance(value.get("key"), str) and _secret_key(value["key"]):
            return True
        return any(_secret_key(str(k)) or _has_secret(v) or _is_secret_wrapper(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_has_secret(v) or _is_secret_wrapper(v) for v in value)
    return isinstance(value, str) and bool(_SECRET_VALUE.search(value))


def _is_secret_wrapper(value: Any) -> bool:
    return isinstance(value, dict) and value.get(_SECRET_SIG[0]) == _SECRET_SIG[1]


def _show(value: Any, secret: bool = False) -> str:
    """One value for a report line: secrets hidden, long values as length and hash."""
    if value is _MISSING:
        return "(none)"
    if secret or _is_secret_wrapper(value) or _has_secret(value):
        return SECRET
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    if isinstance(value, str) and _SECRET_VALUE.search(value):
        return SECRET
    if isinstance(value, str):
        text = json.dumps(value)
    if len(text) > MAX_VALUE:
        digest = hashlib.sha256(text.encode()).hexdigest()[:12]
        return f"<{len(text)} chars, sha256 {digest}>"
    return text


class _Missing:
    def __repr__(self) -> str:
        return "(none)"


_MISSING = _Missing()


def diff_inputs(old: Any, new: Any, path: str = "", secret: bool = False) -> list[tuple[str, str, str]]:
    """(path, old, new) for every leaf that differs; secret leaves show as [secret]."""
    if _is_secret_wrapper(old) or _is_secret_wrapper(new):
        o = old.get("value") if _is_secret_wrapper(old) else old
        n = new.get("value") if _is_secret_wrapper(new) else new
        return [] if o == n else [(path, _show(old, True), _show(new, True))]
    if isinstance(old, dict) and isinstance(new, dict):
        # {"key": NAME, "value": ...} (Auto Scaling tags): NAME says whether it is secret.
        named = {d["key"] for d in (old, new) if isinstance(d.get("key"), str)}
        secret = secret or any(_secret_key(n) for n in named)
        out = []
        for k in sorted(set(old) | set(new)):
            sub = f"{path}.{k}" if path else k
            out += diff_inputs(old.get(k, _MISSING), new.get(k, _MISSING), sub, secret or _secret_key(k))
        return out
    if _keyed(old) and _keyed(new):
        # Lists of {"key": ...} items are maps: match items by key, not by position, so
        # one added tag is one line.
        o, n = ({d["key"]: d for d in lst} for lst in (old, new))
        out = []
        for k in sorted(set(o) | set(n)):
            out += diff_inputs(o.get(k, _MISSING), n.get(k, _MISSING), f"{path}[key={k}]", secret or _secret_key(k))
        return out
    if isinstance(old, list) and isinstance(new, list):
        out = []
        for i in range(max(len(old), len(new))):
            o = old[i] if i < len(old) else _MISSING
            n = new[i] if i < len(new) else _MISSING
            out += diff_inputs(o, n, f"{path}[{i}]", secret)
        return out
    if old == new:
        return []
    return [(path, _show(old, secret), _show(new, secret))]


def _keyed(value: Any) -> bool:
    if not isinstance(value, list) or not all(isinstance(d, dict) and isinstance(d.get("key"), str) for d in value):
        return False
    return len({d["key"] for d in value}) == len(value)


def _redact_line(line: str) -> str:
    if _SECRET_VALUE.search(line):
        return line[:1] + SECRET if line[:1] in "+- " else SECRET
    return _SECRET_ASSIGNMENT.sub(lambda m: m.group(1) + SECRET, line)


# --- rendering both revisions -------------------------------------------------------------


def _git(args: list[str], cwd: Path, **kw: Any) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, **kw)


def resolve_base(ref: str, repo: Path = REPO) -> str:
    top = _git(["rev-parse", "--show-toplevel"], repo, text=True)
    if top.returncode != 0:
        raise ReviewError(f"review: {repo} is not a git checkout; the base revision is read with git")
    sha = _git(["rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"], repo, text=True)
    if sha.returncode != 0 or not sha.stdout.strip():
        raise ReviewError(
            f"review: base revision {ref!r} is not a commit in this repository "
            "(a branch, tag or sha; in CI fetch it first, e.g. `git fetch origin main` and use origin/main)"
        )
    resolved: str = sha.stdout.strip()
    return resolved


def extract_tree(sha: str, dest: Path, repo: Path = REPO) -> None:
    """The base revision's files, without touching the user's checkout or index."""
    proc = _git(["archive", "--format=tar", sha], repo)
    if proc.returncode != 0:
        raise ReviewError(f"review: git archive {sha} failed: {proc.stderr.decode(errors='replace').strip()}")
    with tarfile.open(fileobj=io.BytesIO(proc.stdout)) as tar:
        extract_all(tar, dest)


def stacks_in(tree: Path) -> list[str]:
    return sorted(p.name[len("Pulumi.") : -len(".yaml")] for p in tree.glob("Pulumi.*.yaml"))


@dataclass
class Render:
    stack: str
    out: Path
    error: str | None = None


# The plan writer's module at a revision: revisions from before the offline tools left
# infra/ have it as infra/plan.py, and a base is rendered with its own code.
PLAN_MODULES = (("offline/plan.py", "offline.plan"), ("infra/plan.py", "infra.plan"))


def plan_module(tree: Path) -> str:
    for path, module in PLAN_MODULES:
        if (tree / path).is_file():
            return module
    return PLAN_MODULES[0][1]  # neither: the run fails and the report shows why


# Part of every cache key: bump it when what a render writes changes shape.
RENDER_CACHE_VERSION = "1"
# Renders kept in a cache directory (the most recently used ones; about 1 MB each).
RENDER_CACHE_KEEP = 32


def head_files(repo: Path) -> list[str]:
    """What `python -m offline.plan` can read from the working tree: every file git does
    not ignore (tracked, or new), as it is now."""
    listed = _git(["ls-files", "-z", "--cached", "--others", "--exclude-standard"], repo).stdout
    return sorted({p.decode() for p in listed.split(b"\0") if p})


def tree_files(tree: Path) -> list[str]:
    return sorted(p.relative_to(tree).as_posix() for p in tree.rglob("*") if p.is_file() or p.is_symlink())


def tree_digest(tree: Path, files: list[str]) -> str:
    """sha256 over each file's path, kind (file, executable, symlink) and content: the same
    for a commit's extracted tree and a working tree holding the same content."""
    h = hashlib.sha256()
    for rel in sorted(files):
        p = tree / rel
        if p.is_symlink():
            kind, data = "l", os.readlink(p).encode()
        elif p.is_file():
            kind, data = ("x" if os.access(p, os.X_OK) else "f"), p.read_bytes()
        else:
            continue  # listed in the index but deleted in the working tree
        h.update(f"{kind} {rel}\0{len(data)}\0".encode())
        h.update(data)
    return h.hexdigest()


def _installed(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "-"


def render_key(digest: str, tree: Path, stack: str) -> str:
    """The tree's content, the stack, the plan module and the interpreter with the Pulumi
    packages it renders with (installed outside the tree)."""
    interpreter = (sys.executable, sys.version, _installed("pulumi"), _installed("pulumi_aws"))
    parts = (RENDER_CACHE_VERSION, digest, stack, plan_module(tree), *interpreter)
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


def cached_render(tree: Path, stack: str, out: Path, key: str, cache: Path | None) -> Render:
    """`render`, kept under `cache/key` (a hit is used where it lies, and marked used)."""
    if cache is None:
        return render(tree, stack, out)
    kept = cache / key
    if (kept / "plan.json").is_file():
        os.utime(kept)
        return Render(stack, kept)
    done = render(tree, stack, out)
    if done.error is None:
        cache.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{key[:12]}-", dir=cache))
        shutil.copytree(out, tmp, dirs_exist_ok=True)
        try:
            os.replace(tmp, kept)  # atomic; another review may have kept the same render
        except OSError:
            shutil.rmtree(tmp, ignore_errors=True)
    return done


def prune_cache(cache: Path, keep: int = RENDER_CACHE_KEEP) -> None:
    entries = sorted((p for p in cache.iterdir() if p.is_dir() and not p.name.startswith(".")), key=os.path.getmtime)
    for old in entries[: max(0, len(entries) - keep)]:
        shutil.rmtree(old, ignore_errors=True)


def render(tree: Path, stack: str, out: Path) -> Render:
    """`python -m offline.plan` from `tree`, in its own process: that tree's code, not ours."""
    env = {**os.environ, "PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION": "true"}
    env.pop("PYTHONPATH", None)
    try:
        proc = subprocess.run(
            [sys.executable, "-m", plan_module(tree), "--stack", stack, "--out", str(out)],
            cwd=tree,
            capture_output=True,
            text=True,
            timeout=600,
            env=env,
        )
    except subprocess.TimeoutExpired:
        return Render(stack, out, "the plan writer did not finish within 600 s")
    if proc.returncode != 0 or not (out / "plan.json").is_file():
        lines = [ln for ln in (proc.stderr or proc.stdout).strip().splitlines() if ln.strip()]
        return Render(stack, out, "\n".join(lines[-12:]) or f"exit status {proc.returncode}")
    return Render(stack, out)


# --- comparing two plans ------------------------------------------------------------------


@dataclass
class Change:
    key: str
    type: str
    name: str
    kind: str  # added | removed | replaced | changed | may-replace | engine
    inputs: list[tuple[str, str, str]] = field(default_factory=list)
    # "+ Type name" / "- Type name": dependencies gained and lost.
    dependencies: list[str] = field(default_factory=list)
    # (option, old, new) for every resource option that differs.
    options: list[tuple[str, str, str]] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


@dataclass
class FileDiff:
    path: str
    status: str  # added | removed | changed
    lines: list[str] = field(default_factory=list)
    more: int = 0


@dataclass
class StackReport:
    stack: str
    status: str = "changed"  # changed | added | removed | error
    error: str | None = None
    changes: list[Change] = field(default_factory=list)
    files: list[FileDiff] = field(default_factory=list)
    fsx_alerts: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    fsx_protected: bool | None = None


def _key(r: dict[str, Any]) -> str:
    return r.get("urn") or f"{r['type']}::{r['name']}"


def _custom(plan: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {_key(r): r for r in plan.get("resources", []) if r.get("custom", True)}


def _mock_id(r: dict[str, Any]) -> str | None:
    """The id the plan writer's mocks gave `r` (what other resources' inputs carry)."""
    from offline import mocks as planmod

    typ, name, inputs = r["type"], r["name"], r.get("inputs") or {}
    if typ == FSX_TYPE:
        return planmod.FSX_ID
    given: str | None = inputs.get("name")
    if typ in ("aws:iam/role:Role", "aws:iam/instanceProfile:InstanceProfile"):
        return given or f"{name}-{planmod._hex(name, 7)}"
    if typ == ASG_TYPE:
        return given or name
    if typ in planmod._ID_PREFIX:
        return planmod._ID_PREFIX[typ] + planmod._hex(name)
    return None


def _refers(value: Any, needle: str) -> bool:
    if isinstance(value, str):
        return needle in value
    if isinstance(value, dict):
        return any(_refers(v, needle) for v in value.values())
    if isinstance(value, list):
        return any(_refers(v, needle) for v in value)
    return False


def _replace_keys(r_old: dict[str, Any], r_new: dict[str, Any], keys: set[str]) -> tuple[list[str], list[str]]:
    """(keys that replace, keys not known to update in place) for a changed resource."""
    table = FORCE_NEW.get(r_new["type"])
    if table is None:
        return [], sorted(keys)
    force_new, in_place = table
    replace = sorted(k for k in keys if k in force_new)
    unknown = sorted(k for k in keys if k not in force_new and k not in in_place and k not in ("tags", "tagsAll"))
    if r_new["type"] == FSX_TYPE and "storageCapacity" in keys:
        old, new = (r.get("inputs", {}).get("storageCapacity") for r in (r_old, r_new))
        deployment = r_new.get("inputs", {}).get("deploymentType")
        if (isinstance(old, int) and isinstance(new, int) and new < old) or deployment == "SCRATCH_1":
            replace.append("storageCapacity")
    return replace, unknown


def _dep_label(urn: str) -> str:
    parts = urn.split("::")
    return f"{_short_type(parts[2].split('$')[-1])} {parts[-1]}" if len(parts) >= 4 else urn


def has_facts(plan: dict[str, Any]) -> bool:
    """Whether a plan records dependencies and options (plan writers before issue 17 did not)."""
    return any("dependencies" in r for r in plan.get("resources", []))


def diff_facts(r_old: dict[str, Any], r_new: dict[str, Any]) -> tuple[list[str], list[tuple[str, str, str]]]:
    """(dependencies gained/lost, options changed) between two records of one resource."""
    o, n = set(r_old.get("dependencies") or ()), set(r_new.get("dependencies") or ())
    deps = [f"+ {_dep_label(u)}" for u in sorted(n - o)] + [f"- {_dep_label(u)}" for u in sorted(o - n)]
    oo, no = r_old.get("options") or {}, r_new.get("options") or {}
    options = [
        (k, _show(oo.get(k, _MISSING)), _show(no.get(k, _MISSING)))
        for k in sorted(set(oo) | set(no))
        if oo.get(k, _MISSING) != no.get(k, _MISSING)
    ]
    return deps, options


def compare_plans(base: dict[str, Any], head: dict[str, Any]) -> list[Change]:
    old, new = _custom(base), _custom(head)
    facts = has_facts(base) and has_facts(head)
    changes: dict[str, Change] = {}
    for k in sorted(set(new) - set(old)):
        changes[k] = Change(k, new[k]["type"], new[k]["name"], "added")
    for k in sorted(set(old) - set(new)):
        changes[k] = Change(k, old[k]["type"], old[k]["name"], "removed")
    for k in sorted(set(old) & set(new)):
        diffs = diff_inputs(old[k].get("inputs") or {}, new[k].get("inputs") or {})
        deps, options = diff_facts(old[k], new[k]) if facts else ([], [])
        if not diffs:
            if deps or options:
                changes[k] = Change(k, new[k]["type"], new[k]["name"], "engine", dependencies=deps, options=options)
            continue
        top = {re.split(r"[.\[]", p, maxsplit=1)[0] for p, _, _ in diffs}
        replace, unknown = _replace_keys(old[k], new[k], top)
        kind = "replaced" if replace else ("may-replace" if unknown else "changed")
        reasons = [f"{x} cannot change in place" for x in replace]
        reasons += [f"{x}: not known to update in place" for x in unknown] if not replace else []
        changes[k] = Change(
            k, new[k]["type"], new[k]["name"], kind, diffs, reasons=reasons, dependencies=deps, options=options
        )
    _propagate_replacements(changes, old, new)
    return list(changes.values())


def _propagate_replacements(
    changes: dict[str, Change], old: dict[str, dict[str, Any]], new: dict[str, dict[str, Any]]
) -> None:
    """A replaced resource gets a new id: whatever refers to it changes with it (and is
    replaced when the reference is a replace-on-change input)."""
    queue = [k for k, c in changes.items() if c.kind == "replaced"]
    seen = set(queue)
    while queue:
        src = new[queue.pop()]
        rid = _mock_id(src)
        if not rid:
            continue
        for k, r in new.items():
            if k == _key(src) or k not in old:
                continue
            refs = sorted(key for key, v in (r.get("inputs") or {}).items() if _refers(v, rid))
            if not refs:
                continue
            c = changes.get(k) or Change(k, r["type"], r["name"], "changed")
            if c.kind == "engine":
                c.kind = "changed"
            changes[k] = c
            table = FORCE_NEW.get(r["type"])
            forced = [x for x in refs if table and x in table[0]]
            for x in refs:
                note = f"{x} refers to {src['name']}, which is replaced (new id)"
                if note not in c.reasons:
                    c.reasons.append(note)
            if forced and c.kind != "replaced":
                c.kind = "replaced"
            elif table is None and c.kind == "changed":
                c.kind = "may-replace"
            if c.kind == "replaced" and k not in seen:
                seen.add(k)
                queue.append(k)


def _file_tree(render_dir: Path) -> dict[str, Path]:
    """Node files by path: every `userdata/<name>/files/...` plus each raw user data."""
    root = render_dir / "userdata"
    if not root.is_dir():
        return {}
    out = {}
    for p in sorted(root.rglob("*")):
        if not p.is_file() or p.name in ("index.json", "payload.tar.gz"):
            continue
        rel = p.relative_to(root).parts
        if len(rel) >= 3 and rel[1] == "files":
            out[f"{rel[0]}:/" + "/".join(rel[2:])] = p
        elif rel[-1] == "user-data":
            out[f"{rel[0]}:user-data"] = p
    return out


def _text(p: Path) -> list[str] | None:
    data = p.read_bytes()
    if data[:2] == b"\x1f\x8b" or b"\0" in data:
        return None
    try:
        return data.decode().splitlines()
    except UnicodeDecodeError:
        return None


def compare_files(base_dir: Path, head_dir: Path, max_lines: int = DIFF_LINES) -> list[FileDiff]:
    old, new = _file_tree(base_dir), _file_tree(head_dir)
    out = []
    for path in sorted(set(old) | set(new)):
        o, n = old.get(path), new.get(path)
        if o is not None and n is not None and o.read_bytes() == n.read_bytes():
            continue
        status = "added" if o is None else "removed" if n is None else "changed"
        a = _text(o) if o is not None else []
        b = _text(n) if n is not None else []
        if a is None or b is None:
            out.append(FileDiff(path, status, ["(gzip'd MIME user data: the files it writes are listed one by one)"]))
            continue
        lines = list(difflib.unified_diff(a, b, f"base/{path}", f"head/{path}", n=1, lineterm=""))
        lines = [_redact_line(ln) for ln in lines]
        out.append(FileDiff(path, status, lines[:max_lines], max(0, len(lines) - max_lines)))
    return out


def _size(inputs: dict[str, Any]) -> str:
    return "/".join(str(inputs.get(k, "?")) for k in ("minSize", "maxSize", "desiredCapacity"))


# What a changed resource option makes the engine do, from its new value (shown JSON).
_OPTION_NOTES = {
    "protect": lambda n: (
        "protect on: a preview that would delete or replace it fails"
        if n == "true"
        else "protect off: the engine may now delete or replace it"
    ),
    "retain_on_delete": lambda n: (
        "retain_on_delete on: removing it from the program (or destroy) leaves it in the account"
        if n == "true"
        else "retain_on_delete off: removing it from the program deletes it in AWS"
    ),
    "ignore_changes": lambda n: f"ignore_changes {n}: after creation the engine no longer sends these inputs",
    "delete_before_replace": lambda n: (
        "delete_before_replace on: a replacement deletes the old one before creating the new"
        if n == "true"
        else "delete_before_replace off: a replacement creates the new one before deleting the old"
    ),
    "replace_on_changes": lambda n: f"replace_on_changes {n}: a change to these inputs replaces it",
}


def _explain_facts(report: StackReport, base: dict[str, Any] | None, head: dict[str, Any] | None) -> None:
    """Notes on dependency and option changes, and on a base that records neither."""
    if base is not None and head is not None and has_facts(head) and not has_facts(base):
        report.notes.append(
            "the base revision's plans record no dependencies or resource options (an older plan writer): "
            "only inputs are compared."
        )
    for c in report.changes:
        c.notes += [_OPTION_NOTES[k](n) for k, _, n in c.options if k in _OPTION_NOTES]
        if c.kind == "engine":
            c.notes.append("inputs unchanged: AWS sees no call; the engine records the new facts in the stack state.")


def explain(report: StackReport, base: dict[str, Any] | None, head: dict[str, Any] | None) -> None:
    """Notes in plain words: FSx, the launch template, group sizes and schedules."""
    old = _custom(base) if base else {}
    new = _custom(head) if head else {}
    if head is not None:
        report.fsx_protected = (head.get("outputs") or {}).get("fsx_protected")
    _explain_facts(report, base, head)
    # "engine facts only" changes were explained above; their inputs say nothing new.
    for c in [c for c in report.changes if c.kind != "engine"]:
        if c.type == FSX_TYPE and c.kind in ("replaced", "removed", "may-replace"):
            verb = {"replaced": "REPLACED", "removed": "DELETED", "may-replace": "possibly REPLACED"}[c.kind]
            why = "; ".join(c.reasons) if c.reasons else "it is no longer declared"
            alert = (
                f"FSx file system {c.name} will be {verb} ({why}): the data on /fsx (Slurm state, "
                "checkpoints, datasets, validation baselines) is lost unless backed up."
            )
            if report.fsx_protected:
                alert += " Pulumi `protect` is on: `pulumi up` fails until the stack file says fsx.allow_replace: true."
            if c.kind != "removed":
                alert += (
                    " The new file system has a new DNS name, so the nodes' payload and launch template change"
                    " too when it is applied; running nodes keep mounting the old one until replaced."
                )
            report.fsx_alerts.append(alert)
        if c.type == LT_TYPE and c.kind in ("changed", "may-replace", "replaced"):
            what = "new launch template" if c.kind == "replaced" else "new launch template version"
            c.notes.append(f"{what}: running nodes keep the old one; only new and replaced nodes get it; {ROLLOUT}.")
        if c.type == ASG_TYPE and c.kind != "removed":
            o = (old.get(c.key) or {}).get("inputs") or {}
            n = (new.get(c.key) or {}).get("inputs") or {}
            if c.kind == "added":
                c.notes.append(f"new Auto Scaling group, size min/max/desired {_size(n)}.")
            elif _size(o) != _size(n):
                c.notes.append(
                    f"group size min/max/desired {_size(o)} -> {_size(n)}: Auto Scaling launches or "
                    "terminates nodes at once to match (a shrink terminates running nodes)."
                )
            if c.kind != "added" and o.get("launchTemplate") != n.get("launchTemplate"):
                c.notes.append("the group moves to another template version: its running nodes are not replaced.")
        if c.type == ASG_TYPE and c.kind == "removed":
            c.notes.append("the group is deleted: its running nodes are terminated.")
        if c.type == SCHEDULE_TYPE:
            n = (new.get(c.key) or old.get(c.key) or {}).get("inputs") or {}
            if c.kind == "removed":
                c.notes.append("scheduled action removed: the group is no longer resized at that time.")
            else:
                c.notes.append(
                    f"scheduled action: at {n.get('startTime', '?')} the group becomes min/max/desired {_size(n)}."
                )
        if c.type == PAYLOAD_TYPE and c.kind != "removed":
            c.notes.append(_object_note(new.get(c.key) or old.get(c.key) or {}))


def _object_note(resource: dict[str, Any]) -> str:
    """The node payload is content-addressed; the published block ends are one object."""
    if (resource.get("inputs") or {}).get("key") == BLOCK_ENDS_KEY:
        return (
            "published block ends: updated in place; the controller reads it within 5 minutes and moves each"
            " block's reservation and drain to the new end, without restarting any node."
        )
    return (
        "node payload: its key is the content's sha256, so new content is a new object; the user data"
        " names it, so only nodes launched from the new template version fetch it."
    )


def review(
    base_ref: str,
    repo: Path = REPO,
    stacks: list[str] | None = None,
    workdir: Path | None = None,
    cache: Path | None = None,
) -> tuple[str, list[StackReport]]:
    """`cache`: keep renders there by content (module docstring); None: render everything."""
    sha = resolve_base(base_ref, repo)
    with tempfile.TemporaryDirectory(prefix="gpu-cluster-review-", dir=workdir) as tmp:
        tmpdir = Path(tmp)
        base_tree = tmpdir / "base"
        base_tree.mkdir()
        extract_tree(sha, base_tree, repo)
        base_stacks, head_stacks = set(stacks_in(base_tree)), set(stacks_in(repo))
        names = sorted(base_stacks | head_stacks)
        if stacks:
            unknown = [s for s in stacks if s not in base_stacks | head_stacks]
            if unknown:
                raise ReviewError(
                    f"review: no stack file Pulumi.{unknown[0]}.yaml at either revision; "
                    f"stacks: {', '.join(names) or '(none)'}"
                )
            names = [s for s in names if s in stacks]
        jobs = [(base_tree, s, tmpdir / "out" / "base" / s) for s in names if s in base_stacks]
        jobs += [(repo, s, tmpdir / "out" / "head" / s) for s in names if s in head_stacks]
        by = _render_all(jobs, base_tree, repo, cache)
        reports = []
        for s in names:
            b, h = by.get((str(base_tree), s)), by.get((str(repo), s))
            reports.append(_stack_report(s, b, h))
    return sha, reports


def _render_all(
    jobs: list[tuple[Path, str, Path]], base_tree: Path, repo: Path, cache: Path | None
) -> dict[tuple[str, str], Render]:
    """Every (tree, stack) rendered, two at a time; with a cache, identical content (the
    same key) is rendered once even within one review."""
    keys: dict[tuple[str, str], str] = {}
    if cache is not None:
        digests = {
            str(base_tree): tree_digest(base_tree, tree_files(base_tree)),
            str(repo): tree_digest(repo, head_files(repo)),
        }
        keys = {(str(t), s): render_key(digests[str(t)], t, s) for t, s, _ in jobs}
    first: dict[str, tuple[Path, str, Path]] = {}
    for t, s, out in jobs:
        first.setdefault(keys.get((str(t), s), f"{t}\0{s}"), (t, s, out))
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        done = dict(zip(first, pool.map(lambda k: cached_render(*first[k], k, cache), first), strict=True))
    if cache is not None and cache.is_dir():
        prune_cache(cache)
    return {(str(t), s): done[keys.get((str(t), s), f"{t}\0{s}")] for t, s, _ in jobs}


def _load(r: Render | None) -> dict[str, Any] | None:
    if r is None or r.error:
        return None
    plan: dict[str, Any] = json.loads((r.out / "plan.json").read_text())
    return plan


def _stack_report(stack: str, b: Render | None, h: Render | None) -> StackReport:
    rep = StackReport(stack)
    if h is not None and h.error:
        rep.status, rep.error = "error", f"does not render at the working tree:\n{h.error}"
        return rep
    base, head = _load(b), _load(h)
    if head is None:
        # Deleting a stack file deletes nothing in AWS; `pulumi destroy` would.
        rep.status = "removed"
        count = len(_custom(base)) if base else 0
        rep.notes.append(
            f"Pulumi.{stack}.yaml is removed: that alone deletes nothing. The stack's {count} resources (its FSx "
            "file system and the data on /fsx included) stay until `pulumi destroy` is run on it."
        )
        return rep
    if b is None or b.error:
        rep.status = "added" if b is None else "changed"
        if b is not None:
            rep.error = f"the base revision does not render this stack (shown as all new):\n{b.error}"
        rep.changes = compare_plans({}, head)
        files = len(_file_tree(h.out)) if h else 0
        rep.notes.append(
            f"{files} node files, all new: `python -m offline.plan --stack {stack} --out DIR` writes them."
        )
        explain(rep, None, head)
        return rep
    rep.changes = compare_plans(base or {}, head)
    rep.files = compare_files(b.out, h.out) if h else []
    explain(rep, base, head)
    return rep


# --- output ---------------------------------------------------------------------------------

_ORDER = {"replaced": 0, "removed": 1, "may-replace": 2, "changed": 3, "engine": 4, "added": 5}
_LABEL = {
    "added": "added",
    "removed": "removed",
    "replaced": "replaced",
    "changed": "changed",
    "may-replace": "changed (may replace)",
    "engine": "engine facts only",
}


def _sorted(changes: list[Change]) -> list[Change]:
    return sorted(changes, key=lambda c: (c.type != FSX_TYPE, _ORDER[c.kind], c.type, c.name))


def _summary(rep: StackReport) -> str:
    counts: dict[str, int] = {}
    for c in rep.changes:
        counts[c.kind] = counts.get(c.kind, 0) + 1
    parts = [
        f"{counts[k]} {_LABEL[k]}"
        for k in ("added", "changed", "may-replace", "replaced", "removed", "engine")
        if k in counts
    ]
    if rep.files:
        parts.append(f"{len(rep.files)} node file(s) changed")
    if rep.status == "removed":
        return "stack file removed, no resource deleted by it"
    return ", ".join(parts) if parts else "no changes"


def _short_type(t: str) -> str:
    return t.split(":")[-1] if t.count(":") >= 2 else t


def _banner(reports: list[StackReport]) -> list[str]:
    return [f"{r.stack}: {a}" for r in reports for a in r.fsx_alerts]


def format_text(sha: str, base_ref: str, reports: list[StackReport]) -> str:
    out = [f"Review: base {base_ref} ({sha[:12]}) -> working tree; offline plans (Pulumi mocks)"]
    alerts = _banner(reports)
    if alerts:
        out += ["", "!" * 78, "!! FSx DATA AT RISK: data on /fsx will be lost unless backed up"]
        out += [f"!! {a}" for a in alerts]
        out += ["!" * 78]
    for rep in reports:
        out += [
            "",
            f"== stack {rep.stack}{_stack_status(rep)}: {_summary(rep) if rep.status != 'error' else 'error'}",
        ]
        if rep.error:
            out += [f"   {ln}" for ln in rep.error.splitlines()]
        out += [f"   {n}" for n in rep.notes]
        if rep.status == "error":
            continue
        for c in _sorted(rep.changes):
            out.append(f"  {_LABEL[c.kind]:<22} {_short_type(c.type)} {c.name}")
            out += [f"      because {r}" for r in c.reasons]
            out += [f"      {p}: {o} -> {n}" for p, o, n in c.inputs]
            out += [f"      dependency {d}" for d in c.dependencies]
            out += [f"      option {k}: {o} -> {n}" for k, o, n in c.options]
            out += [f"      note: {n}" for n in c.notes]
        if rep.files:
            out.append("  node files:")
            for f in rep.files:
                out.append(f"    {f.status} {f.path}")
                out += [f"      {ln}" for ln in f.lines]
                if f.more:
                    out.append(f"      ... {f.more} more lines")
    return "\n".join(out) + "\n"


def _stack_status(rep: StackReport) -> str:
    return {"added": " (new stack)", "removed": " (stack removed)"}.get(rep.status, "")


def _md_code(text: str) -> str:
    return "`" + text.replace("`", "'") + "`"


def format_markdown(sha: str, base_ref: str, reports: list[StackReport]) -> str:
    """The PR comment. GitHub refuses a comment body above 65536 characters [GH-COMMENT]:
    past MD_LIMIT the node-file diffs, then the changed inputs, are left out (with a
    pointer to `make diff`), never the banner or the resource table."""
    for files, with_inputs in ((True, True), (False, True), (False, False)):
        text = _markdown(sha, base_ref, reports, files, with_inputs)
        if len(text) <= MD_LIMIT:
            return text
    return text[: MD_LIMIT - 200] + "\n\n... cut at the comment size limit; run `make diff` for the rest.\n"


def _markdown(sha: str, base_ref: str, reports: list[StackReport], files: bool, inputs: bool) -> str:
    out = [MARKER, "## gpu-cluster review", ""]
    out.append(
        f"Base `{base_ref}` (`{sha[:12]}`) against this change; offline plans from "
        "`python -m offline.plan` (Pulumi mocks, no cloud credentials)."
    )
    alerts = _banner(reports)
    if alerts:
        out += ["", "> [!CAUTION]", "> **FSx data at risk: the data on /fsx will be lost unless backed up.**"]
        out += [f"> - {a}" for a in alerts]
    for rep in reports:
        head = "error" if rep.status == "error" else _summary(rep)
        out += ["", f"### Stack `{rep.stack}`{_stack_status(rep)}: {head}"]
        if rep.error:
            out += ["", "```", rep.error, "```"]
        out += ["", *rep.notes] if rep.notes else []
        if rep.status == "error" or not rep.changes:
            pass
        else:
            out += ["", "| change | type | name | why |", "|---|---|---|---|"]
            for c in _sorted(rep.changes):
                keys = sorted({re.split(r"[.\[]", p, maxsplit=1)[0] for p, _, _ in c.inputs})
                what = [f"inputs: {', '.join(keys)}"] if keys else []
                what += [f"dependencies: {', '.join(c.dependencies)}"] if c.dependencies else []
                what += [f"options: {', '.join(f'{k} {o} -> {n}' for k, o, n in c.options)}"] if c.options else []
                why = "; ".join(c.reasons + what + c.notes).replace("|", "\\|")
                label = f"**{_LABEL[c.kind]}**" if c.kind in ("replaced", "removed", "may-replace") else _LABEL[c.kind]
                out.append(f"| {label} | {_md_code(_short_type(c.type))} | {_md_code(c.name)} | {why} |")
            changed = [c for c in _sorted(rep.changes) if c.inputs or c.dependencies or c.options]
            if changed and not inputs:
                out += ["", f"Changed inputs left out (comment size limit): `make diff BASE={base_ref}` shows them."]
            if changed and inputs:
                out += ["", "<details><summary>Changed inputs, dependencies and options</summary>", "", "```"]
                for c in changed:
                    out.append(f"{c.name} ({_short_type(c.type)}):")
                    out += [f"  {p}: {o} -> {n}" for p, o, n in c.inputs]
                    out += [f"  dependency {d}" for d in c.dependencies]
                    out += [f"  option {k}: {o} -> {n}" for k, o, n in c.options]
                out += ["```", "", "</details>"]
        if rep.files and not files:
            out += ["", f"Node files ({len(rep.files)}), diffs left out (comment size limit):", ""]
            out += [f"- {f.status} `{f.path}`" for f in rep.files]
        elif rep.files:
            out += ["", f"Node files ({len(rep.files)}):"]
            for f in rep.files:
                out += ["", f"<details><summary>{f.status} <code>{f.path}</code></summary>", "", "```diff"]
                out += [ln.replace("```", "'''") for ln in f.lines]
                if f.more:
                    out.append(f"... {f.more} more lines")
                out += ["```", "", "</details>"]
    return "\n".join(out) + "\n"


def parser() -> argparse.ArgumentParser:
    p = help.parser(
        "python -m offline.review",
        "Review diff: what a change does to every stack (resources, replacements, node files), offline.",
        "python -m offline.review --base origin/main",
        "python -m offline.review --base origin/main --format markdown --out build/review.md --stack dev",
    )
    p.add_argument("--base", required=True, help="base revision (branch, tag or sha), e.g. origin/main")
    p.add_argument("--format", choices=("text", "markdown"), default="text", help="report format")
    p.add_argument("--out", type=Path, metavar="FILE", help="write the report here (default: stdout)")
    p.add_argument(
        "--stack", action="append", default=[], type=_stack, help="only this stack (repeatable; default: all)"
    )
    p.add_argument("--repo", type=Path, default=REPO, metavar="DIR", help="the checkout to review (default: this one)")
    p.add_argument(
        "--cache-dir",
        type=Path,
        metavar="DIR",
        help="keep renders here by the hash of their inputs (default: render everything)",
    )
    return p


def _stack(text: str) -> str:
    problem = stack_name_problem(text)
    if problem:
        raise argparse.ArgumentTypeError(problem.removeprefix("--stack "))
    return text


_stack.__name__ = "stack"


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)

    def body() -> int:
        # Checked before minutes of rendering: a bad --out or --repo costs nothing.
        repo = inputs.require_dir(args.repo, "--repo").resolve()
        if args.out:
            inputs.check_output_file(args.out, "--out")
        try:
            sha, reports = review(args.base, repo=repo, stacks=args.stack or None, cache=args.cache_dir)
        except (OSError, subprocess.SubprocessError) as err:
            # A reviewer reads one line, not a traceback (a full disk, git missing).
            raise Unreadable(f"review: {type(err).__name__}: {err}") from None
        fmt = format_markdown if args.format == "markdown" else format_text
        text = fmt(sha, args.base, reports)
        if args.out:
            try:
                args.out.parent.mkdir(parents=True, exist_ok=True)
                args.out.write_text(text)
            except OSError as err:
                raise Unreadable(f"review: --out {args.out}: cannot write: {err.strerror or err}") from None
        else:
            sys.stdout.write(text)
        failed = [r.stack for r in reports if r.status == "error"]
        if failed:
            print(
                f"review: stack(s) {', '.join(failed)} do not render at the working tree (see the report)",
                file=sys.stderr,
            )
            return exits.FAILED
        return exits.OK

    return guarded("python -m offline.review", body)


if __name__ == "__main__":
    sys.exit(main())
