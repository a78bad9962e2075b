"""Stack config validation: every invalid config names the exact path to fix."""

from __future__ import annotations

import copy

import pytest

from model.config import parse_config
from model.errors import ConfigError
from tests.support.mocks import stack_config, valid_raw
from tests.support.raw_config import _DEL, _set

R = "gpu-cluster:cluster"


def _blocks(*specs):
    return [{"name": n, "reservation_id": cr, "instance_count": c, "availability_zone": az} for n, cr, c, az in specs]


# (id, [(path, value), ...], expected path in the message, fragment of the message)
INVALID = [
    ("unsupported-type", [("instance_type", "p3.16xlarge")], f"{R}.instance_type", "p5.48xlarge"),
    ("name-uppercase", [("name", "Prod")], f"{R}.name", "lowercase"),
    ("name-too-long", [("name", "a" * 30)], f"{R}.name", "2-24"),
    ("name-missing", [("name", _DEL)], f"{R}.name", "required"),
    ("unknown-key", [("colour", "red")], f"{R}.colour", "unknown key"),
    ("nested-unknown-key", [("fsx.size", 1)], f"{R}.fsx.size", "unknown key"),
    ("bad-az", [("network.availability_zone", "ohio")], f"{R}.network.availability_zone", "availability zone"),
    ("bad-subnet-id", [("network.subnet_id", "sn-1")], f"{R}.network.subnet_id", "subnet id"),
    ("vpc-cidr-with-subnet", [("network.vpc_cidr", "10.1.0.0/16")], f"{R}.network.vpc_cidr", "only used"),
    ("bad-cidr", [("network.subnet_id", _DEL), ("network.vpc_cidr", "10.0.0.0/8")], f"{R}.network.vpc_cidr", "/16"),
    ("too-few-nodes", [("capacity.nodes", 1)], f"{R}.capacity.nodes", "greater than or equal to 2"),
    ("nodes-above-blocks", [("capacity.nodes", 3)], f"{R}.capacity.nodes", "hold 2"),
    (
        "block-too-big",
        [("capacity.capacity_blocks.0.instance_count", 65)],
        f"{R}.capacity.capacity_blocks[0].instance_count",
        "at most 64",
    ),
    (
        "block-zero",
        [("capacity.capacity_blocks.0.instance_count", 0)],
        f"{R}.capacity.capacity_blocks[0].instance_count",
        "greater than 0",
    ),
    (
        "block-other-az",
        [("capacity.capacity_blocks.0.availability_zone", "us-east-2a")],
        f"{R}.capacity.capacity_blocks[0].availability_zone",
        "share one subnet",
    ),
    (
        "bad-reservation",
        [("capacity.capacity_blocks.0.reservation_id", "cb-1")],
        f"{R}.capacity.capacity_blocks[0].reservation_id",
        "cr-",
    ),
    (
        "bad-block-name",
        [("capacity.capacity_blocks.0.name", "1st block")],
        f"{R}.capacity.capacity_blocks[0].name",
        "block name",
    ),
    (
        "duplicate-block-name",
        [
            ("capacity.nodes", 4),
            (
                "capacity.capacity_blocks",
                _blocks(("a", "cr-0123456789abcdef0", 2, "us-east-2b"), ("a", "cr-0123456789abcdef1", 2, "us-east-2b")),
            ),
        ],
        f"{R}.capacity.capacity_blocks[1].name",
        "duplicate",
    ),
    (
        "duplicate-reservation",
        [
            ("capacity.nodes", 4),
            (
                "capacity.capacity_blocks",
                _blocks(("a", "cr-0123456789abcdef0", 2, "us-east-2b"), ("b", "cr-0123456789abcdef0", 2, "us-east-2b")),
            ),
        ],
        f"{R}.capacity.capacity_blocks[1].reservation_id",
        "twice",
    ),
    (
        "empty-second-block",
        [
            (
                "capacity.capacity_blocks",
                _blocks(("a", "cr-0123456789abcdef0", 2, "us-east-2b"), ("b", "cr-0123456789abcdef1", 2, "us-east-2b")),
            )
        ],
        f"{R}.capacity.capacity_blocks[1]",
        "no nodes",
    ),
    ("placement-with-blocks", [("capacity.placement_group", True)], f"{R}.capacity.placement_group", "co-located"),
    ("fsx-capacity-increment", [("fsx.storage_capacity_gib", 3000)], f"{R}.fsx.storage_capacity_gib", "2400"),
    ("fsx-capacity-small", [("fsx.storage_capacity_gib", 600)], f"{R}.fsx.storage_capacity_gib", "1200"),
    (
        "fsx-scratch1-increment",
        [
            ("fsx.deployment_type", "SCRATCH_1"),
            ("fsx.per_unit_storage_throughput", None),
            ("fsx.storage_capacity_gib", 4800),
        ],
        f"{R}.fsx.storage_capacity_gib",
        "3600",
    ),
    ("fsx-throughput-p2", [("fsx.per_unit_storage_throughput", 200)], f"{R}.fsx.per_unit_storage_throughput", "125"),
    (
        "fsx-throughput-p1",
        [("fsx.deployment_type", "PERSISTENT_1"), ("fsx.per_unit_storage_throughput", 250)],
        f"{R}.fsx.per_unit_storage_throughput",
        "50",
    ),
    (
        "fsx-throughput-scratch",
        [("fsx.deployment_type", "SCRATCH_2"), ("fsx.per_unit_storage_throughput", 125)],
        f"{R}.fsx.per_unit_storage_throughput",
        "no per-unit",
    ),
    ("fsx-bad-type", [("fsx.deployment_type", "PERSISTENT_3")], f"{R}.fsx.deployment_type", "PERSISTENT_3"),
    (
        "fsx-bad-s3",
        [("fsx.data_repository", {"s3_uri": "https://bucket"})],
        f"{R}.fsx.data_repository.s3_uri",
        "S3 URI",
    ),
    (
        "fsx-repo-path",
        [("fsx.data_repository", {"s3_uri": "s3://bucket/x", "file_system_path": "/"})],
        f"{R}.fsx.data_repository.file_system_path",
        "absolute path",
    ),
    (
        "pinned-and-unpinned",
        [("image", {"ami_id": "ami-0123456789abcdef0", "allow_unpinned": True})],
        f"{R}.image.allow_unpinned",
        "pins the image already",
    ),
    (
        "ubuntu-2204",
        [
            (
                "image",
                {
                    "ssm_parameter": "/aws/service/deeplearning/ami/x86_64/"
                    "base-oss-nvidia-driver-gpu-ubuntu-22.04/latest/ami-id"
                },
            )
        ],
        f"{R}.image.ssm_parameter",
        "Slurm 21.08 has no dynamic nodes",
    ),
    (
        "block-start-no-zone",
        [("capacity.capacity_blocks.0.start", "2026-12-01T11:30:00")],
        f"{R}.capacity.capacity_blocks[0].start",
        "no time zone",
    ),
    (
        "block-start-not-a-date",
        [("capacity.capacity_blocks.0.start", "next monday")],
        f"{R}.capacity.capacity_blocks[0].start",
        "datetime",
    ),
    (
        "block-end-not-1130",
        [("capacity.capacity_blocks.0.end", "2026-12-08T12:00:00Z")],
        f"{R}.capacity.capacity_blocks[0].end",
        "blocks end at 11:30 UTC",
    ),
    (
        "block-end-other-zone",
        [("capacity.capacity_blocks.0.end", "2026-12-08T11:30:00+01:00")],
        f"{R}.capacity.capacity_blocks[0].end",
        "2026-12-08T10:30:00Z is not a Capacity Block end",
    ),
    (
        "block-end-before-start",
        [("capacity.capacity_blocks.0.start", "2026-12-09T11:30:00Z")],
        f"{R}.capacity.capacity_blocks[0].end",
        "not after start 2026-12-09T11:30:00Z",
    ),
    (
        "block-start-only",
        [("capacity.capacity_blocks.0.end", _DEL)],
        f"{R}.capacity.capacity_blocks[0].end",
        "required with start",
    ),
    (
        "block-shorter-than-margin",
        [("capacity.capacity_blocks.0.start", "2026-12-08T11:00:00Z")],
        f"{R}.capacity.capacity_blocks[0].end",
        "not longer than capacity.block_end_margin_minutes (40)",
    ),
    (
        "margin-below-ec2-lead",
        [("capacity.block_end_margin_minutes", 29)],
        f"{R}.capacity.block_end_margin_minutes",
        "use at least 31",
    ),
    (
        # AWS: scale in *more than* 30 minutes before the end [ASG-CB]; 30 meets EC2's
        # own terminations.
        "margin-equal-to-ec2-lead",
        [("capacity.block_end_margin_minutes", 30)],
        f"{R}.capacity.block_end_margin_minutes",
        "AWS asks to scale a Capacity Block's group to zero more than 30 minutes before the end; use at least 31",
    ),
    (
        "margin-on-demand",
        [("capacity", {"nodes": 2, "block_end_margin_minutes": 45})],
        f"{R}.capacity.block_end_margin_minutes",
        "only used with Capacity Blocks",
    ),
    (
        "backups-off-silently",
        [("fsx.backup_retention_days", 0)],
        f"{R}.fsx.backup_retention_days",
        "fsx.allow_no_backups: true",
    ),
    (
        "backups-too-long",
        [("fsx.backup_retention_days", 91)],
        f"{R}.fsx.backup_retention_days",
        "less than or equal to 90",
    ),
    (
        "backups-on-scratch",
        [
            ("fsx.deployment_type", "SCRATCH_2"),
            ("fsx.per_unit_storage_throughput", None),
            ("fsx.backup_retention_days", 3),
        ],
        f"{R}.fsx.backup_retention_days",
        "PERSISTENT types only",
    ),
    (
        "no-backups-opt-out-unused",
        [("fsx.allow_no_backups", True)],
        f"{R}.fsx.allow_no_backups",
        "backups are on (7 days)",
    ),
    ("pin-unknown-key", [("fsx.pinned", {"cluster_name": "t1"})], f"{R}.fsx.pinned.deployment_type", "required"),
    ("bad-ami", [("image", {"ami_id": "ubuntu"})], f"{R}.image.ami_id", "AMI id"),
    ("root-too-small", [("root_volume", {"size_gib": 50})], f"{R}.root_volume.size_gib", "100"),
    ("partition-default", [("slurm", {"partition": "default"})], f"{R}.slurm.partition", "DEFAULT"),
    ("partition-space", [("slurm", {"partition": "my part"})], f"{R}.slurm.partition", "partition name"),
    ("reserved-tag", [("tags", {"aws:owner": "x"})], f"{R}.tags", "reserved"),
    ("validation-margin", [("validation", {"baseline_margin": 1.5})], f"{R}.validation.baseline_margin", "less than 1"),
]


@pytest.mark.parametrize("mutations,path,fragment", [c[1:] for c in INVALID], ids=[c[0] for c in INVALID])
def test_invalid_config_names_the_path(mutations, path, fragment):
    raw = valid_raw()
    for p, v in mutations:
        _set(raw, p, v)
    with pytest.raises(ConfigError) as exc:
        parse_config(raw)
    lines = str(exc.value).splitlines()
    hits = [line for line in lines if line.startswith(f"{path}: ")]
    assert hits, f"no line for {path}; got {lines}"
    assert any(fragment in line for line in hits), hits


def test_table_is_large_enough():
    assert len(INVALID) >= 20


def test_all_problems_reported_at_once():
    raw = valid_raw()
    raw["capacity"]["nodes"] = 9
    raw["fsx"] = {"storage_capacity_gib": 1300, "per_unit_storage_throughput": 300}
    with pytest.raises(ConfigError) as exc:
        parse_config(raw)
    paths = [p for p, _ in exc.value.problems]
    assert paths == [f"{R}.capacity.nodes", f"{R}.fsx.storage_capacity_gib", f"{R}.fsx.per_unit_storage_throughput"]


def test_not_an_object():
    with pytest.raises(ConfigError) as exc:
        parse_config(None)
    assert str(exc.value).startswith(f"{R}: missing")


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_stack_files_parse(stack):
    raw, _ = stack_config(stack)
    cfg = parse_config(copy.deepcopy(raw))
    assert cfg.name == stack
    groups = [(g.name, g.role, g.size) for g in cfg.node_groups()]
    if stack == "dev":
        assert cfg.instance_type == "p5.48xlarge" and cfg.network.subnet_id
        assert groups == [("controller", "controller", 1), ("block-a", "worker", 1)]
    else:
        assert cfg.instance_type == "p5en.48xlarge" and cfg.network.subnet_id is None
        assert groups == [("controller", "controller", 1), ("block-a", "worker", 7), ("block-b", "worker", 8)]
        assert cfg.fsx.data_repository is not None


