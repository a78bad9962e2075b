"""What AWS refuses late (after FSx and the network exist, or at every launch) is refused
by the config model up front: one `path: message` per problem naming what AWS accepts
and the fix. Also the region check, the stack-name default and the warning level."""

from __future__ import annotations

import copy

import pulumi
import pytest

from model import aws_rules
from model.config import parse_config, region_problems
from model.config_warnings import config_warnings
from model.errors import ConfigError
from tests.support.mocks import run_program, stack_config, valid_raw
from tests.support.raw_config import _DEL, _set

R = "gpu-cluster:cluster"
NO_SUBNET = ("network.subnet_id", _DEL)
# A file system linked to S3 takes no FSx backups: the config must say so.
NO_FSX_BACKUPS = [("fsx.backup_retention_days", 0), ("fsx.allow_no_backups", True)]

# (id, [(path, value), ...], expected path, [fragments that must all be in its line])
INVALID = [
    ("tag-key-space", [("tags", {"cost center": "x"})], f"{R}.tags", ["'cost center'", "no spaces", "cost-center"]),
    ("tag-key-slash", [("tags", {"team/name": "x"})], f"{R}.tags", ["'team/name'", "no '/'", "instance metadata"]),
    ("tag-key-non-ascii", [("tags", {"équipe": "x"})], f"{R}.tags", ["'équipe'", "ASCII letters"]),
    ("tag-key-dot", [("tags", {".": "x"})], f"{R}.tags", ["only '.', '..' or '_index'"]),
    ("tag-key-dotdot", [("tags", {"..": "x"})], f"{R}.tags", ["only '.', '..' or '_index'"]),
    ("tag-key-index", [("tags", {"_index": "x"})], f"{R}.tags", ["only '.', '..' or '_index'"]),
    ("tag-key-comma", [("tags", {"a,b": "x"})], f"{R}.tags", ["','", "IAM, S3 and FSx"]),
    ("tag-key-too-long", [("tags", {"k" * 129: "x"})], f"{R}.tags", ["129 characters", "at most 128"]),
    ("tag-key-reserved", [("tags", {"AWS:owner": "x"})], f"{R}.tags", ["reserved 'aws:' prefix"]),
    ("tag-key-node-contract", [("tags", {"GpuClusterRole": "x"})], f"{R}.tags", ["program sets on every node"]),
    ("tag-value-charset", [("tags", {"team": "ml;infra"})], f"{R}.tags", ["';'", "_ . : / = + - @ only"]),
    ("tag-value-too-long", [("tags", {"team": "v" * 257})], f"{R}.tags", ["257 characters", "at most 256"]),
    ("tag-value-reserved", [("tags", {"team": "aws:ml"})], f"{R}.tags", ["value 'aws:ml'", "reserved"]),
    (
        "tags-over-50",
        [("tags", {f"k{i}": "v" for i in range(45)})],
        f"{R}.tags",
        ["45 tags plus the 6", "make 51", "AWS allows 50", "at most 44"],
    ),
    (
        "gp3-throughput-above-iops",
        [("root_volume", {"throughput_mibps": 1000})],
        f"{R}.root_volume.throughput_mibps",
        ["needs at least 4000 IOPS", "0.25 MiB/s per provisioned IOPS", "3000 (the default)", "lower", "to 750"],
    ),
    (
        "gp3-both-set",
        [("root_volume", {"throughput_mibps": 800, "iops": 3100})],
        f"{R}.root_volume.throughput_mibps",
        ["needs at least 3200 IOPS", "root_volume.iops is 3100;", "to 775"],
    ),
    (
        "s3-ip-shaped",
        [("fsx.data_repository", {"s3_uri": "s3://192.168.5.4/data"})],
        f"{R}.fsx.data_repository.s3_uri",
        ["IP address", "S3 refuses"],
    ),
    (
        "s3-double-dot",
        [("fsx.data_repository", {"s3_uri": "s3://my..bucket/data"})],
        f"{R}.fsx.data_repository.s3_uri",
        ["two adjacent periods"],
    ),
    (
        "s3-xn-prefix",
        [("fsx.data_repository", {"s3_uri": "s3://xn--bucket/data"})],
        f"{R}.fsx.data_repository.s3_uri",
        ["starts with 'xn--'"],
    ),
    (
        "s3-alias-suffix",
        [("fsx.data_repository", {"s3_uri": "s3://mydata-s3alias/x"})],
        f"{R}.fsx.data_repository.s3_uri",
        ["ends with '-s3alias'"],
    ),
    (
        "s3-uppercase",
        [("fsx.data_repository", {"s3_uri": "s3://MyBucket/x"})],
        f"{R}.fsx.data_repository.s3_uri",
        ["lowercase letters, digits"],
    ),
    (
        "s3-too-short",
        [("fsx.data_repository", {"s3_uri": "s3://ab"})],
        f"{R}.fsx.data_repository.s3_uri",
        ["2 characters", "3 to 63"],
    ),
    (
        "s3-too-long",
        [("fsx.data_repository", {"s3_uri": "s3://" + "b" * 64})],
        f"{R}.fsx.data_repository.s3_uri",
        ["64 characters", "3 to 63"],
    ),
    (
        "cidr-host-bits",
        [NO_SUBNET, ("network.vpc_cidr", "10.0.0.1/16")],
        f"{R}.network.vpc_cidr",
        ["host bits set", "use the network address '10.0.0.0/16'"],
    ),
    (
        "cidr-host-bits-24",
        [NO_SUBNET, ("network.vpc_cidr", "172.16.5.7/24")],
        f"{R}.network.vpc_cidr",
        ["'172.16.5.0/24'"],
    ),
    (
        "cidr-too-small",
        [NO_SUBNET, ("network.vpc_cidr", "10.0.0.0/28")],
        f"{R}.network.vpc_cidr",
        ["/16 to /28", "use /16 to /24"],
    ),
    (
        "cidr-too-big",
        [NO_SUBNET, ("network.vpc_cidr", "10.0.0.0/12")],
        f"{R}.network.vpc_cidr",
        ["is a /12", "/16 to /28"],
    ),
    (
        "image-docker-style",
        [("validation", {"container_image": "nvcr.io/nvidia/pytorch:26.08-py3"})],
        f"{R}.validation.container_image",
        ["Docker-style", "Docker Hub", "write 'nvcr.io#nvidia/pytorch:26.08-py3'"],
    ),
    (
        "image-docker-style-port",
        [("validation", {"container_image": "localhost:5000/team/img@sha256:" + "a" * 64})],
        f"{R}.validation.container_image",
        ["write 'localhost:5000#team/img@sha256:"],
    ),
    (
        "image-docker-style-user",
        [("validation", {"container_image": "bob@registry.example.com/ml/train:1"})],
        f"{R}.validation.container_image",
        ["write 'bob@registry.example.com#ml/train:1'"],
    ),
    (
        "image-spaces",
        [("validation", {"container_image": "my image"})],
        f"{R}.validation.container_image",
        ["not an Enroot image reference", "[USER@][REGISTRY#]IMAGE[:TAG|@DIGEST]"],
    ),
    (
        "image-uppercase-repo",
        [("validation", {"container_image": "nvcr.io#NVIDIA/PyTorch:26.08-py3"})],
        f"{R}.validation.container_image",
        ["not an Enroot image reference", "lowercase"],
    ),
    (
        "image-bad-tag",
        [("validation", {"container_image": "nvcr.io#nvidia/pytorch:"})],
        f"{R}.validation.container_image",
        ["not an Enroot image reference"],
    ),
    (
        "image-not-sqsh",
        [("validation", {"container_image": "/fsx/images/pytorch.tar"})],
        f"{R}.validation.container_image",
        ["ending in .sqsh"],
    ),
    (
        "fsx-throughput-null",
        [("fsx", {"per_unit_storage_throughput": None})],
        f"{R}.fsx.per_unit_storage_throughput",
        ["required for PERSISTENT_2 (null given)", "125, 250, 500, 1000"],
    ),
    (
        "fsx-default-throughput-wrong-for-type",
        [("fsx", {"deployment_type": "PERSISTENT_1"})],
        f"{R}.fsx.deployment_type",
        ["PERSISTENT_1 does not take the default per_unit_storage_throughput of 250", "50, 100, 200"],
    ),
    (
        "az-of-no-region",
        [("network.availability_zone", "xx-east-1a"), ("capacity.capacity_blocks.0.availability_zone", "xx-east-1a")],
        f"{R}.network.availability_zone",
        ["'xx-east-1a' is not a zone of any AWS region", "'xx-east-1' is not a region code"],
    ),
]


