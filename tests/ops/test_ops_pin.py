"""`python3 -m ops pin` and the deploy rules in `ops preflight`, against stubbed AWS."""

from __future__ import annotations

import json
import shutil
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml

from model.config import parse_config
from model.fsx import FsxIdentity
from model.fsx_identity import fsx_identity
from model.image import DLAMI_SSM_PARAMETER
from ops.cli import main
from ops.fsx import LIVE_FIELDS
from stackfile.edit import scalar, set_key
from tests.support.ops_stubs import NOW, Aws, FakeClock, context
from tests.support.pin_stubs import DLAMI_NAME, FS, NEW_AMI, SUBNET, file_system, stub_fsx, stub_image
from tests.support.preflight_account import AMI, CR, IMAGE, STACK, block, stub_account, write_stack

REPO = Path(__file__).resolve().parents[2]
P = "gpu-cluster:cluster"
LUSTRE_CHECK = '  uname -r; apt-cache policy "lustre-client-modules-$(uname -r)"'


def run(aws: Aws, root: Path, *args: str, now: datetime = NOW) -> tuple[int, list[str], str]:
    ctx = context(aws, clock=FakeClock(now))
    rc = main([*args, "--stack", "dev", "--stack-dir", str(root)], ctx=ctx, session_for=aws.session)
    aws.done()
    return rc, ctx.out.getvalue().splitlines(), ctx.err.getvalue()


def dev_stack(tmp_path: Path) -> Path:
    """A copy of the repository's dev stack file, comments and all."""
    shutil.copy(REPO / "Pulumi.dev.yaml", tmp_path / "Pulumi.dev.yaml")
    return tmp_path


PINNED_YAML = [
    "pinned:",
    "  cluster_name: dev",
    "  deployment_type: PERSISTENT_2",
    "  storage_type: SSD",
    '  file_system_type_version: "2.15"',
    f"  subnet: {SUBNET}",
    "  storage_capacity_gib: 1200",
    "  copy_tags_to_backups: true",
]


# --- pin --image ---------------------------------------------------------------------


def test_image_prints_the_ami_id_line_and_the_lustre_check(tmp_path):
    aws = Aws()
    stub_image(aws)
    rc, lines, _ = run(aws, dev_stack(tmp_path), "pin", "--image")
    assert rc == 0
    assert lines == [
        f"image {NEW_AMI} from {DLAMI_SSM_PARAMETER} (us-east-2)",
        f"  name:         {DLAMI_NAME}",
        "  created:      2026-11-27T09:41:12.000Z",
        "  architecture: x86_64",
        f"image.ami_id pins ami-0a1b2c3d4e5f60718 today; pinning {NEW_AMI} makes a new launch template version: "
        "nodes launched after `pulumi up` boot it, running nodes keep the old image until replaced "
        "(`python3 -m ops replace`)",
        f"# dev: under {P}.image in Pulumi.dev.yaml",
        f"ami_id: {NEW_AMI}  # {DLAMI_NAME}",
        "before pinning a new image, check its kernel has a Lustre client (FSx's client packages trail new kernels); "
        "on a node booted from it run:",
        LUSTRE_CHECK,
        "and expect a Candidate version, not (none)",
    ]
    # Printing never touches the stack file.
    assert (tmp_path / "Pulumi.dev.yaml").read_text() == (REPO / "Pulumi.dev.yaml").read_text()


def test_image_already_pinned_says_so(tmp_path):
    aws = Aws()
    stub_image(aws, ami="ami-0a1b2c3d4e5f60718")
    rc, lines, _ = run(aws, dev_stack(tmp_path), "pin", "--image")
    assert rc == 0 and lines[4] == "image.ami_id already pins ami-0a1b2c3d4e5f60718"


@pytest.mark.parametrize(
    "name, arch, why",
    [
        (
            "Deep Learning Base OSS Nvidia Driver GPU AMI (Ubuntu 22.04) 20261127",
            "x86_64",
            "an Ubuntu 22.04 image: its Slurm 21.08 has no dynamic nodes (slurmd -Z came in 22.05); pin an Ubuntu 24.04 "
            "DLAMI",
        ),
        (
            "Deep Learning ARM64 Base OSS Nvidia Driver GPU AMI (Ubuntu 24.04) 20261127",
            "arm64",
            "an arm64 image; the GPU instance types are x86_64: pin an x86_64 DLAMI",
        ),
    ],
)
def test_image_the_program_refuses_is_not_offered(tmp_path, name, arch, why):
    aws = Aws()
    stub_image(aws, name=name, arch=arch)
    rc, lines, _ = run(aws, dev_stack(tmp_path), "pin", "--image", "--write")
    assert rc == 1
    assert lines[-1] == f"refused: {P}.image.ami_id: {NEW_AMI} is '{name}', {why}"
    assert not any(line.startswith("ami_id:") for line in lines)
    assert (tmp_path / "Pulumi.dev.yaml").read_text() == (REPO / "Pulumi.dev.yaml").read_text()


def test_image_parameter_not_found_and_access_denied(tmp_path):
    aws = Aws()
    aws.stub("ssm").add_client_error(
        "get_parameter", "ParameterNotFound", "", expected_params={"Name": DLAMI_SSM_PARAMETER}
    )
    rc, lines, err = run(aws, dev_stack(tmp_path), "pin", "--image")
    assert (rc, lines) == (3, [])
    assert (
        err.splitlines()[-1] == f"gpu-cluster-ops pin: reading SSM parameter {DLAMI_SSM_PARAMETER}: ParameterNotFound: "
    )

    aws = Aws()
    aws.stub("ssm").add_response(
        "get_parameter", {"Parameter": {"Name": DLAMI_SSM_PARAMETER, "Value": NEW_AMI}}, {"Name": DLAMI_SSM_PARAMETER}
    )
    aws.stub("ec2").add_client_error(
        "describe_images",
        "UnauthorizedOperation",
        "not authorized",
        expected_params={"ImageIds": [NEW_AMI], "IncludeDeprecated": True},
    )
    rc, _, err = run(aws, dev_stack(tmp_path), "pin", "--image")
    assert rc == 3
    assert err.splitlines()[-1] == (
        f"gpu-cluster-ops pin: describing image {NEW_AMI}: access denied to "
        "DescribeImages; grant it to your AWS identity (not authorized)"
    )


# --- pin --fsx -----------------------------------------------------------------------


def test_fsx_reads_the_live_file_system_across_pages(tmp_path):
    aws = Aws()
    other = file_system("fs-0aaaaaaaaaaaaaaa1", cluster="prod")
    deleting = file_system("fs-0aaaaaaaaaaaaaaa2", lifecycle="DELETING")
    renamed = file_system("fs-0aaaaaaaaaaaaaaa3", name="dev-scratch")  # ours by cluster tag, not the program's
    stub_fsx(aws, [other, deleting], [renamed, file_system()])
    rc, lines, err = run(aws, dev_stack(tmp_path), "pin", "--fsx")
    assert rc == 0
    assert lines == [
        f"file system {FS} (AVAILABLE, dev-fsx) in us-east-2",
        "fsx.pinned already matches the live file system",
        f"# dev: under {P}.fsx in Pulumi.dev.yaml (replace any pinned: block)",
        *PINNED_YAML,
    ]
    assert "finding FSx file system dev-fsx in us-east-2" in err


def test_fsx_pin_is_the_model_identity_of_the_live_values(tmp_path):
    """The printed block loads as the FsxIdentity the program computes for this config:
    the same fields, spelled the same way (a drift between ops and model fails here)."""
    aws = Aws()
    stub_fsx(aws, [file_system()])
    _, lines, _ = run(aws, dev_stack(tmp_path), "pin", "--fsx")
    printed = yaml.safe_load("\n".join(lines[3:]))["pinned"]
    cfg = parse_config(yaml.safe_load((REPO / "Pulumi.dev.yaml").read_text())["config"][P])
    assert FsxIdentity(**printed) == fsx_identity(cfg)
    assert set(LIVE_FIELDS) == set(FsxIdentity.model_fields)


def test_fsx_created_subnet_and_legacy_s3_link(tmp_path):
    """Without subnet_id the stack creates the subnet: the pin names its AZ and VPC CIDR,
    as fsx_identity() does, read from the live subnet and VPC."""
    cluster = {
        **STACK,
        "network": {"availability_zone": "us-east-2b", "vpc_cidr": "10.20.0.0/16"},
        "fsx": {
            "deployment_type": "PERSISTENT_1",
            "storage_capacity_gib": 2400,
            "per_unit_storage_throughput": 200,
            "data_repository": {"s3_uri": "s3://datasets/train"},
            "backup_retention_days": 0,
            "allow_no_backups": True,
        },
    }
    root = write_stack(tmp_path, cluster)
    aws = Aws()
    # Created linked, so without CopyTagsToBackups [FSX-CREATEFS-LUSTRE].
    live = file_system(
        deployment="PERSISTENT_1",
        capacity=2400,
        subnet="subnet-0bbbbbbbbbbbbbbb1",
        CopyTagsToBackups=False,
        DataRepositoryConfiguration={"ImportPath": "s3://datasets/train", "Lifecycle": "AVAILABLE"},
    )
    stub_fsx(aws, [live])
    ec2 = aws.stub("ec2")
    ec2.add_response(
        "describe_subnets",
        {
            "Subnets": [
                {
                    "SubnetId": "subnet-0bbbbbbbbbbbbbbb1",
                    "VpcId": "vpc-0bbbbbbbbbbbbbbb1",
                    "AvailabilityZone": "us-east-2b",
                }
            ]
        },
        {"SubnetIds": ["subnet-0bbbbbbbbbbbbbbb1"]},
    )
    ec2.add_response(
        "describe_vpcs",
        {"Vpcs": [{"VpcId": "vpc-0bbbbbbbbbbbbbbb1", "CidrBlock": "10.20.0.0/16"}]},
        {"VpcIds": ["vpc-0bbbbbbbbbbbbbbb1"]},
    )
    rc, lines, _ = run(aws, root, "pin", "--fsx", "--json")
    doc = json.loads("\n".join(lines))
    assert rc == 0
    assert doc["fsx"]["pinned"] == {
        "cluster_name": "dev",
        "deployment_type": "PERSISTENT_1",
        "storage_type": "SSD",
        "file_system_type_version": "2.15",
        "subnet": "created:us-east-2b:10.20.0.0/16",
        "storage_capacity_gib": 2400,
        "copy_tags_to_backups": False,
        "s3_import_path": "s3://datasets/train",
    }
    assert doc["fsx"]["config_differs"] == [] and doc["fsx"]["pinned_now"] is None
    assert doc["fsx"]["pinned"] == fsx_identity(parse_config(cluster)).model_dump()
    assert doc["written"] == []


def test_fsx_live_values_that_the_config_would_replace_are_flagged(tmp_path):
    aws = Aws()
    stub_fsx(aws, [file_system(capacity=2400)])
    rc, lines, _ = run(aws, dev_stack(tmp_path), "pin", "--fsx")
    assert rc == 0
    assert lines[1:3] == [
        "fsx.pinned differs from the live file system: storage_capacity_gib 1200 -> 2400",
        "warning: this config would replace the file system (storage_capacity_gib 2400 -> 1200); with these values "
        "pinned `pulumi up` refuses it until the config matches again",
    ]
    assert "  storage_capacity_gib: 2400" in lines