def test_first_block_holding_only_the_controller_is_used():
    raw = valid_raw()
    raw["capacity"] = {
        "nodes": 3,
        "capacity_blocks": _blocks(
            ("a", "cr-0123456789abcdef0", 1, "us-east-2b"), ("b", "cr-0123456789abcdef1", 2, "us-east-2b")
        ),
    }
    raw["controller"] = {"block": "a"}
    cfg = parse_config(raw)
    assert [(g.name, g.size) for g in cfg.node_groups()] == [("controller", 1), ("block-a", 0), ("block-b", 2)]


def test_shape_errors_do_not_hide_meaning_errors_elsewhere():
    raw = valid_raw()
    raw["fsx"] = {"sise": 1}  # shape error in fsx
    raw["capacity"]["nodes"] = 9  # meaning error in capacity
    raw["image"] = {"ami_id": "ami-0123456789abcdef0", "allow_unpinned": True}  # meaning error in image
    with pytest.raises(ConfigError) as exc:
        parse_config(raw)
    assert [p for p, _ in exc.value.problems] == [f"{R}.fsx.sise", f"{R}.capacity.nodes", f"{R}.image.allow_unpinned"]


def test_bad_network_does_not_invent_block_az_errors():
    raw = valid_raw()
    raw["network"]["availability_zone"] = "nowhere"
    raw["capacity"]["nodes"] = 3
    with pytest.raises(ConfigError) as exc:
        parse_config(raw)
    assert [p for p, _ in exc.value.problems] == [f"{R}.network.availability_zone", f"{R}.capacity.nodes"]


