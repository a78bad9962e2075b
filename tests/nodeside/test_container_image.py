"""The job image is imported once per cluster into /fsx and reused (issue 9).

`srun --container-image=<registry image>` makes Pyxis pull and convert the image on
every node for every step; the validation gate ran two such steps, so it pulled the
training image twice per node. bin/gpu-cluster-image imports it once, under a lock,
into /fsx/images/<name>.sqsh; the gate and the job templates run that file with a
named container. Run against a fake `enroot` that records its calls.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.support.fake_slurm import DATA, FAKE_GPU_SCONTROL, FAKE_GPU_SRUN, FAKE_SINFO, ctx
from userdata.validation_files import validation_files

BOOT = Path(__file__).resolve().parents[2] / "nodeside"
TOOL = BOOT / "bin" / "gpu-cluster-image"
IMAGE = "nvcr.io/nvidia/pytorch:24.07-py3"
SQSH_NAME = "nvcr.io+nvidia+pytorch+24.07-py3.sqsh"

# `enroot import -o OUT URI`: records the call, takes IMPORT_SECONDS (a real import
# takes minutes; only the concurrency test needs the imports to overlap), writes OUT.
FAKE_ENROOT = """#!/usr/bin/env bash
echo "enroot $*" >>"$ENROOT_LOG"
if [ "$1" = import ] && [ "$2" = -o ]; then sleep "${IMPORT_SECONDS:-0}"; echo "squash of $4" >"$3"; exit 0; fi
exit 0
"""


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    fakebin = tmp_path / "bin"
    fakebin.mkdir()
    (fakebin / "enroot").write_text(FAKE_ENROOT)
    (fakebin / "enroot").chmod(0o755)
    images = tmp_path / "fsx" / "images"
    images.mkdir(parents=True)
    return dict(
        os.environ,
        PATH=f"{fakebin}:{os.environ['PATH']}",
        ENROOT_LOG=str(tmp_path / "enroot.log"),
        GPU_CLUSTER_IMAGE_DIR=str(images),
    )


def _tool(env: dict[str, str], image: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(TOOL), image], env=env, capture_output=True, text=True, timeout=60)


def _enroot_calls(tmp_path: Path) -> list[str]:
    log = tmp_path / "enroot.log"
    return log.read_text().splitlines() if log.exists() else []


def test_concurrent_jobs_import_the_image_once(tmp_path, env):
    env = dict(env, IMPORT_SECONDS="1")
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda _: _tool(env, IMAGE), range(4)))
    out = f"{tmp_path}/fsx/images/{SQSH_NAME}"
    for r in results:
        assert (r.returncode, r.stdout) == (0, out + "\n"), r.stderr
    # Enroot's URI form: the registry host before '#'.
    assert _enroot_calls(tmp_path) == [
        f"enroot import -o {out}.partial.{_pid_of(tmp_path)} docker://nvcr.io#nvidia/pytorch:24.07-py3"
    ]
    assert Path(out).read_text() == "squash of docker://nvcr.io#nvidia/pytorch:24.07-py3\n"
    assert sorted(p.name for p in (tmp_path / "fsx" / "images").iterdir()) == [f".{SQSH_NAME}.lock", SQSH_NAME]
    # Later jobs: no import at all.
    assert _tool(env, IMAGE).stdout == out + "\n"
    assert len(_enroot_calls(tmp_path)) == 1


def _pid_of(tmp_path: Path) -> str:
    """The pid suffix of the one import's partial file (whichever job won the lock)."""
    line = _enroot_calls(tmp_path)[0]
    return line.split(".partial.", 1)[1].split()[0]


@pytest.mark.parametrize(
    "image,uri,name",
    [
        ("docker://nvcr.io#nvidia/pytorch:24.07-py3", "docker://nvcr.io#nvidia/pytorch:24.07-py3", SQSH_NAME),
        ("ubuntu:24.04", "docker://ubuntu:24.04", "ubuntu+24.04.sqsh"),
        ("library/ubuntu@sha256:abc", "docker://library/ubuntu@sha256:abc", "library+ubuntu+sha256+abc.sqsh"),
        ("localhost:5000/team/img:1", "docker://localhost:5000#team/img:1", "localhost+5000+team+img+1.sqsh"),
    ],
)
def test_registry_references_become_enroot_uris(tmp_path, env, image, uri, name):
    r = _tool(env, image)
    assert r.returncode == 0, r.stderr
    assert r.stdout == f"{tmp_path}/fsx/images/{name}\n"
    assert _enroot_calls(tmp_path)[0].endswith(f" {uri}")