def test_fsx_not_found_ambiguous_denied(tmp_path):
    root = dev_stack(tmp_path)
    aws = Aws()
    stub_fsx(aws, [file_system(cluster="prod")])
    rc, lines, err = run(aws, root, "pin", "--fsx")
    assert (rc, lines) == (1, [])
    assert err.splitlines()[-1] == (
        "gpu-cluster-ops pin: no FSx for Lustre file system tagged GpuClusterName=dev and Name=dev-fsx in us-east-2; "
        "the first `pulumi up` creates it (or check aws:region)"
    )

    aws = Aws()
    stub_fsx(aws, [file_system(), file_system("fs-0ccccccccccccccc1", lifecycle="CREATING")])
    rc, _, err = run(aws, root, "pin", "--fsx")
    assert rc == 1
    assert err.splitlines()[-1] == (
        "gpu-cluster-ops pin: 2 FSx file systems are tagged GpuClusterName=dev and Name=dev-fsx in us-east-2 "
        f"({FS} AVAILABLE created 2026-11-20T10:00:00Z, fs-0ccccccccccccccc1 CREATING created 2026-11-20T10:00:00Z); "
        "pass --file-system-id with the one whose DNS name `pulumi stack output fsx_dns_name` shows"
    )

    aws = Aws()
    aws.stub("fsx").add_client_error(
        "describe_file_systems", "AccessDenied", "no fsx:DescribeFileSystems", expected_params={}
    )
    rc, _, err = run(aws, root, "pin", "--fsx")
    assert rc == 3
    assert err.splitlines()[-1] == (
        "gpu-cluster-ops pin: finding the cluster's FSx file system: access denied to "
        "DescribeFileSystems; grant it to your AWS identity (no fsx:DescribeFileSystems)"
    )


def test_fsx_file_system_id_picks_one_and_is_checked(tmp_path):
    root = dev_stack(tmp_path)
    aws = Aws()
    aws.stub("fsx").add_response("describe_file_systems", {"FileSystems": [file_system()]}, {"FileSystemIds": [FS]})
    rc, lines, _ = run(aws, root, "pin", "--fsx", "--file-system-id", FS)
    assert rc == 0 and lines[0] == f"file system {FS} (AVAILABLE, dev-fsx) in us-east-2"

    aws = Aws()
    aws.stub("fsx").add_response(
        "describe_file_systems", {"FileSystems": [file_system(cluster="prod")]}, {"FileSystemIds": [FS]}
    )
    rc, _, err = run(aws, root, "pin", "--fsx", "--file-system-id", FS)
    assert rc == 1
    assert err.splitlines()[-1] == (
        f"gpu-cluster-ops pin: {FS} is not an FSx for Lustre file system tagged "
        "GpuClusterName=dev and Name=dev-fsx; give the id of this cluster's file system"
    )


# --- pin --write -----------------------------------------------------------------------


def test_write_changes_only_the_two_keys_and_keeps_every_comment(tmp_path):
    root = dev_stack(tmp_path)
    before = (root / "Pulumi.dev.yaml").read_text().splitlines()
    aws = Aws()
    stub_image(aws)
    stub_fsx(aws, [file_system(capacity=2400)])
    rc, lines, _ = run(aws, root, "pin", "--write")
    assert rc == 0
    assert lines[-2:] == [
        f"wrote {P}.image.ami_id in Pulumi.dev.yaml; review it with `git diff Pulumi.dev.yaml`",
        f"wrote {P}.fsx.pinned in Pulumi.dev.yaml; review it with `git diff Pulumi.dev.yaml`",
    ]
    after = (root / "Pulumi.dev.yaml").read_text().splitlines()
    changed = [(a, b) for a, b in zip(before, after, strict=True) if a != b]
    assert changed == [
        ("        storage_capacity_gib: 1200", "        storage_capacity_gib: 2400"),
        ("      ami_id: ami-0a1b2c3d4e5f60718", f"      ami_id: {NEW_AMI}  # {DLAMI_NAME}"),
    ]
    cfg = parse_config(yaml.safe_load("\n".join(after))["config"][P])
    assert (cfg.image.ami_id, cfg.fsx.pinned.storage_capacity_gib) == (NEW_AMI, 2400)


def test_write_adds_a_missing_pin_at_the_end_of_its_section(tmp_path):
    text = (REPO / "Pulumi.dev.yaml").read_text()
    start = text.index("      pinned:\n")
    end = text.index("    image:\n")
    (tmp_path / "Pulumi.dev.yaml").write_text(text[:start] + text[end:])
    aws = Aws()
    stub_fsx(aws, [file_system()])
    rc, _, _ = run(aws, tmp_path, "pin", "--fsx", "--write")
    assert rc == 0
    assert (tmp_path / "Pulumi.dev.yaml").read_text() == text