def test_block_dates_are_utc_and_optional_for_parsing():
    raw = valid_raw()
    raw["capacity"]["capacity_blocks"][0]["start"] = "2026-12-01T12:30:00+01:00"
    block = parse_config(raw).capacity.capacity_blocks[0]
    assert (
        block.start.isoformat() == "2026-12-01T11:30:00+00:00" and block.end.isoformat() == "2026-12-08T11:30:00+00:00"
    )
    # The renderer and the local cluster parse configs without dates; deploying needs them
    # (model/deploy.py, tests/infra/test_lifecycle.py).
    for key in ("start", "end"):
        del raw["capacity"]["capacity_blocks"][0][key]
    assert parse_config(raw).capacity.capacity_blocks[0].start is None


def test_data_safety_defaults():
    cfg = parse_config(valid_raw())
    assert cfg.fsx.protected is True and cfg.fsx.backup_retention_days == 7 and cfg.fsx.allow_replace is False
    assert cfg.capacity.block_end_margin_minutes == 40
    raw = valid_raw()
    raw["fsx"] = {"deployment_type": "SCRATCH_2", "per_unit_storage_throughput": None}
    assert parse_config(raw).fsx.protected is False  # scratch: no protect unless asked
    raw["fsx"]["protect"] = True
    assert parse_config(raw).fsx.protected is True
    raw = valid_raw()
    raw["fsx"] = {"backup_retention_days": 0, "allow_no_backups": True, "protect": False}
    cfg = parse_config(raw)
    assert (cfg.fsx.backup_retention_days, cfg.fsx.protected) == (0, False)