def test_a_squash_file_path_is_used_as_it_is(tmp_path, env):
    sqsh = tmp_path / "fsx" / "images" / "test.sqsh"
    sqsh.write_text("squash")
    r = _tool(env, str(sqsh))
    assert (r.returncode, r.stdout) == (0, f"{sqsh}\n")
    assert _enroot_calls(tmp_path) == []
    r = _tool(env, str(tmp_path / "missing.sqsh"))
    assert r.returncode == 1 and "no such squash file" in r.stderr


def test_failed_import_leaves_nothing_half_written(tmp_path, env):
    (tmp_path / "bin" / "enroot").write_text('#!/bin/sh\necho "[ERROR] 401 Unauthorized" >&2\n: >"$3"\nexit 1\n')
    r = _tool(env, IMAGE)
    assert r.returncode == 1
    assert "401 Unauthorized" in r.stderr and "enroot import -o" in r.stderr
    assert [p.name for p in (tmp_path / "fsx" / "images").iterdir() if not p.name.startswith(".")] == []


def _gate_tree(tmp_path: Path, image: str) -> Path:
    c = ctx(fsx_root=str(tmp_path / "fsx" / ".gpu-cluster" / "demo"), container_image=image)
    base = tmp_path / "opt"
    for path, content in validation_files(c).items():
        f = base / path.lstrip("/").replace("opt/gpu-cluster/", "", 1)
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(content.replace("/opt/gpu-cluster", str(base)))
    (base / "bin").mkdir(exist_ok=True)
    (base / "lib").mkdir(exist_ok=True)
    shutil.copy(TOOL, base / "bin" / "gpu-cluster-image")
    return base


def _run_gate(
    tmp_path: Path, env: dict[str, str], base: Path, nodes: int = 2, down: str = ""
) -> tuple[subprocess.CompletedProcess, dict]:
    fakebin = tmp_path / "bin"
    for name, body in (
        ("srun", FAKE_GPU_SRUN),
        ("scontrol", FAKE_GPU_SCONTROL),
        ("sinfo", FAKE_SINFO),
        ("nvidia-smi", "#!/bin/sh\nexit 0\n"),
        ("fi_pingpong", "#!/bin/sh\nexit 0\n"),
    ):
        (fakebin / name).write_text(body)
        (fakebin / name).chmod(0o755)
    d = tmp_path / "usr" / "cuda-12.8" / "efa" / "test-cuda-12.8"
    d.mkdir(parents=True)
    for exe in ("all_reduce_perf", "alltoall_perf"):
        (d / exe).write_text("")
        (d / exe).chmod(0o755)
    # two nodes are one pair: enough for the image steps, and each gate run stays short
    env = dict(
        env,
        SLURM_JOB_ID="7",
        SLURM_JOB_NODELIST=f"n[1-{nodes}]",
        FAKE_NODES=" ".join(f"n{i}" for i in range(1, nodes + 1)),
        FAKE_BAD="",
        FAKE_LOG=str(tmp_path / "calls.log"),
        DATA=str(DATA),
        VALIDATION_CUDA_ROOT=str(tmp_path / "usr"),
        VALIDATION_PINGPONG_SERVER_WAIT="0",
        FAKE_CONTAINER_DOWN=down,
    )
    proc = subprocess.run(
        ["bash", str(base / "validation" / "gate.sh")], env=env, capture_output=True, text=True, timeout=300
    )
    root = tmp_path / "fsx" / ".gpu-cluster" / "demo" / "validation"
    report = json.loads((root / (root / "latest").read_text().strip() / "report.json").read_text())
    return proc, report


def _container_sruns(tmp_path: Path) -> list[str]:
    return [line for line in (tmp_path / "calls.log").read_text().splitlines() if "--container-image" in line]


def test_gate_imports_a_registry_image_once_and_runs_the_squash_file_by_name(tmp_path, env):
    proc, report = _run_gate(tmp_path, env, _gate_tree(tmp_path, IMAGE))
    torch = [
        (r["step"], r["verdict"]) for r in report["steps"] if r["step"] == "container" or r["step"].startswith("torch")
    ]
    assert torch == [("container", "GO"), ("torch_all_reduce", "GO"), ("torch_all_to_all", "GO")], (
        proc.stdout + proc.stderr
    )
    sqsh = f"{tmp_path}/fsx/images/{SQSH_NAME}"
    # one import for both the container step and the torch steps
    assert len(_enroot_calls(tmp_path)) == 1 and _enroot_calls(tmp_path)[0].startswith(
        f"enroot import -o {sqsh}.partial."
    )
    sruns = _container_sruns(tmp_path)
    assert len(sruns) == 3
    assert sruns[0] == (
        f"srun -N 2 --ntasks-per-node=1 --container-image={sqsh} --container-name=gpu-cluster-validation-7 "
        '--container-mounts=/fsx:/fsx sh -c echo "container-ok $(hostname -s)"'
    )
    for line in sruns:
        # never the registry reference (a pull per node and step), always the file, by name
        assert f"--container-image={sqsh} " in line and "--container-name=gpu-cluster-validation-7 " in line
        assert IMAGE not in line.replace(SQSH_NAME, "")