@pytest.mark.parametrize("mutations,path,fragments", [c[1:] for c in INVALID], ids=[c[0] for c in INVALID])
def test_aws_refusals_are_config_errors(mutations, path, fragments):
    raw = valid_raw()
    for p, v in mutations:
        _set(raw, p, v)
    with pytest.raises(ConfigError) as exc:
        parse_config(raw)
    lines = str(exc.value).splitlines()
    hits = [line for line in lines if line.startswith(f"{path}: ")]
    assert hits, f"no line for {path}; got {lines}"
    assert any(all(f in line for f in fragments) for line in hits), hits
    assert not any("None" in line for line in lines), lines


ACCEPTED = [
    ("tag-key-imds-charset", [("tags", {"team:ml-infra.a+b=c@d_e": "x y/z:1=2+3-4@5_6.7"})]),
    ("tag-value-unicode-letters", [("tags", {"owner": "Zoë Ñúñez"})]),
    ("tags-44", [("tags", {f"k{i}": "v" for i in range(44)})]),
    ("tags-aws-values-case", [("tags", {"team": "awsome"})]),
    ("gp3-at-ratio", [("root_volume", {"throughput_mibps": 1000, "iops": 4000})]),
    ("s3-dots", [("fsx.data_repository", {"s3_uri": "s3://my.data-bucket.1/x/y"}), *NO_FSX_BACKUPS]),
    ("s3-no-prefix", [("fsx.data_repository", {"s3_uri": "s3://abc"}), *NO_FSX_BACKUPS]),
    ("cidr-24", [NO_SUBNET, ("network.vpc_cidr", "192.168.10.0/24")]),
    ("image-enroot-registry", [("validation", {"container_image": "nvcr.io#nvidia/pytorch:26.08-py3"})]),
    ("image-docker-hub", [("validation", {"container_image": "pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime"})]),
    ("image-library", [("validation", {"container_image": "ubuntu"})]),
    ("image-user-registry-port", [("validation", {"container_image": "bob@registry.example.com:5000#ml/train:v1"})]),
    ("image-digest", [("validation", {"container_image": "nvcr.io#nvidia/pytorch@sha256:" + "0" * 64})]),
    ("image-docker-scheme", [("validation", {"container_image": "docker://nvcr.io#nvidia/pytorch:26.08-py3"})]),
    ("image-sqsh", [("validation", {"container_image": "/fsx/images/nvcr.io+nvidia+pytorch+26.08-py3.sqsh"})]),
    ("image-empty-skips", [("validation", {"container_image": ""})]),
    ("fsx-scratch-no-throughput", [("fsx", {"deployment_type": "SCRATCH_2"})]),
]


@pytest.mark.parametrize("mutations", [c[1] for c in ACCEPTED], ids=[c[0] for c in ACCEPTED])
def test_what_aws_accepts_is_accepted(mutations):
    raw = valid_raw()
    for p, v in mutations:
        _set(raw, p, v)
    parse_config(raw)


def test_every_tag_problem_is_reported_at_once():
    raw = valid_raw()
    raw["tags"] = {"a b": "1", "c/d": "2", "ok": "bad;value"}
    with pytest.raises(ConfigError) as exc:
        parse_config(raw)
    assert [p for p, _ in exc.value.problems] == [f"{R}.tags"] * 3


def test_the_tag_count_counts_the_program_tags_a_resource_gets():
    """The instances carry the most: Name and the node identity tags (infra/nodes.py)."""
    from infra.nodes import instance_tags
    from model.cluster_tags import PROGRAM_TAG_KEYS

    cfg = parse_config(valid_raw())
    groups = cfg.node_groups()
    most = max(len(instance_tags(cfg.name, g, cfg.capacity.nodes, {})) for g in groups)
    assert most == len(PROGRAM_TAG_KEYS) == 6
    assert set(instance_tags(cfg.name, groups[0], 2, {})) == set(PROGRAM_TAG_KEYS)


def test_derived_bucket_names_are_names_s3_accepts():
    """The payload bucket is `gpu-cluster-<cluster>-` plus a 26-character unique suffix
    (infra/payload.py; bucket_prefix takes at most 37 characters)."""
    for name in ("ab", "dev", "a" * 24, "x1-2-3", "prod-2026"):
        cfg = parse_config({**valid_raw(), "name": name})
        prefix = f"gpu-cluster-{cfg.name}-"
        assert len(prefix) <= 37
        assert aws_rules.s3_bucket_problem(prefix + "20261201113000000000000001") is None


