"""`python3 -m ops bake` against stubbed AWS: every call checked against botocore's models.

The build instance is played by its console: the stubbed GetConsoleOutput answers what
the bake's user data prints (nodeside/bake.py result_line, or the failure line and the
boot log's tail), so the test follows the real parsing of a real result line.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import shutil
import tarfile
from pathlib import Path

import pytest
from botocore.stub import ANY

from model.pins import CLOUDWATCH_AGENT_VERSION, PRODUCT
from nodeside import bake
from ops.cli import main
from tests.support.baked_image import KERNEL as K
from tests.support.baked_image import manifest, result_line
from tests.support.ops_stubs import NOW, Aws, FakeClock, context
from tests.support.pin_stubs import DLAMI_NAME, NEW_AMI, stub_image
from userdata import layout

REPO = Path(__file__).resolve().parents[2]
SUBNET = "subnet-0a1b2c3d4e5f60718"  # Pulumi.dev.yaml's network.subnet_id
BUCKET = "team-images"
IID = "i-0abc1234def567890"
BAKED = "ami-0b4ce000000000001"
NAME = "gpu-cluster-dev-20261201-120000"

STACK_TAGS = {"team": "ml-infra", "environment": "dev"}  # Pulumi.dev.yaml's tags


def console(*lines: str) -> str:
    return base64.b64encode(("[   12.5] cloud-init: booting\n" + "\n".join(lines) + "\n").encode()).decode()


def instance(state: str) -> dict:
    return {"Reservations": [{"Instances": [{"InstanceId": IID, "State": {"Code": 80, "Name": state}}]}]}


class Captured:
    """Parameters of calls the test cannot predict byte for byte (the presigned URL)."""

    def __init__(self, aws: Aws):
        self.params: dict[str, dict] = {}
        for service in ("ec2", "s3"):
            aws.stub(service)
            aws.clients[service].meta.events.register("provide-client-params", self._record)

    def _record(self, params, model, **_):
        # provide-client-params: what the code passed, before botocore wraps a Body
        self.params[model.name] = dict(params)


def tag_list(tags: dict[str, str]) -> list[dict[str, str]]:
    return [{"Key": k, "Value": v} for k, v in tags.items()]


def launch(aws: Aws) -> None:
    stub_image(aws)
    aws.stub("s3").add_response("put_object", {}, {"Bucket": BUCKET, "Key": ANY, "Body": ANY})
    aws.stub("ec2").add_response("run_instances", {"Instances": [{"InstanceId": IID}]}, {
        "ImageId": NEW_AMI,
        "InstanceType": "m7i.large",
        "MinCount": 1,
        "MaxCount": 1,
        "UserData": ANY,
        "NetworkInterfaces": [{"DeviceIndex": 0, "SubnetId": SUBNET}],
        "InstanceInitiatedShutdownBehavior": "stop",
        "MetadataOptions": {"HttpTokens": "required", "HttpEndpoint": "enabled"},
        "TagSpecifications": [{"ResourceType": t, "Tags": tag_list(fixed_tags())} for t in ("instance", "volume")],
    })  # fmt: skip
    for state in ("pending", "running", "stopping", "stopped"):
        aws.stub("ec2").add_response("describe_instances", instance(state), {"InstanceIds": [IID]})


def fixed_tags() -> dict[str, str]:
    return {**STACK_TAGS, "Name": NAME, "GpuClusterBake": NAME, "GpuClusterImageBase": NEW_AMI}


def finish(aws: Aws, keep: bool = False) -> None:
    if not keep:
        aws.stub("ec2").add_response("terminate_instances", {}, {"InstanceIds": [IID]})
    aws.stub("s3").add_response("delete_object", {}, {"Bucket": BUCKET, "Key": ANY})


def run(aws: Aws, tmp: Path, *args: str) -> tuple[int, str, str, FakeClock]:
    shutil.copy(REPO / "Pulumi.dev.yaml", tmp / "Pulumi.dev.yaml")
    clock = FakeClock(NOW)
    ctx = context(aws, clock=clock)
    argv = ["bake", "--stack", "dev", "--stack-dir", str(tmp), "--bucket", BUCKET, *args]
    rc = main(argv, ctx=ctx, session_for=aws.session)
    aws.done()
    return rc, ctx.out.getvalue(), ctx.err.getvalue(), clock


def test_bake_runs_step_20_on_a_build_instance_captures_it_tags_it_and_prints_the_pin(tmp_path):
    aws = Aws()
    cap = Captured(aws)
    launch(aws)
    m = manifest()
    line = result_line(m)
    digest = json.loads(line.split(" ", 1)[1])["manifest_sha256"]
    ec2 = aws.stub("ec2")
    ec2.add_response("get_console_output", {"InstanceId": IID, "Output": console("still baking")},
                     {"InstanceId": IID, "Latest": True})  # fmt: skip
    ec2.add_response("get_console_output", {"InstanceId": IID, "Output": console("baking", line)},
                     {"InstanceId": IID, "Latest": True})  # fmt: skip
    image_tags = {**fixed_tags(), **bake.image_tags(m, digest)}
    ec2.add_response("create_image", {"ImageId": BAKED}, {
        "InstanceId": IID,
        "Name": NAME,
        "Description": f"gpu-cluster node image from {NEW_AMI}: kernel {K}, Slurm 23.11.4-1.2ubuntu5, "
        f"Enroot {PRODUCT.enroot_version}, Pyxis {PRODUCT.pyxis_version}, Lustre 2.15.6-1fsx8",
        "TagSpecifications": [{"ResourceType": t, "Tags": tag_list(image_tags)} for t in ("image", "snapshot")],
    })  # fmt: skip
    for state in ("pending", "available"):
        ec2.add_response("describe_images", {"Images": [{"ImageId": BAKED, "State": state}]}, {"ImageIds": [BAKED]})
    finish(aws)

    rc, out, err, clock = run(aws, tmp_path)
    assert rc == 0, err
    assert out.splitlines() == [
        f"baked {BAKED} ({NAME}) from {NEW_AMI} in us-east-2",
        f"  kernel  {K}",
        "  slurm   23.11.4-1.2ubuntu5",
        f"  enroot  {PRODUCT.enroot_version}",
        f"  pyxis   {PRODUCT.pyxis_version}",
        "  lustre  2.15.6-1fsx8",
        "  munge   0.5.15-4build1",
        "  pmix    5.0.1-4.1build1",
        f"  cwagent {CLOUDWATCH_AGENT_VERSION}",
        f"  manifest sha256 {digest} (/var/lib/gpu-cluster-image/manifest.json on the image)",
        "# dev: under gpu-cluster:cluster.image in Pulumi.dev.yaml",
        f"ami_id: {BAKED}  # {NAME}",
    ]
    assert f"base image {NEW_AMI} ({DLAMI_NAME})" in err
    assert clock.sleeps == [30.0] * 5  # 3 not stopped yet, 1 console without the result, 1 image pending
    assert len(image_tags) <= 50 and image_tags["GpuClusterImageManifest"] == digest
    # The payload and the user data the instance got.
    key = cap.params["PutObject"]["Key"]
    tar = cap.params["PutObject"]["Body"]
    sha = hashlib.sha256(tar).hexdigest()
    assert key == f"gpu-cluster-bake/dev/{sha}.tar.gz" and cap.params["DeleteObject"]["Key"] == key
    with tarfile.open(fileobj=io.BytesIO(tar)) as t:
        names = sorted("/" + n for n in t.getnames())
        env = t.extractfile("etc/gpu-cluster/cluster.env").read().decode()
    assert names == sorted([layout.ENTRY_POINT, f"{layout.LIB}/common.sh", f"{layout.STEPS}/20-packages.sh",
                            layout.BAKE_PROGRAM, f"{layout.TEMPLATES}/needrestart.conf",
                            f"{layout.TEMPLATES}/unattended-upgrades.conf", layout.CLUSTER_ENV])  # fmt: skip
    assert f"DOWNLOAD_SHA256='{PRODUCT.cluster_env()}'" in env and "SLURM_SERIES=23.11" in env
    user_data = cap.params["RunInstances"]["UserData"]
    assert len(user_data.encode()) < 16384
    assert f"https://{BUCKET}.s3.us-east-2.amazonaws.com/{key}?" in user_data
    assert f"== {sha} ]]" in user_data
    assert (
        "if ! env GPU_CLUSTER_BAKE=1 NEEDRESTART_SUSPEND=1 /opt/gpu-cluster/bin/gpu-cluster-boot --only packages; then"
        in user_data
    )


def test_a_failed_bake_reports_the_reason_and_the_log_and_captures_nothing(tmp_path):
    aws = Aws()
    launch(aws)
    reason = (
        f"step 20: bake: no Lustre client module for kernel {K} (no lustre.ko under /lib/modules/{K}): ... "
        "(log: /var/log/gpu-cluster/boot.log on the stopped build instance)"
    )
    text = console(f"{bake.FAILED_MARK} {reason}", "gpu-cluster-bake log: [20-packages] baking an image: kernel " + K)
    aws.stub("ec2").add_response("get_console_output", {"InstanceId": IID, "Output": text},
                                 {"InstanceId": IID, "Latest": True})  # fmt: skip
    finish(aws)
    rc, out, err, _ = run(aws, tmp_path)
    assert rc == 1 and out == ""
    assert (
        f"gpu-cluster-ops bake: the bake failed on {IID}: {reason}\n  [20-packages] baking an image: kernel {K}\n"
        in err
    )
    assert f"bake: build instance {IID} terminated" in err


def test_an_image_without_this_repositorys_pins_is_not_captured(tmp_path):
    aws = Aws()
    launch(aws)
    m = manifest()
    m["versions"]["enroot"] = "4.1.2"
    aws.stub("ec2").add_response("get_console_output", {"InstanceId": IID, "Output": console(result_line(m))},
                                 {"InstanceId": IID, "Latest": True})  # fmt: skip
    finish(aws, keep=True)
    rc, _, err, _ = run(aws, tmp_path, "--keep-instance")
    assert rc == 1
    assert (
        f"the image does not carry this repository's pins: Enroot 4.1.2 is not the pinned {PRODUCT.enroot_version}"
        in err
    )
    assert f"build instance {IID} kept (--keep-instance)" in err


def test_a_build_instance_that_never_stops_is_given_up_and_terminated(tmp_path):
    aws = Aws()
    launch(aws)
    ec2 = aws.stub("ec2")
    # launch() queued pending/running/stopping/stopped; a bound of 2 minutes sees 5 polls
    ec2._queue.pop()  # noqa: SLF001  (drop "stopped": it never stops)
    for _ in range(2):
        ec2.add_response("describe_instances", instance("running"), {"InstanceIds": [IID]})
    finish(aws)
    rc, _, err, clock = run(aws, tmp_path, "--timeout", "2")
    assert rc == 3
    assert f"gpu-cluster-ops bake: gave up after 2 min waiting for build instance {IID} to stop" in err
    assert sum(clock.sleeps) == 120


def test_bad_input_is_refused_before_any_aws_call(tmp_path):
    aws = Aws()
    rc, _, err, _ = run(aws, tmp_path, "--base-ami", "ubuntu", "--security-group-id", "default", "--timeout", "0")
    assert rc == 2
    assert err.splitlines() == [
        "gpu-cluster-ops bake: --base-ami: 'ubuntu' is not a ami-... id",
        "gpu-cluster-ops bake: --security-group-id: 'default' is not a sg-... id",
        "gpu-cluster-ops bake: --timeout: 0.0 minutes; give 1 to 1440",
    ]
    assert aws.clients == {}


def test_a_stack_that_creates_its_vpc_needs_a_subnet(tmp_path):
    text = (REPO / "Pulumi.dev.yaml").read_text().replace(f"      subnet_id: {SUBNET}\n", "")
    (tmp_path / "Pulumi.dev.yaml").write_text(text)
    ctx = context(Aws())
    rc = main(["bake", "--stack", "dev", "--stack-dir", str(tmp_path), "--bucket", BUCKET], ctx=ctx)
    assert rc == 2
    assert ctx.err.getvalue().startswith("gpu-cluster-ops bake: --subnet-id: required (the stack creates its VPC)")


@pytest.mark.parametrize("count", [37, 38])
def test_the_image_tags_fit_in_awss_50(tmp_path, count):
    # The image's own 13 tags (Manifest, Baked, 7 versions, 3 downloads... plus Name,
    # GpuClusterBake, GpuClusterImageBase) and the stack's: 50 at most per AMI.
    from ops.bake import input_problems
    from ops.cli import parser
    from ops.stack import load_stack

    text = (REPO / "Pulumi.dev.yaml").read_text()
    extra = "".join(f"      t{i}: v\n" for i in range(count - len(STACK_TAGS)))
    (tmp_path / "Pulumi.dev.yaml").write_text(text.replace("    tags:\n", "    tags:\n" + extra, 1))
    stack = load_stack("dev", None, tmp_path)
    assert len(stack.config.tags) == count
    args = parser().parse_args(["bake", "--stack", "dev", "--bucket", BUCKET])
    problems = input_problems(args, stack)
    own = 3 + 2 + len(bake.TAGGED_VERSIONS) + len(PRODUCT.downloads)
    if count + own <= 50:
        assert problems == []
    else:
        assert problems == [
            f"tags: the stack's {count} tags and the image's own exceed AWS's 50 per AMI by {count + own - 50}; "
            "remove some from gpu-cluster:cluster.tags"
        ]


# --- what the bake needs in IAM (docs/bake-iam-policy.json) --------------------------------

BAKE_POLICY = REPO / "docs" / "bake-iam-policy.json"


def test_every_call_of_a_bake_is_granted_by_the_bake_policy(tmp_path):
    from tests.support.iam_policy import RecordingAws, granted

    aws = RecordingAws()
    launch(aws)
    m = manifest()
    ec2 = aws.stub("ec2")
    ec2.add_response("get_console_output", {"InstanceId": IID, "Output": console(result_line(m))},
                     {"InstanceId": IID, "Latest": True})  # fmt: skip
    ec2.add_response("create_image", {"ImageId": BAKED}, {"InstanceId": IID, "Name": NAME, "Description": ANY,
                                                          "TagSpecifications": ANY})  # fmt: skip
    ec2.add_response("describe_images", {"Images": [{"ImageId": BAKED, "State": "available"}]}, {"ImageIds": [BAKED]})
    finish(aws)
    assert run(aws, tmp_path)[0] == 0
    policy = json.loads(BAKE_POLICY.read_text())
    # The presigned URL's GET is authorized as its signer: s3:GetObject too.
    needed = aws.actions | {"s3:GetObject"}
    assert needed == {
        "ssm:GetParameter", "ec2:DescribeImages", "s3:PutObject", "ec2:RunInstances", "ec2:DescribeInstances",
        "ec2:GetConsoleOutput", "ec2:CreateImage", "ec2:TerminateInstances", "s3:DeleteObject", "s3:GetObject",
    }  # fmt: skip
    assert sorted(a for a in needed if not granted(policy, a)) == []
    # Tagging at launch and at capture needs ec2:CreateTags, limited to those two calls.
    assert granted(policy, "ec2:CreateTags")


def test_the_bake_policy_passes_no_role_and_scopes_every_write():
    policy = json.loads(BAKE_POLICY.read_text())
    for st in policy["Statement"]:
        assert st["Effect"] == "Allow" and set(st) <= {"Sid", "Effect", "Action", "Resource", "Condition"}
        assert not any(a.startswith("iam:") for a in st["Action"])  # the build instance has no role
        writes = [a for a in st["Action"] if not a.split(":")[1].startswith(("Describe", "Get"))]
        if writes:
            assert st["Resource"] != "*", st["Sid"]
    by_sid = {st["Sid"]: st for st in policy["Statement"]}
    assert by_sid["OnlyTheBuildInstance"]["Condition"] == {"StringLike": {"aws:ResourceTag/GpuClusterBake": "*"}}
    assert by_sid["TagOnlyWhileCreating"]["Condition"] == {
        "StringEquals": {"ec2:CreateAction": ["RunInstances", "CreateImage"]}
    }


def test_write_sets_the_image_in_the_stack_file_keeping_its_comments(tmp_path):
    aws = Aws()
    launch(aws)
    m = manifest()
    ec2 = aws.stub("ec2")
    ec2.add_response("get_console_output", {"InstanceId": IID, "Output": console(result_line(m))},
                     {"InstanceId": IID, "Latest": True})  # fmt: skip
    ec2.add_response("create_image", {"ImageId": BAKED}, {"InstanceId": IID, "Name": NAME, "Description": ANY,
                                                          "TagSpecifications": ANY})  # fmt: skip
    ec2.add_response("describe_images", {"Images": [{"ImageId": BAKED, "State": "available"}]}, {"ImageIds": [BAKED]})
    finish(aws)
    rc, out, err, _ = run(aws, tmp_path, "--write")
    assert rc == 0, err
    before = (REPO / "Pulumi.dev.yaml").read_text().splitlines()
    after = (tmp_path / "Pulumi.dev.yaml").read_text().splitlines()
    changed = [(a, b) for a, b in zip(before, after, strict=True) if a != b]
    assert len(changed) == 1 and changed[0][1] == f"      ami_id: {BAKED}  # {NAME}"
    assert (
        out.splitlines()[-1]
        == "wrote gpu-cluster:cluster.image.ami_id in Pulumi.dev.yaml; review it with `git diff Pulumi.dev.yaml`"
    )


@pytest.mark.skipif(shutil.which("shellcheck") is None, reason="shellcheck not installed")
def test_the_build_instances_user_data_passes_shellcheck(tmp_path):
    import subprocess

    from userdata.bake import bake_user_data

    script = tmp_path / "user-data.sh"
    script.write_text(bake_user_data(f"https://{BUCKET}.s3.us-east-2.amazonaws.com/k?X-Amz-A=1&X-Amz-B=2", "a" * 64))
    r = subprocess.run(["shellcheck", str(script)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout
