"""The user-data renderer: size limit, byte stability, shape, S3 overflow, scripts.

Oracles: `cloud-init schema --config-file` for the cloud-config part (Debian package
`cloud-init`, used only as a checker), shellcheck and `bash -n` for every script.
"""

from __future__ import annotations

import base64
import email
import gzip
import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile

import pytest
import yaml

from model.catalog import CATALOG, SUPPORTED_INSTANCE_TYPES
from tests.support.shellcheck import shellcheck
from tests.support.user_data import FSX, URI, config, rendered
from userdata import layout, render, templating
from userdata.render import render_userdata


def parts(user_data: bytes) -> dict[str, bytes]:
    msg = email.message_from_bytes(gzip.decompress(user_data))
    assert msg.get_boundary() == render.BOUNDARY
    return {p.get_content_type(): p.get_payload(decode=True) for p in msg.walk() if not p.is_multipart()}


def write_files(user_data: bytes) -> dict[str, tuple[bytes, str, str]]:
    doc = yaml.safe_load(parts(user_data)["text/cloud-config"])
    out = {}
    for e in doc["write_files"]:
        assert e["encoding"] == "gz+b64"
        out[e["path"]] = (gzip.decompress(base64.b64decode(e["content"])), e["permissions"], e["owner"])
    return out


# --- size, stability, node-count independence ------------------------------------------


@pytest.mark.parametrize("instance_type", SUPPORTED_INSTANCE_TYPES)
def test_size_and_node_count_independence(instance_type):
    spec = CATALOG[instance_type]
    small = rendered(instance_type, 2)
    large = render_userdata(config(1024, instance_type), spec, FSX, URI)
    assert len(small.user_data) <= render.EC2_USER_DATA_LIMIT
    assert small.user_data == large.user_data  # bytes do not depend on the node count
    assert small.s3_payload == large.s3_payload and small.files == large.files
    again = render_userdata(config(2, instance_type), spec, FSX, URI)
    assert again.user_data == small.user_data and again.s3_payload == small.s3_payload  # byte-stable


def test_p5_at_2_and_1024_nodes_same_size_under_16k():
    a = rendered("p5.48xlarge", 2).user_data
    b = rendered("p5.48xlarge", 1024).user_data
    assert len(a) == len(b) <= 16384


def test_shape_fixed_boundary_two_parts():
    ud = rendered().user_data
    assert ud[:2] == b"\x1f\x8b" and ud[4:8] == b"\0\0\0\0"  # gzip, mtime 0
    p = parts(ud)
    assert list(p) == ["text/cloud-config", "text/x-shellscript"]
    assert p["text/cloud-config"].startswith(b"#cloud-config\n")
    assert p["text/x-shellscript"].decode().splitlines()[-1] == f"exec {layout.ENTRY_POINT}"


# --- every node file: the two inline ones in write_files, the rest in the payload ------


def _payload_members(tar: bytes) -> dict[str, tuple[bytes, int]]:
    with tarfile.open(fileobj=io.BytesIO(tar)) as t:
        return {"/" + m.name: (t.extractfile(m).read(), m.mode) for m in t.getmembers()}


def test_node_files_arrive_with_their_modes():
    nf = rendered()
    inline = write_files(nf.user_data)
    payload = _payload_members(nf.s3_payload[1])
    assert set(inline) == set(render.INLINE_FILES) == {layout.CLUSTER_ENV, layout.FETCH}
    assert set(inline) | set(payload) == set(nf.files) and not set(inline) & set(payload)
    for path, content in nf.files.items():
        executable = path.startswith((f"{layout.BIN}/", f"{layout.STEPS}/")) or content.startswith(b"#!")
        if path in inline:
            assert inline[path] == (content, "0755" if executable else "0644", "root:root"), path
        else:
            assert payload[path] == (content, 0o755 if executable else 0o644), path
    steps = sorted(p.rsplit("/", 1)[1] for p in nf.files if p.startswith(f"{layout.STEPS}/"))
    assert steps == [
        "10-identity.sh",
        "20-packages.sh",
        "25-logs.sh",
        "30-fsx.sh",
        "35-users.sh",
        "40-munge.sh",
        "50-slurm.sh",
        "60-enroot.sh",
        "70-pyxis.sh",
        "80-limits.sh",
        "85-services.sh",
        "90-jobs.sh",
        "95-handoff.sh",
    ]
    for needed in (
        "/etc/gpu-cluster/cluster.env",
        "/opt/gpu-cluster/lib/common.sh",
        "/opt/gpu-cluster/templates/slurm.conf",
        "/opt/gpu-cluster/templates/slurmd.default",
        "/opt/gpu-cluster/validation/first-boot.sbatch",
        "/opt/gpu-cluster/templates/enroot-tmpfiles.conf",
        "/etc/security/limits.d/90-gpu-cluster-memlock.conf",
    ):
        assert needed in nf.files