def test_gate_uses_a_squash_file_image_as_it_is(tmp_path, env):
    sqsh = tmp_path / "fsx" / "images" / "test.sqsh"
    sqsh.write_text("squash")
    proc, report = _run_gate(tmp_path, env, _gate_tree(tmp_path, str(sqsh)))
    assert _enroot_calls(tmp_path) == []
    sruns = _container_sruns(tmp_path)
    assert len(sruns) == 3 and all(f"--container-image={sqsh} " in line for line in sruns), proc.stderr
    assert [(r["step"], r["verdict"]) for r in report["steps"]][0] == ("container", "GO")


def test_gate_container_step_is_nogo_when_the_image_runs_on_fewer_nodes(tmp_path, env):
    sqsh = tmp_path / "fsx" / "images" / "test.sqsh"
    sqsh.write_text("squash")
    proc, report = _run_gate(tmp_path, env, _gate_tree(tmp_path, str(sqsh)), nodes=3, down="n2")
    step = report["steps"][0]
    assert (step["step"], step["nodes"], step["verdict"]) == ("container", ["n1", "n2", "n3"], "NO-GO"), proc.stderr
    assert step["reasons"] == ["the container ran on 2 of 3 node(s)"] and step["notes"] == ["n1", "n3"]
    assert report["verdict"] == "NO-GO"


def test_gate_reports_a_failed_import_as_the_reason(tmp_path, env):
    (tmp_path / "bin" / "enroot").write_text('#!/bin/sh\necho "[ERROR] 401 Unauthorized" >&2\nexit 1\n')
    proc, report = _run_gate(tmp_path, env, _gate_tree(tmp_path, IMAGE))
    torch = [r for r in report["steps"] if r["step"] == "container" or r["step"].startswith("torch")]
    assert [(r["step"], r["verdict"]) for r in torch] == [("container", "SKIPPED"), ("torch_all_reduce", "SKIPPED")]
    for r in torch:
        assert r["reasons"][0].startswith(
            f"cannot import {IMAGE} into a squash file on /fsx: gpu-cluster-image: enroot import"
        )
    assert _container_sruns(tmp_path) == []


def test_train_template_imports_once_and_names_its_container(tmp_path, env):
    """The users' multi-node template goes through the same helper."""
    from userdata import templating

    text = templating.render(
        "jobs/train-multinode.sbatch.j2",
        header="test",
        instance_type="p5.48xlarge",
        partition="train",
        gpus=8,
        tasks_per_node=8,
        cpus_per_task=24,
        job_dir="/fsx/jobs",
        run_launcher="/opt/gpu-cluster/bin/gpu-cluster-run",
        switches=True,
        switches_wait="00:15:00",
    )
    assert "/opt/gpu-cluster/bin/gpu-cluster-image" in text
    job = tmp_path / "train.sbatch"
    job.write_text(text.replace("/opt/gpu-cluster/bin/gpu-cluster-image", str(TOOL)))
    fakebin = tmp_path / "bin"
    (fakebin / "srun").write_text(f'#!/bin/sh\necho "srun $*" >>"{tmp_path}/srun.log"\n')
    (fakebin / "scontrol").write_text("#!/bin/sh\necho n1; echo n2\n")
    for f in ("srun", "scontrol"):
        (fakebin / f).chmod(0o755)
    r = subprocess.run(
        ["bash", str(job), "python", "train.py"],
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(env, IMAGE=IMAGE, SLURM_JOB_ID="9", SLURM_JOB_NODELIST="n[1-2]"),
    )
    assert r.returncode == 0, r.stderr
    sqsh = f"{tmp_path}/fsx/images/{SQSH_NAME}"
    assert len(_enroot_calls(tmp_path)) == 1
    sruns = (tmp_path / "srun.log").read_text().splitlines()
    mounts = "/fsx:/fsx,/opt/gpu-cluster/bin/gpu-cluster-run:/usr/local/bin/gpu-cluster-run:ro"
    assert f"--container-image={sqsh} --container-name=train-9 --container-mounts={mounts} python train.py" in sruns[0]
    assert sruns[1] == "srun --ntasks-per-node=1 enroot remove -f pyxis_train-9"