# ------------------------------------------------------------------ region


def test_unknown_region_is_refused():
    with pytest.raises(ConfigError) as exc:
        parse_config(valid_raw(), region="us-east-9")
    ((path, message),) = exc.value.problems
    assert path == "aws:region"
    assert "'us-east-9' is not an AWS region code" in message and "us-east-2" in message


def test_az_outside_the_region_names_both_fixes():
    raw = valid_raw()
    with pytest.raises(ConfigError) as exc:
        parse_config(raw, region="us-east-1")
    assert exc.value.problems == [
        (
            f"{R}.network.availability_zone",
            "us-east-2b is a zone of us-east-2, but aws:region is us-east-1; use a zone of us-east-1 "
            "(e.g. us-east-1a) or set aws:region to us-east-2",
        )
    ]


def test_block_az_in_another_region_is_named_too():
    raw = valid_raw()
    raw["capacity"]["capacity_blocks"][0]["availability_zone"] = "eu-west-1a"
    with pytest.raises(ConfigError) as exc:
        parse_config(raw, region="us-east-2")
    lines = [f"{p}: {m}" for p, m in exc.value.problems]
    block = f"{R}.capacity.capacity_blocks[0].availability_zone"
    assert any(line.startswith(f"{block}: block is in eu-west-1a") for line in lines)
    assert (
        f"{block}: eu-west-1a is a zone of eu-west-1, but aws:region is us-east-2; use a zone of us-east-2 (e.g. us-east-2a) or set aws:region to eu-west-1"
        in lines
    )


def test_region_problems_is_callable_on_a_parsed_config():
    cfg = parse_config(valid_raw())
    assert region_problems(cfg, "us-east-2") == []
    assert [p for p, _ in region_problems(cfg, "eu-west-1")] == [f"{R}.network.availability_zone"]
    assert region_problems(cfg, "mars-1") == [("aws:region", aws_rules.region_problem("mars-1"))]


def test_region_is_checked_with_shape_errors_too():
    raw = valid_raw()
    raw["colour"] = "red"
    with pytest.raises(ConfigError) as exc:
        parse_config(raw, region="moon-1")
    assert [p for p, _ in exc.value.problems] == [f"{R}.colour", "aws:region"]


def test_program_refuses_an_az_outside_aws_region_before_any_resource():
    raw, _ = stack_config("dev")
    with pytest.raises(pulumi.RunError) as exc:
        run_program(raw, region="us-west-2")
    assert str(exc.value) == (
        f"{R}.network.availability_zone: us-east-2b is a zone of us-east-2, but aws:region is us-west-2; "
        "use a zone of us-west-2 (e.g. us-west-2a) or set aws:region to us-east-2"
    )


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_shipped_stacks_pass_the_region_check(stack):
    raw, region = stack_config(stack)
    parse_config(raw, stack=stack, region=region)


# ------------------------------------------------------------------ the stack name default


def test_name_defaults_to_the_stack_name():
    raw = valid_raw()
    del raw["name"]
    cfg = parse_config(raw, stack="staging")
    assert (cfg.name, cfg.stack, cfg.aws_name_base) == ("staging", "staging", "staging")


def test_name_without_a_stack_is_still_required():
    raw = valid_raw()
    del raw["name"]
    with pytest.raises(ConfigError) as exc:
        parse_config(raw)
    assert exc.value.problems == [(f"{R}.name", "required; add it to the stack file")]


def test_a_stack_name_that_is_no_cluster_name_says_where_the_name_came_from():
    raw = valid_raw()
    del raw["name"]
    with pytest.raises(ConfigError) as exc:
        parse_config(raw, stack="Staging_EU")
    ((path, message),) = exc.value.problems
    assert path == f"{R}.name"
    assert message.startswith(
        "not set, so it defaults to the stack name 'Staging_EU', which is not a valid cluster name"
    )
    assert "add name: to the stack file" in message


def test_explicit_name_is_kept_and_aws_names_follow_the_stack():
    cfg = parse_config(valid_raw(), stack="staging")
    assert (cfg.name, cfg.aws_name_base, cfg.aws_name_prefix) == ("t1", "staging", "gpu-cluster-staging")
    assert parse_config(valid_raw()).aws_name_base == "t1"  # no stack: the cluster name


# ------------------------------------------------------------------ warnings


def _warnings(raw, stack=None):
    return config_warnings(parse_config(raw, stack=stack))


def test_fewer_nodes_than_block_slots_warns():
    raw = valid_raw()
    raw["capacity"]["capacity_blocks"][0]["instance_count"] = 4
    assert _warnings(raw, stack="t1") == [
        (
            f"{R}.capacity.nodes",
            "2 nodes use 2 of the 4 instances the Capacity Blocks hold: 2 paid slot(s) stay idle; "
            "raise capacity.nodes to 4 to use them",
        )
    ]


def test_a_copied_stack_file_warns_about_the_shared_cluster_name():
    raw, _ = stack_config("dev")
    ((path, message),) = _warnings(raw, stack="staging")
    assert path == f"{R}.name"
    assert "named 'dev' but the stack is 'staging'" in message and "remove name" in message


def test_other_warnings():
    raw = valid_raw()
    del raw["network"]["subnet_id"]
    raw["network"]["vpc_cidr"] = "8.8.0.0/16"
    raw["tags"] = {"Name": "mine"}
    raw["fsx"] = {"protect": False}
    raw["image"] = {"allow_unpinned": True}
    assert [p for p, _ in _warnings(raw, stack="t1")] == [
        f"{R}.network.vpc_cidr",
        f"{R}.tags",
        f"{R}.fsx.protect",
        f"{R}.image.allow_unpinned",
    ]


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_shipped_stacks_have_no_warnings(stack):
    raw, region = stack_config(stack)
    assert config_warnings(parse_config(copy.deepcopy(raw), stack=stack, region=region)) == []


def test_the_program_prints_the_warnings():
    from offline.mocks import plan_mocks

    raw, region = stack_config("dev")
    raw["capacity"]["capacity_blocks"][0]["instance_count"] = 3
    mocks = plan_mocks(raw, region)
    run_program(raw, region, mocks=mocks)
    # what the program logged through pulumi.log.warn (the engine's log)
    assert (
        "warning",
        f"{R}.capacity.nodes: 2 nodes use 2 of the 3 instances the Capacity Blocks hold: 1 paid slot(s) "
        "stay idle; raise capacity.nodes to 3 to use them",
    ) in mocks.log


# ------------------------------------------------------------------ messages that do not mislead

MESSAGES = [
    (
        "block-end-as-number",
        [("capacity.capacity_blocks.0.end", 0)],
        f"{R}.capacity.capacity_blocks[0].end",
        "0 is a number, not a time; write it as ISO-8601 with a zone in quotes, e.g. '2026-12-08T11:30:00Z'",
    ),
    (
        "block-az-empty",
        [("capacity.capacity_blocks.0.availability_zone", "")],
        f"{R}.capacity.capacity_blocks[0].availability_zone",
        "'' is not an availability zone name; copy the block's zone from EC2, e.g. 'us-east-2b'",
    ),
    (
        "section-not-an-object",
        [("fsx", 5)],
        f"{R}.fsx",
        "must be an object (a mapping of keys, see docs/config-reference.md) (got 5)",
    ),
    (
        "list-not-a-list",
        [("capacity.capacity_blocks", "a")],
        f"{R}.capacity.capacity_blocks",
        'must be a list (got "a")',
    ),
    (
        "bool-not-a-bool",
        [("validation", {"enabled": "maybe"})],
        f"{R}.validation.enabled",
        'must be true or false (got "maybe")',
    ),
    ("int-not-an-int", [("capacity.nodes", "four")], f"{R}.capacity.nodes", 'must be a whole number (got "four")'),
    ("literal-null", [("fsx", {"deployment_type": None})], f"{R}.fsx.deployment_type", "(got null)"),
    (
        "margin-nan",
        [("validation", {"baseline_margin": float("nan")})],
        f"{R}.validation.baseline_margin",
        "must be a finite number (got NaN)",
    ),
    ("range-shows-value", [("capacity.nodes", 1)], f"{R}.capacity.nodes", "greater than or equal to 2 (got 1)"),
]


@pytest.mark.parametrize("mutations,path,message", [c[1:] for c in MESSAGES], ids=[c[0] for c in MESSAGES])
def test_messages_name_the_value_given(mutations, path, message):
    raw = valid_raw()
    for p, v in mutations:
        _set(raw, p, v)
    with pytest.raises(ConfigError) as exc:
        parse_config(raw)
    lines = str(exc.value).splitlines()
    assert any(line.startswith(f"{path}: ") and message in line for line in lines), lines
    assert not any("instance of" in line or "Input should be a valid dictionary" in line for line in lines), lines


def test_random_mutations_only_ever_raise_config_errors():
    """Whatever a stack file holds, parsing ends in a ConfigError (never a traceback)."""
    import random

    values = [None, 0, -1, 1.5, "", " ", "x", [], {}, [1], {"a": 1}, True, "é", 10**12, float("nan"), "10.0.0.1/8"]
    rng = random.Random(11)
    bases = [valid_raw(), stack_config("prod")[0], stack_config("dev")[0]]

    def paths(node, pre=()):
        yield pre
        items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
        for k, v in items:
            yield from paths(v, (*pre, k))

    for _ in range(400):
        raw = copy.deepcopy(rng.choice(bases))
        for _ in range(rng.randint(1, 3)):
            path = rng.choice(list(paths(raw))[1:])
            node = raw
            for k in path[:-1]:
                node = node[k]
            node[path[-1]] = copy.deepcopy(rng.choice(values))
        try:
            cfg = parse_config(
                raw, stack=rng.choice([None, "dev", "Bad_Stack"]), region=rng.choice([None, "us-east-2", "xx-1"])
            )
        except ConfigError as err:
            assert err.problems and all(p and m for p, m in err.problems)
        else:
            config_warnings(cfg)