# --- the S3 payload ------------------------------------------------------------------------


def test_payload_is_checked_and_content_addressed():
    nf = rendered()
    sha, tar = nf.s3_payload
    assert hashlib.sha256(tar).hexdigest() == sha
    inline = write_files(nf.user_data)
    assert set(inline) == {layout.CLUSTER_ENV, layout.FETCH}
    with tarfile.open(fileobj=io.BytesIO(tar)) as t:
        members = {m.name: m for m in t.getmembers()}
        assert all(m.mtime == 0 and m.uid == 0 and m.isfile() for m in members.values())
        unpacked = {"/" + n: t.extractfile(m).read() for n, m in members.items()}
    assert unpacked == {p: c for p, c in nf.files.items() if p not in inline}
    script = parts(nf.user_data)["text/x-shellscript"].decode()
    assert f"{layout.FETCH} s3://demo-bucket/gpu-cluster/demo/payload-{sha}.tar.gz {sha} /" in script


@pytest.fixture
def fetch_env(tmp_path):
    """gpu-cluster-fetch with a fake `aws` on PATH serving s3://bucket/key from tmp."""
    nf = rendered(uri="s3://bucket/key")
    sha, tar = nf.s3_payload
    (tmp_path / "store").mkdir()
    (tmp_path / "store" / "key").write_bytes(tar)
    bindir = tmp_path / "bin"
    bindir.mkdir()
    aws = bindir / "aws"
    # aws s3 cp [options] SRC DEST: the last two arguments
    aws.write_text(
        f'#!/bin/bash\n[ "$1 $2" = "s3 cp" ] || exit 2\nsrc=${{@: -2:1}}\ndst=${{@: -1}}\n'
        f'echo "$@" >>"{tmp_path}/aws.calls"\ncp "{tmp_path}/store/${{src#s3://bucket/}}" "$dst"\n'
    )
    aws.chmod(0o755)
    fetch = tmp_path / "gpu-cluster-fetch"
    fetch.write_bytes(nf.files[layout.FETCH])
    fetch.chmod(0o755)
    dest = tmp_path / "root"
    dest.mkdir()
    env = {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}", "AWS_REGION": "us-east-2"}
    return nf, sha, fetch, dest, env, tmp_path