# A file system linked to S3 takes no FSx backups [FSX-CREATEBACKUP]: the bucket is the
# durable copy, so a retention (the default 7 included) is refused up front rather than
# failing at AWS after the file system exists.
_LINK = {"s3_uri": "s3://my-training-data/datasets"}
_LINKED_FIX = (
    "FSx backs up no file system linked to S3 (fsx.data_repository is set), so AWS would fail its backups, "
    "or the create or delete that asks for them; the bucket is the durable copy: set backup_retention_days: 0 and allow_no_backups: true, "
    "or remove data_repository to keep FSx backups"
)


@pytest.mark.parametrize(
    "fsx,message",
    [
        ({"data_repository": _LINK}, f"{R}.fsx.backup_retention_days: 7 days (the default) asks for backups, but "),
        (
            {
                "deployment_type": "PERSISTENT_1",
                "per_unit_storage_throughput": 200,
                "data_repository": _LINK,
                "backup_retention_days": 14,
            },
            f"{R}.fsx.backup_retention_days: 14 days asks for backups, but ",
        ),
        (
            {"data_repository": _LINK, "backup_retention_days": 3, "allow_no_backups": True},
            f"{R}.fsx.backup_retention_days: 3 days asks for backups, but ",
        ),
    ],
    ids=["default-retention", "persistent1", "with-opt-out"],
)
def test_linked_file_system_refuses_backups(fsx, message):
    raw = valid_raw()
    raw["fsx"] = fsx
    with pytest.raises(ConfigError) as exc:
        parse_config(raw)
    assert str(exc.value).splitlines() == [message + _LINKED_FIX]


def test_linked_file_system_needs_the_opt_out():
    raw = valid_raw()
    raw["fsx"] = {"data_repository": _LINK, "backup_retention_days": 0}
    with pytest.raises(ConfigError) as exc:
        parse_config(raw)
    assert str(exc.value).splitlines() == [
        f"{R}.fsx.backup_retention_days: 0 is right for a file system linked to S3 (FSx backs those up not at all; "
        "the bucket is the durable copy): add fsx.allow_no_backups: true to accept that"
    ]
    raw["fsx"]["allow_no_backups"] = True
    cfg = parse_config(raw)
    assert cfg.fsx.backed_up is False and cfg.fsx.protected is True
    assert parse_config(valid_raw()).fsx.backed_up is True


def test_program_data_repository_tag_is_refused():
    raw = valid_raw()
    raw["tags"] = {"GpuClusterDataRepository": "s3://x"}
    with pytest.raises(ConfigError) as exc:
        parse_config(raw)
    assert str(exc.value).splitlines() == [
        f"{R}.tags: tag key 'GpuClusterDataRepository' is one the program sets on a file system linked to S3 "
        "(the policy pack exempts that file system from the final-backup check by it); rename yours"
    ]


def test_config_error_prints_one_line_per_problem():
    # A value echoed in a message or a key in a path (a newline, a NUL) must not split a
    # problem over two lines or reach the terminal raw, whoever prints the error.
    raw = valid_raw()
    raw["tags"] = {"team": "a\nb"}
    raw["zz\x00\nkey"] = 1
    with pytest.raises(ConfigError) as exc:
        parse_config(raw)
    lines = str(exc.value).split("\n")
    assert len(lines) == len(exc.value.problems) == 2
    assert (
        lines[0] == f"{R}.zz\\x00\\nkey: unknown key; remove it or check its spelling against docs/config-reference.md"
    )
    assert lines[1].startswith(f"{R}.tags: tag 'team' value 'a\\nb' has '\\n';")
    assert exc.value.problems[1][1].startswith("tag 'team' value 'a\nb'")