def test_write_refuses_what_it_cannot_edit_and_leaves_the_file(tmp_path):
    text = (REPO / "Pulumi.dev.yaml").read_text()
    commented = text.replace("        storage_type: SSD\n", "        # set at creation\n        storage_type: SSD\n")
    (tmp_path / "Pulumi.dev.yaml").write_text(commented)
    aws = Aws()
    stub_fsx(aws, [file_system()])
    rc, _, err = run(aws, tmp_path, "pin", "--fsx", "--write")
    assert rc == 1
    assert err.splitlines()[-1] == (
        "gpu-cluster-ops pin: gpu-cluster:cluster.fsx.pinned has comment lines "
        "inside it; edit it by hand with the lines above"
    )
    assert (tmp_path / "Pulumi.dev.yaml").read_text() == commented

    # A pin the config rules refuse (ami_id with allow_unpinned) is not written.
    unpinned = text.replace("      ami_id: ami-0a1b2c3d4e5f60718\n", "      allow_unpinned: true\n")
    (tmp_path / "Pulumi.dev.yaml").write_text(unpinned)
    aws = Aws()
    stub_image(aws)
    rc, lines, err = run(aws, tmp_path, "pin", "--image", "--write")
    assert rc == 1
    assert "# and remove image.allow_unpinned (a pinned image and allow_unpinned are refused together)" in lines
    assert err.splitlines()[-1] == (
        f"gpu-cluster-ops pin: not written: with image.ami_id set, Pulumi.dev.yaml has config problems: "
        f"{P}.image.allow_unpinned: image.ami_id pins the image already; remove allow_unpinned or ami_id"
    )
    assert (tmp_path / "Pulumi.dev.yaml").read_text() == unpinned


def test_set_key_and_scalar_units():
    assert [scalar(v) for v in ("2.15", "SSD", "created:us-east-2b:10.0.0.0/16", True, 1200, "yes")] == [
        '"2.15"',
        "SSD",
        "created:us-east-2b:10.0.0.0/16",
        "true",
        "1200",
        '"yes"',
    ]
    text = "config:\n  ns:c:\n    fsx: {deployment_type: SCRATCH_2}\n"
    with pytest.raises(Exception, match="fsx is written inline"):
        set_key(text, ["config", "ns:c", "fsx", "pinned"], ["pinned:", "  a: 1"])
    # `pinned:  # why` keeps its own comment; the block after it is untouched.
    text = "config:\n  ns:c:\n    fsx:\n      pinned:  # from ops pin\n        a: 1\n\n    # image\n    image: {}\n"
    assert set_key(text, ["config", "ns:c", "fsx", "pinned"], ["pinned:", "  a: 2"]) == (
        "config:\n  ns:c:\n    fsx:\n      pinned:  # from ops pin\n        a: 2\n\n    # image\n    image: {}\n"
    )


# --- preflight runs the program's deploy rules ----------------------------------------


def run_preflight(aws: Aws, root: Path, now: datetime = NOW) -> tuple[int, list[str]]:
    rc, lines, _ = run(aws, root, "preflight", now=now)
    return rc, lines