def test_fetch_unpacks_verified_payload(fetch_env):
    nf, sha, fetch, dest, env, tmp = fetch_env
    r = subprocess.run([str(fetch), "s3://bucket/key", sha, str(dest)], env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert (tmp / "aws.calls").read_text().startswith("s3 cp --only-show-errors --region us-east-2 s3://bucket/key ")
    boot = dest / "opt/gpu-cluster/bin/gpu-cluster-boot"
    assert boot.read_bytes() == nf.files["/opt/gpu-cluster/bin/gpu-cluster-boot"]
    assert os.access(boot, os.X_OK)
    assert (dest / "opt/gpu-cluster/lib/common.sh").stat().st_mode & 0o777 == 0o644


def test_fetch_refuses_wrong_sha(fetch_env):
    nf, sha, fetch, dest, env, tmp = fetch_env
    r = subprocess.run([str(fetch), "s3://bucket/key", "0" * 64, str(dest)], env=env, capture_output=True, text=True)
    assert r.returncode == 1 and "does not have sha256" in r.stderr
    # nothing unpacked; the reason is in the node's local status
    assert [p.relative_to(dest).as_posix() for p in dest.rglob("*") if p.is_file()] == ["var/lib/gpu-cluster/status"]
    status = json.loads((dest / "var/lib/gpu-cluster/status").read_text())
    assert (status["step"], status["state"]) == ("payload", "failed")
    assert status["reason"] == "s3://bucket/key does not have sha256 " + "0" * 64 + "; not unpacking"


def test_fetch_file_uri_for_local_cluster(fetch_env):
    nf, sha, fetch, dest, env, tmp = fetch_env
    r = subprocess.run([str(fetch), f"file://{tmp}/store/key", sha, str(dest)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert (dest / "etc/slurm/gres.conf").exists()


# --- cloud-init schema (oracle) ------------------------------------------------------------


@pytest.mark.skipif(shutil.which("cloud-init") is None, reason="cloud-init not installed (apt-get install cloud-init)")
def test_cloud_config_schema(tmp_path):
    nf = rendered()
    cc = tmp_path / "cloud-config.yaml"
    cc.write_bytes(parts(nf.user_data)["text/cloud-config"])
    r = subprocess.run(["cloud-init", "schema", "--config-file", str(cc)], capture_output=True, text=True)
    assert r.returncode == 0 and "Valid cloud-config" in r.stdout, r.stdout + r.stderr


# --- cluster.env and job templates -------------------------------------------------------


def _env_of(text: bytes) -> dict[str, str]:
    out = subprocess.run(
        ["bash", "-c", "set -a; . /dev/stdin; env -0"], input=text, capture_output=True, check=True
    ).stdout
    return dict(kv.split("=", 1) for kv in out.decode().split("\0") if "=" in kv)


def test_cluster_env_values():
    nf = rendered()
    env = _env_of(nf.files[layout.CLUSTER_ENV])
    assert env["CLUSTER_NAME"] == "demo" and env["SLURM_PARTITION"] == "train"
    assert env["FSX_DNS_NAME"] == FSX.dns_name and env["FSX_MOUNT_NAME"] == "abcdefgh"
    assert env["FSX_ROOT"] == "/fsx/.gpu-cluster/demo"
    assert (env["SLURM_SERIES"], env["ENROOT_VERSION"], env["PYXIS_VERSION"]) == ("23.11", "4.2.1", "0.24.0")
    assert env["PYXIS_SO"] == "/usr/local/lib/slurm/spank_pyxis.so"
    assert env["VALIDATION_ENABLED"] == "1" and env["VALIDATION_WAIT_MINUTES"] == "30"
    assert (env["SLURM_MAX_NODES_FACTOR"], env["SLURM_MAX_NODES_SPARE"]) == ("2", "4")
    assert not any(k == "NODES" or k.endswith("_NODES") for k in env if k.startswith("GPU_CLUSTER"))
    off = render_userdata(config(validation={"enabled": False}), CATALOG["p5.48xlarge"], FSX, URI)
    assert _env_of(off.files[layout.CLUSTER_ENV])["VALIDATION_ENABLED"] == "0"


@pytest.mark.parametrize("instance_type,cpus", [("p4d.24xlarge", 12), ("p5.48xlarge", 24), ("p6-b200.48xlarge", 24)])
def test_training_job_template(instance_type, cpus):
    nf = rendered(instance_type)
    job = nf.files["/opt/gpu-cluster/templates/jobs/train-multinode.sbatch"].decode()
    lines = job.splitlines()
    assert f"#SBATCH --cpus-per-task={cpus}" in lines
    assert "#SBATCH --gres=gpu:8" in lines and "#SBATCH --ntasks-per-node=8" in lines
    assert "#SBATCH --partition=train" in lines
    assert "#SBATCH --time=04:00:00" in lines  # a Capacity Block's end reservation needs a limit
    assert (
        'MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | sed -n 1p)' in lines
    )  # reads all: no SIGPIPE under pipefail
    assert "srun --export=ALL,MASTER_ADDR=" in job and "--container-image=" in job
    host = nf.files["/opt/gpu-cluster/templates/jobs/nccl-host.sbatch"].decode()
    assert f"#SBATCH --cpus-per-task={cpus}" in host and "--mpi=pmix --export=ALL," in host
    assert "#SBATCH --time=00:30:00" in host.splitlines()


def test_job_template_without_gpus_has_no_gres():
    from dataclasses import replace

    spec = replace(CATALOG["p5.48xlarge"], name="local.test", gpus=0)
    nf = render_userdata(config(), spec, FSX, URI)
    job = nf.files["/opt/gpu-cluster/templates/jobs/train-multinode.sbatch"].decode()
    assert "--gres" not in job and "#SBATCH --ntasks-per-node=1" in job and "#SBATCH --cpus-per-task=192" in job


# --- every shipped script: bash -n and shellcheck ------------------------------------------


def _scripts():
    nf = rendered()
    return {
        p: c for p, c in nf.files.items() if c.startswith((b"#!/usr/bin/env bash", b"#!/bin/bash")) or p.endswith(".sh")
    }


SCRIPTS = _scripts()


def test_every_boot_script_is_covered():
    mine = [p for p in SCRIPTS if p.startswith(("/opt/gpu-cluster/bin/gpu-cluster-boot", "/opt/gpu-cluster/steps/"))]
    assert len(mine) == 14
    assert "/opt/gpu-cluster/lib/common.sh" in SCRIPTS and "/opt/gpu-cluster/bin/gpu-cluster-fetch" in SCRIPTS
    assert "/var/lib/cloud/scripts/per-boot/gpu-cluster-boot.sh" in SCRIPTS


@pytest.mark.parametrize("path", sorted(SCRIPTS))
def test_script_bash_n(path, tmp_path):
    f = tmp_path / "s"
    f.write_bytes(SCRIPTS[path])
    r = subprocess.run(["bash", "-n", str(f)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def _nodeside_shell_files() -> list[str]:
    """Every shell file shipped verbatim (boot, registries, validation), relative to nodeside/."""
    tree = templating.NODESIDE_ROOT
    return sorted(
        p.relative_to(tree).as_posix()
        for p in tree.rglob("*")
        if p.is_file()
        and (p.parent.name in ("bin", "steps", "lib", "validation") or p.suffix == ".sh")
        and p.suffix not in (".py", ".json")
    )


@pytest.mark.skipif(shutil.which("shellcheck") is None, reason="shellcheck not installed")
def test_shellcheck_nodeside_scripts(shellcheck_cache):
    # The nodeside/ tree keeps the layout the `source` directives point at; every shell
    # file shipped verbatim (boot, registries, validation) is checked here.
    files = _nodeside_shell_files()
    assert {"validation/gate.sh", "validation/gpu-cluster-validation", "lib/check-slurmd-c.sh"} <= set(files)
    assert "registries/bin/gpu-cluster-registry-login" in files and "system/per-boot.sh" in files
    for r in shellcheck(["-x", "-s", "bash"], files, cwd=templating.NODESIDE_ROOT, cache=shellcheck_cache):
        assert r.returncode == 0, r.stdout


@pytest.mark.skipif(shutil.which("shellcheck") is None, reason="shellcheck not installed")
def test_shellcheck_rendered_scripts(tmp_path, shellcheck_cache):
    # A rendered script byte-identical to a nodeside/ file test_shellcheck_nodeside_scripts
    # checks (with its sources followed) is not checked a second time; the rest are.
    verbatim = {(templating.NODESIDE_ROOT / f).read_bytes(): f for f in _nodeside_shell_files()}
    copies = {path: verbatim[c] for path, c in SCRIPTS.items() if c in verbatim}
    assert copies["/opt/gpu-cluster/validation/gate.sh"] == "validation/gate.sh"
    assert copies["/var/lib/cloud/scripts/per-boot/gpu-cluster-boot.sh"] == "system/per-boot.sh"
    paths = []
    for path, content in sorted(SCRIPTS.items()):
        if path in copies:
            assert content == (templating.NODESIDE_ROOT / copies[path]).read_bytes()
            continue
        f = tmp_path / path.strip("/").replace("/", "__")
        f.write_bytes(content)
        paths.append(str(f))
    assert paths  # the job templates and the first-boot batch script are rendered
    # Rendered copies lose the tree layout, so sourced files are not followed here.
    for r in shellcheck(["-s", "bash", "-e", "SC1091"], paths, cache=shellcheck_cache):
        assert r.returncode == 0, r.stdout


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze not installed")
def test_responder_unit_verifies(tmp_path):
    unit = "/etc/systemd/system/gpu-cluster-munge-responder.service"
    (tmp_path / "gpu-cluster-munge-responder.service").write_bytes(rendered().files[unit])
    r = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", str(tmp_path / "gpu-cluster-munge-responder.service")],
        capture_output=True,
        text=True,
        env={**os.environ, "SYSTEMD_UNIT_PATH": f"{tmp_path}:"},
    )
    # The program itself lives on the node, not on this host.
    problems = [
        ln
        for ln in (r.stdout + r.stderr).splitlines()
        if "gpu-cluster-munge-responder" in ln and "is not executable" not in ln
    ]
    assert problems == [], r.stdout + r.stderr


def test_bytes_do_not_depend_on_blocks_or_reservations():
    blocks = [
        {
            "name": "a",
            "reservation_id": "cr-0123456789abcdef0",
            "instance_count": 64,
            "availability_zone": "us-east-2b",
        },
        {
            "name": "b",
            "reservation_id": "cr-0fedcba9876543210",
            "instance_count": 64,
            "availability_zone": "us-east-2b",
        },
    ]
    cfg = config(100, capacity={"nodes": 100, "capacity_blocks": blocks}, controller={"block": "b"})
    nf = render_userdata(cfg, CATALOG["p5.48xlarge"], FSX, URI)
    assert nf.user_data == rendered().user_data and nf.s3_payload == rendered().s3_payload


def test_only_a_dedicated_controller_changes_cluster_env():
    """controller.placement dedicated adds CONTROLLER_DEDICATED=1 (steps 50/60/80/85 run
    slurmctld only there); the default placement renders the bytes it always did."""
    default = config(2, controller={"placement": "block"})
    assert render_userdata(default, CATALOG["p5.48xlarge"], FSX, URI).user_data == rendered().user_data
    dedicated = config(2, controller={"placement": "dedicated"})
    env = render_userdata(dedicated, CATALOG["p5.48xlarge"], FSX, URI).files["/etc/gpu-cluster/cluster.env"]
    assert b"\nCONTROLLER_DEDICATED=1\n" in env
    assert b"CONTROLLER_DEDICATED" not in rendered().files["/etc/gpu-cluster/cluster.env"]