def test_preflight_refuses_what_pulumi_up_refuses(tmp_path):
    """Unpinned image, a block past its scale-in (but not ended: EC2's checks pass) and a
    pinned FSx identity the config would replace: each refused with the program's words."""
    late = datetime(2026, 12, 7, 11, 0, tzinfo=UTC)  # scale-in 10:50, end 11:30
    cluster = {k: v for k, v in STACK.items() if k != "image"}
    pinned = fsx_identity(parse_config(STACK)).model_dump(exclude_none=True)
    cluster["fsx"] = {"pinned": {**pinned, "deployment_type": "PERSISTENT_1"}}
    aws = Aws()
    stub_account(aws, image=None)
    rc, lines = run_preflight(aws, write_stack(tmp_path, cluster), now=late)
    assert rc == 1
    assert lines == [
        f"{P}.capacity.capacity_blocks[0].end: block {CR} ends at 2026-12-07T11:30:00Z and its nodes "
        "stop at 2026-12-07T10:50:00Z (capacity.block_end_margin_minutes 40), which is past at 2026-12-07T11:00:00Z; "
        "move to the next block: replace this entry with the new block (README, moving to the next block)",
        f"{P}.image.ami_id: required to deploy: pin the image so every node, including replacements, boots the same "
        f"kernel; `python3 -m ops pin --stack <stack> --image` resolves {DLAMI_SSM_PARAMETER} in us-east-2 and "
        "prints the image.ami_id line (or set image.allow_unpinned: true to boot whatever the parameter names at "
        "each launch)",
        f"{P}.fsx.deployment_type: the file system was created with deployment_type 'PERSISTENT_1' (fsx.pinned) and "
        "this config gives 'PERSISTENT_2'; FSx cannot change that in place, so `pulumi up` would replace the file "
        "system and lose /fsx (Slurm state, checkpoints, baselines). Revert the edit; or take a backup, set "
        "fsx.allow_replace: true for one `pulumi up`, then copy the new `fsx_identity` stack output into fsx.pinned "
        "and remove allow_replace",
        "preflight dev (us-east-2): 3 problem(s), 0 warning(s)",
    ]


def test_preflight_block_without_dates_is_refused(tmp_path):
    blk = {k: v for k, v in STACK["capacity"]["capacity_blocks"][0].items() if k not in ("start", "end")}
    cluster = {**STACK, "capacity": {"nodes": 2, "capacity_blocks": [blk]}}
    aws = Aws()
    stub_account(aws, move_check=False)  # no dates, no schedule: the controller-move check waits for them
    rc, lines = run_preflight(aws, write_stack(tmp_path, cluster))
    assert rc == 1
    assert [line.split(": ")[0] for line in lines[:-1]] == [
        f"{P}.capacity.capacity_blocks[0].start",
        f"{P}.capacity.capacity_blocks[0].end",
    ]
    assert lines[-1] == "preflight dev (us-east-2): 2 problem(s), 0 warning(s)"


@pytest.mark.parametrize(
    "image, message",
    [
        (
            {**IMAGE, "Name": "Deep Learning Base OSS Nvidia Driver GPU AMI (Ubuntu 22.04) 20260101"},
            f"{AMI} is 'Deep Learning Base OSS Nvidia Driver GPU AMI (Ubuntu 22.04) 20260101', an Ubuntu 22.04 image: its "
            "Slurm 21.08 has no dynamic nodes (slurmd -Z came in 22.05); pin an Ubuntu 24.04 DLAMI",
        ),
        (
            "missing",
            f"{AMI} does not exist in us-east-2; AMI ids are per region: pin the id the DLAMI parameter gives "
            "here (`python3 -m ops pin --image --stack <stack>`)",
        ),
    ],
)
def test_preflight_checks_the_pinned_ami(tmp_path, image, message):
    aws = Aws()
    if image == "missing":
        stub_account(aws, image=None)
        aws.stub("ec2").add_client_error(
            "describe_images",
            "InvalidAMIID.NotFound",
            f"The image id '[{AMI}]' does not exist",
            expected_params={"ImageIds": [AMI], "IncludeDeprecated": True},
        )
    else:
        stub_account(aws, image=image)
    rc, lines = run_preflight(aws, write_stack(tmp_path))
    assert (rc, lines) == (1, [f"{P}.image.ami_id: {message}", "preflight dev (us-east-2): 1 problem(s), 0 warning(s)"])


def test_preflight_clean_with_the_block_still_running(tmp_path):
    aws = Aws()
    stub_account(aws, blocks=[block()])
    rc, lines = run_preflight(aws, write_stack(tmp_path))
    assert (rc, lines) == (0, ["preflight dev (us-east-2): OK, 0 warning(s)"])
