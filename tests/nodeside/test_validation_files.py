"""The rendered validation job, its report logic, and the gate run against fake Slurm."""

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from nodeside import validation_report as vr
from nodeside import verdict
from tests.support.fake_slurm import DATA, TYPES, ctx, run_fake_gpu_gate
from tests.support.shellcheck import shellcheck
from tests.support.shipped_verdict import shipped_namespace
from userdata.validation_files import compact_python, validation_files

SCRIPTS = (
    "/opt/gpu-cluster/validation/gate.sh",
    "/opt/gpu-cluster/validation/first-boot.sbatch",
    "/opt/gpu-cluster/bin/gpu-cluster-validation",
)


# --- rendering -----------------------------------------------------------------------

# The rendered files are golden-tested with everything else a node gets, per catalog
# type, in tests/userdata/test_userdata_golden.py (one golden tree).


def test_rendering_is_byte_stable():
    assert validation_files(ctx()) == validation_files(ctx())


@pytest.mark.parametrize("itype", sorted(TYPES) + ["local"])
def test_scripts_pass_bash_n_and_shellcheck(itype, tmp_path, shellcheck_cache):
    c = (
        ctx(itype)
        if itype in TYPES
        else ctx(itype, gpus=0, vcpus=2, cpus_per_gpu=2, efa_count=0, efa_gbps=0, container_image="")
    )
    files = validation_files(c)
    for path in SCRIPTS:
        f = tmp_path / Path(path).name
        f.write_text(files[path])
        assert subprocess.run(["bash", "-n", str(f)]).returncode == 0
        for sc in shellcheck(["-s", "bash"], [str(f)], cache=shellcheck_cache):
            assert sc.returncode == 0, sc.stdout


def test_p5_job_uses_seed_launch_settings():
    files = validation_files(ctx())
    sbatch = files["/opt/gpu-cluster/validation/first-boot.sbatch"]
    assert "#SBATCH --ntasks-per-node=8\n#SBATCH --cpus-per-task=24\n#SBATCH --gres=gpu:8\n" in sbatch
    assert "#SBATCH --time=60\n" in sbatch and "#SBATCH --partition=train\n" in sbatch
    gate = files["/opt/gpu-cluster/validation/gate.sh"]
    read = gate_settings_as_read(files)
    assert read["SWEEP"] == ["-b", "8", "-e", "16G", "-f", "2", "-g", "1", "-c", "1", "-n", "50"]
    assert read["SINGLE_SWEEP"] == ["-b", "8", "-e", "1G", "-f", "2", "-g", "1", "-c", "1", "-n", "50"]
    assert read["IMAGE"] == ["/fsx/images/pytorch.sqsh"] and read["TASKS"] == ["8"] and read["CPT"] == ["24"]
    assert read["BUDGET"] == [str(60 * 60 - 120)] and read["TORCH_MAX_BYTES"] == [str(8 << 30)]
    # Pyxis registry images carry '#', which must not start a shell comment
    hashed = gate_settings_as_read(validation_files(ctx(container_image="registry#org/image:tag")))
    assert hashed["IMAGE"] == ["registry#org/image:tag"]
    # the nccl-tests directory is discovered (newest CUDA), never hard-coded
    assert "CUDA_ROOT=${VALIDATION_CUDA_ROOT:-/usr/local}" in gate
    assert '"$CUDA_ROOT/cuda-*/efa/test-cuda-*"' in gate and "sort -V | tail -n 1" in gate
    assert "cuda-13" not in gate and "cuda-12" not in gate
    code = "\n".join(ln for ln in gate.splitlines() if not ln.lstrip().startswith("#"))
    exports = re.findall(r"--export=\"?([^\" ]*)", code)
    assert exports and all(e.startswith("ALL,") for e in exports)  # never a bare list
    assert all("NCCL_DEBUG=INFO" in e for e in exports)
    # nothing forces IB or a network plugin on EFA [OFI-NCCL]
    assert not re.search(r"NCCL_NET\b|NCCL_NET_PLUGIN|NCCL_IB_|FI_PROVIDER", code)
    assert code.count("--mpi=pmix --export=") == 2  # single-node and pair nccl-tests launches


def test_every_test_launch_is_time_limited():
    gate = validation_files(ctx())["/opt/gpu-cluster/validation/gate.sh"]
    lines = gate.splitlines()
    for i, line in enumerate(lines):
        if line.lstrip().startswith(("#", "skip ")):
            continue  # comments and skip reasons only mention srun
        if re.search(r"\bsrun\b", line) and "--help" not in line and "srun --mpi=list" not in line:
            ok = "timeout" in line or lines[i - 1].rstrip().endswith("-- \\") or line.lstrip().startswith("--")
            assert ok, f"unbounded srun on line {i + 1}: {line}"
    assert "run_step pmix" in gate and "timeout --kill-after=30" in gate


def test_local_profile_has_no_gres_and_empty_image():
    files = validation_files(ctx("local", gpus=0, vcpus=2, cpus_per_gpu=2, efa_count=0, efa_gbps=0, container_image=""))
    sbatch = files["/opt/gpu-cluster/validation/first-boot.sbatch"]
    assert "--gres" not in sbatch and "#SBATCH --ntasks-per-node=1\n#SBATCH --cpus-per-task=2\n" in sbatch
    assert gate_settings_as_read(files)["IMAGE"] == [""]


def gate_settings_as_read(files):
    """The values gate.sh reads from config.json, as bash holds them (arrays split)."""
    import tempfile

    names = ("RESULTS", "GPUS", "TASKS", "CPT", "IMAGE", "SWEEP", "SINGLE_SWEEP", "TORCH_MAX_BYTES", "BUDGET")
    gate = files["/opt/gpu-cluster/validation/gate.sh"]
    head = gate[: gate.index("RUN_ID=")]  # the settings block, before anything runs
    with tempfile.TemporaryDirectory() as d:
        for path in (
            "/opt/gpu-cluster/validation/config.json",
            "/opt/gpu-cluster/lib/validation_report.py",
            "/opt/gpu-cluster/lib/verdict.py",
            "/opt/gpu-cluster/lib/pair_topology.py",
            "/opt/gpu-cluster/lib/instance_types.json",
        ):
            f = Path(d) / path.lstrip("/")
            f.parent.mkdir(parents=True, exist_ok=True)
            f.write_text(files[path])
        script = head.replace("/opt/gpu-cluster", f"{d}/opt/gpu-cluster")
        script += "".join(f'printf "%s\\0" {n} "${{{n}[@]}}"; printf "\\n"\n' for n in names)
        out = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True).stdout
    read = {}
    for line in out.splitlines():
        name, *values = line.split("\0")[:-1]
        read[name] = values
    return read


def test_config_carries_catalog_thresholds():
    cfg = json.loads(validation_files(ctx("p4d.24xlarge"))["/opt/gpu-cluster/validation/config.json"])
    assert cfg["thresholds"] == verdict.thresholds(400, 8, 4)
    assert cfg["fsx_root"] == "/fsx/.gpu-cluster/demo" and cfg["baseline_margin"] == 0.1


def test_missing_ctx_key_is_named():
    c = ctx()
    del c["efa_gbps"]
    with pytest.raises(KeyError, match="efa_gbps"):
        validation_files(c)


def test_shipped_python_is_compacted_but_equivalent(tmp_path):
    files = validation_files(ctx())
    shipped = files["/opt/gpu-cluster/lib/verdict.py"]
    assert shipped.startswith("# Generated by gpu-cluster from nodeside/verdict.py")
    assert '"""' not in shipped
    ns = shipped_namespace(files, tmp_path)
    for log in sorted(DATA.glob("*.log")):
        text = log.read_text()
        kw = dict(expect_transport="efa", expect_nics=32, min_algbw=60.0, max_latency_us=30.0)
        assert ns["evaluate"](text, **kw) == verdict.evaluate(text, **kw), log.name
    compile(files["/opt/gpu-cluster/lib/validation_report.py"], "validation_report.py", "exec")


def test_compact_python_keeps_code_drops_docs():
    out = compact_python('"""doc"""\ndef f():\n    """doc"""\n    return 1  # why\n', "x.py")
    ns = {}
    exec(out, ns)
    body = out.split("\n", 1)[1]  # after the generated-file header
    assert ns["f"]() == 1 and "doc" not in body and "why" not in body


@pytest.mark.parametrize("op,world", [("all_reduce", 16), ("all_to_all", 16), ("all_reduce", 2), ("all_to_all", 8)])
def test_torch_busbw_matches_nccl_tests_formula(op, world):
    # exec the rendered script without torch: torch is only imported inside main()
    ns = {"__name__": "bench"}
    exec(validation_files(ctx())["/opt/gpu-cluster/validation/torch_comm_bench.py"], ns)
    nccl_op = "alltoall" if op == "all_to_all" else op
    assert ns["busbw"](op, 100.0, world) == pytest.approx(100.0 * verdict.busbw_factor(nccl_op, world))
    assert list(ns["sizes"](1 << 20, 8 << 30))[-1] == 8 << 30


def test_total_gzip_size_is_reported_and_bounded():
    import gzip

    files = validation_files(ctx())
    blob = "".join(files[k] for k in sorted(files)).encode()
    # the node files travel in the S3 payload, not in the 16 KB of user data [EC2-UD];
    # the bound keeps the gate small next to the boot files it ships with (raised from
    # 20000 when the verdict and report programs gained their input checks, human output,
    # --version and eight more log shapes: 22081 bytes then; and again for the topology
    # pair selection, nodeside/pair_topology.py, and the per-level report: 25743 bytes)
    assert len(gzip.compress(blob, mtime=0)) < 26500


# --- report logic --------------------------------------------------------------------


def test_pairs_two_nodes_ring_and_blocks():
    assert vr.pairs(["a", "b"], {}) == [("a", "b", "within:default", None)]
    assert vr.pairs(["a", "b", "c"], {}) == [
        ("a", "b", "within:default", None),
        ("b", "c", "within:default", None),
        ("c", "a", "within:default", None),
    ]
    feats = vr.parse_features("a block-x,p5.48xlarge\nb block-x\nc block-y\nd block-y\n")
    assert vr.pairs(["a", "b", "c", "d"], feats) == [
        ("a", "b", "within:x", None),
        ("c", "d", "within:y", None),
        ("a", "c", "across:x/y", None),
    ]


def rec(step, nodes, verdict_, kind="within:default", value=None, figure="algbw", reasons=None):
    return {
        "step": step,
        "nodes": nodes,
        "kind": kind,
        "verdict": verdict_,
        "value": value,
        "figure": figure,
        "reasons": reasons or ([] if verdict_ == "GO" else ["slow"]),
    }


def test_blame_names_the_node_whose_every_pair_fails():
    ring = [
        rec("all_reduce", ["a", "b"], "GO"),
        rec("all_reduce", ["b", "c"], "NO-GO"),
        rec("all_reduce", ["c", "a"], "NO-GO"),
    ]
    assert vr.blame(ring) == {"c": "all_reduce NO-GO with b: slow"}


def test_blame_nobody_when_everything_fails_or_only_across_blocks():
    assert vr.blame([rec("all_reduce", ["a", "b"], "NO-GO")]) == {}
    across = [
        rec("all_reduce", ["a", "b"], "GO", kind="within:x"),
        rec("all_reduce", ["a", "c"], "NO-GO", kind="across:x/y"),
    ]
    assert vr.blame(across) == {}


def test_pair_groups_report_within_and_across_blocks_separately():
    recs = [
        rec("all_reduce", ["a", "b"], "GO", kind="within:x", value=370.0),
        rec("all_reduce", ["c", "d"], "GO", kind="within:y", value=360.0),
        rec("all_reduce", ["a", "c"], "NO-GO", kind="across:x/y", value=200.0),
        rec("pingpong", ["a", "b"], "SKIPPED", kind="within:x"),
    ]
    assert vr.groups(recs) == {
        "within:x": {"all_reduce": {"GO": 1, "NO-GO": 0, "median": 370.0}},
        "within:y": {"all_reduce": {"GO": 1, "NO-GO": 0, "median": 360.0}},
        "across:x/y": {"all_reduce": {"GO": 0, "NO-GO": 1, "median": 200.0}},
    }


def test_blame_single_node_failure():
    assert vr.blame([rec("single", ["a"], "NO-GO", kind="", reasons=["Out of bounds values : 2 FAILED"])]) == {
        "a": "single-node all_reduce NO-GO: Out of bounds values : 2 FAILED"
    }


CFG = {
    "cluster_name": "demo",
    "instance_type": "p5.48xlarge",
    "baseline_margin": 0.1,
    "thresholds": verdict.thresholds(3200, 8, 32),
}


def test_limit_is_catalog_then_tightened_by_baseline():
    assert vr.limit_for("all_reduce", CFG, {}) == (240.0, "catalog")
    assert vr.limit_for("all_reduce", CFG, {"all_reduce.algbw": 370.0}) == (333.0, "baseline 370.0 -/+ 10%")
    assert vr.limit_for("all_reduce", CFG, {"all_reduce.algbw": 200.0}) == (240.0, "catalog")
    assert vr.limit_for("pingpong", CFG, {"pingpong.latency_us": 10.0}) == (11.0, "baseline 10.0 -/+ 10%")
    assert vr.limit_for("single", CFG, {}) == (None, None)


def test_zero_limits_bound_nothing_and_do_not_reach_the_engine():
    # an instance type without EFA renders zero floors; verdict.evaluate refuses them
    cfg = {**CFG, "thresholds": verdict.thresholds(0, 1, 0)}
    assert vr.limit_for("all_reduce", cfg, {}) == (None, None)
    assert vr.limit_for("single", CFG, {"single.busbw": 0.0}) == (None, None)
    text = (DATA / "efa_p5_allreduce_16g.log").read_text()
    assert vr.check_step(cfg, {}, "all_reduce", text)["verdict"] == "GO"


def test_container_step_needs_the_image_running_on_every_node():
    log = "# nodes=2 image=/fsx/images/test.sqsh (/fsx/images/test.sqsh)\ncontainer-ok ip-10-0-0-1\n"
    r = vr.check_step(CFG, {}, "container", log + "container-ok ip-10-0-0-2\n")
    assert (r["verdict"], r["notes"]) == ("GO", ["ip-10-0-0-1", "ip-10-0-0-2"])
    r = vr.check_step(CFG, {}, "container", log)
    assert (r["verdict"], r["reasons"]) == ("NO-GO", ["the container ran on 1 of 2 node(s)"])


def test_check_step_applies_baseline_drop():
    text = (DATA / "efa_p5_allreduce_16g.log").read_text()
    assert vr.check_step(CFG, {}, "all_reduce", text)["verdict"] == "GO"
    r = vr.check_step(CFG, {"all_reduce.algbw": 300.0}, "all_reduce", text)
    assert r["reasons"] == ["algbw 259.78 GB/s at 17179869184 bytes below 270.0 GB/s"]
    # pmix: the two-task step's log; run_step appends the exit status line only on failure
    assert vr.check_step(CFG, {}, "pmix", "# two-task PMIx step on a,b\n")["verdict"] == "GO"
    failed = (
        "# srun\nsrun: error: MPI: Unable to load any plugin\ngate: command exit status 1 (124: killed after 60s)\n"
    )
    r = vr.check_step(CFG, {}, "pmix", failed)
    assert (r["verdict"], r["reasons"]) == (
        "NO-GO",
        ["srun --mpi=pmix -n2 true failed: srun: error: MPI: Unable to load any plugin"],
    )
    # the old check's evidence (the plugin listed) is no longer enough
    listed = "MPI plugin types are...\n\tpmix\ngate: command exit status 1 (124: killed after 60s)\n"
    assert vr.check_step(CFG, {}, "pmix", listed)["verdict"] == "NO-GO"


class FakeRun:
    def __init__(self):
        self.calls = []

    def __call__(self, argv, **kw):
        self.calls.append(argv)
        return subprocess.CompletedProcess(argv, 0, "", "")


def write_steps(run_dir, records):
    run_dir.mkdir(parents=True)
    (run_dir / "run.json").write_text(json.dumps({"run_id": run_dir.name, "nodes": ["a", "b", "c"]}))
    (run_dir / "steps.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))


def test_build_records_baseline_then_compares_and_drains(tmp_path):
    root = tmp_path / "validation"
    good = [
        rec("pmix", ["a", "b", "c"], "GO", kind=""),
        rec("all_reduce", ["a", "b"], "GO", value=370.0),
        rec("all_reduce", ["b", "c"], "GO", value=360.0),
        rec("all_reduce", ["c", "a"], "GO", value=380.0),
    ]
    write_steps(root / "r1", good)
    first = vr.build(CFG, str(root / "r1"), str(root), now="t1")
    assert first["verdict"] == "GO" and first["baseline"]["recorded"]
    base = json.loads((root / "baseline.json").read_text())
    assert base["figures"] == {"all_reduce.algbw": 370.0} and base["run_id"] == "r1"
    assert (root / "latest").read_text() == "r1\n"

    bad = good[:2] + [
        rec("all_reduce", ["b", "c"], "NO-GO", value=100.0, reasons=["below baseline"]),
        rec("all_reduce", ["c", "a"], "NO-GO", value=100.0, reasons=["below baseline"]),
    ]
    write_steps(root / "r2", bad)
    fake = FakeRun()
    second = vr.build(CFG, str(root / "r2"), str(root), do_drain=True, runner=fake, now="t2")
    assert second["verdict"] == "NO-GO" and second["baseline"] == {
        "path": str(root / "baseline.json"),
        "run_id": "r1",
        "applied": True,
    }
    assert fake.calls == [
        [
            "scontrol",
            "update",
            "nodename=c",
            "state=drain",
            "reason=gpu-cluster validation: all_reduce NO-GO with b: below baseline",
        ]
    ]
    assert json.loads((root / "baseline.json").read_text())["run_id"] == "r1"  # kept
    summary = (root / "r2" / "summary.txt").read_text()
    assert summary.startswith("gpu-cluster validation r2: NO-GO\n")
    assert "bad node c: all_reduce NO-GO with b: below baseline -> drained" in summary


def test_gpu_cluster_whose_gpu_steps_never_ran_is_nogo(tmp_path):
    # A p5 cluster where nccl-tests and fi_pingpong were missing: PMIx passed, every
    # GPU/EFA step was skipped. Nothing was shown, so the gate must not say GO.
    root = tmp_path / "validation"
    skipped = [rec("pmix", ["a", "b"], "GO", kind="")] + [
        rec(step, ["a", "b"], "SKIPPED", reasons=["no nccl-tests directory under /usr/local"])
        for step in ("single", "all_reduce", "alltoall", "pingpong")
    ]
    write_steps(root / "r", skipped)
    r = vr.build({**CFG, "gpus": 8}, str(root / "r"), str(root), now="t")
    assert r["verdict"] == "NO-GO"
    assert r["reasons"] == [
        f"{step} never ran (every attempt was skipped, see above): a p5.48xlarge cluster is not validated until it does"
        for step in ("single", "all_reduce", "alltoall", "pingpong")
    ]
    assert not (root / "baseline.json").exists()
    # The same records on a profile without GPUs (the local cluster) are GO with the skips listed.
    write_steps(root / "r0", skipped)
    r0 = vr.build({**CFG, "gpus": 0}, str(root / "r0"), str(root), now="t")
    assert r0["verdict"] == "GO" and len(r0["skipped"]) == 4


def test_build_without_steps_is_nogo(tmp_path):
    (tmp_path / "validation" / "r").mkdir(parents=True)
    r = vr.build(CFG, str(tmp_path / "validation" / "r"), str(tmp_path / "validation"), now="t")
    assert r["verdict"] == "NO-GO" and r["reasons"][0].startswith("no step recorded")


# --- the gate against fake Slurm on a CPU-only node ----------------------------------

# FAKE_MPI=pmix: the PMIx step runs; nolib: Slurm's words without the PMIx library (as
# Slurm 22.05 printed them on this machine; the plugin is still listed by --mpi=list)
FAKE_SRUN = """#!/usr/bin/env bash
if [ "$1" = "--mpi=list" ]; then printf 'MPI plugin types are...\\n\\tnone\\n\\tpmix\\n'; exit 0; fi
if [ "$*" = "--mpi=pmix -n2 true" ]; then
  [ "$FAKE_MPI" = pmix ] && exit 0
  echo "srun: error:  mpi/pmix_v4: init: (null) [0]: mpi_pmix.c:195: pmi/pmix: can not load PMIx library" >&2
  echo "srun: error: Couldn't load specified plugin name for mpi/pmix: Plugin init() callback failed" >&2
  exit 1
fi
echo "unexpected srun $*" >&2; exit 1
"""
FAKE_SCONTROL = """#!/usr/bin/env bash
case "$1 $2" in
  "show hostnames") printf 'n1\\nn2\\n' ;;
  *) echo "$*" >>"$FAKE_LOG" ;;
esac
"""


def fake_gate(tmp_path, mpi, image=""):
    c = ctx(
        "local",
        gpus=0,
        vcpus=2,
        cpus_per_gpu=2,
        efa_count=0,
        efa_gbps=0,
        container_image=image,
        fsx_root=str(tmp_path / "fsx"),
    )
    base = tmp_path / "opt"
    for path, content in validation_files(c).items():
        f = base / path.lstrip("/").replace("opt/gpu-cluster/", "", 1)
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(content.replace("/opt/gpu-cluster", str(base)))
    fakebin = tmp_path / "bin"
    fakebin.mkdir()
    for name, body in (("srun", FAKE_SRUN), ("scontrol", FAKE_SCONTROL)):
        (fakebin / name).write_text(body)
        (fakebin / name).chmod(0o755)
    if shutil.which("nvidia-smi"):
        pytest.skip("this host has nvidia-smi: the CPU-only path is not what runs")
    env = dict(
        os.environ,
        PATH=f"{fakebin}:{os.environ['PATH']}",
        SLURM_JOB_ID="42",
        SLURM_JOB_NODELIST="n[1-2]",
        FAKE_MPI=mpi,
        FAKE_LOG=str(tmp_path / "scontrol.log"),
    )
    proc = subprocess.run(
        ["bash", str(base / "validation" / "gate.sh")], env=env, capture_output=True, text=True, timeout=120
    )
    root = tmp_path / "fsx" / "validation"
    run_id = (root / "latest").read_text().strip()
    return proc, json.loads((root / run_id / "report.json").read_text()), run_id


# srun without Pyxis: the container step is skipped for either reason, the rest runs
@pytest.mark.parametrize(
    "image,reason",
    [
        ("", "no container_image configured"),
        ("/fsx/images/pytorch.sqsh", "pyxis not loaded: srun --help has no --container-image"),
    ],
)
def test_gate_on_cpu_only_cluster_runs_pmix_and_skips_the_rest(tmp_path, image, reason):
    proc, report, run_id = fake_gate(tmp_path, "pmix", image)
    assert proc.returncode == 0, proc.stderr
    assert run_id.endswith("-42") and report["nodes"] == ["n1", "n2"]
    steps = [(r["step"], r["verdict"]) for r in report["steps"]]
    assert steps == [
        ("container", "SKIPPED"),
        ("pmix", "GO"),
        ("single", "SKIPPED"),
        ("all_reduce", "SKIPPED"),
        ("torch_all_reduce", "SKIPPED"),
        ("pingpong", "SKIPPED"),
    ]
    assert report["steps"][0]["reasons"] == [reason] and report["steps"][0]["nodes"] == ["n1", "n2"]
    assert report["steps"][2]["reasons"][0].startswith("no nvidia-smi or no GPU on")
    assert report["verdict"] == "GO" and not (tmp_path / "fsx" / "validation" / "baseline.json").exists()


def test_gate_without_the_pmix_library_stops_and_is_nogo(tmp_path):
    # the plugin is listed (the old `srun --mpi=list` check passed here); the step cannot run
    proc, report, _ = fake_gate(tmp_path, "nolib")
    steps = [(r["step"], r["verdict"]) for r in report["steps"]]
    assert steps == [("container", "SKIPPED"), ("pmix", "NO-GO"), ("single", "SKIPPED")]
    assert report["verdict"] == "NO-GO"
    assert report["steps"][1]["reasons"] == [
        "srun --mpi=pmix -n2 true failed: srun: error:  mpi/pmix_v4: init: (null) [0]: mpi_pmix.c:195: "
        "pmi/pmix: can not load PMIx library"
    ]


def test_status_command_reads_latest(tmp_path):
    fake_gate(tmp_path, "pmix")
    cfg = tmp_path / "opt" / "validation" / "config.json"
    out = subprocess.run(
        ["python3", "-m", "nodeside.validation_report", "--config", str(cfg), "status"], capture_output=True, text=True
    )
    assert out.returncode == 0
    assert re.match(r"gpu-cluster validation \d{8}T\d{6}Z-42: GO\n", out.stdout)
    assert "SKIPPED single" in out.stdout


def test_status_command_includes_the_health_records(tmp_path):
    """`gpu-cluster-validation status` on the controller: the gate's verdict, then each
    node's last health record (state, time, drain reason), in text and in --json."""
    fake_gate(tmp_path, "pmix")
    cfg = tmp_path / "opt" / "validation" / "config.json"
    health = Path(json.loads(cfg.read_text())["fsx_root"]) / "health"
    health.mkdir(parents=True, exist_ok=True)
    bad = {
        "node": "n2",
        "time": "2026-12-01T11:57:00Z",
        "state": "unhealthy",
        "reason": "gpu-cluster health: gpu count 7 of 8 (nvidia-smi -L)",
        "checks": [{"check": "gpu-count", "status": "fail", "detail": "gpu count 7 of 8 (nvidia-smi -L)"}],
    }
    (health / "n2.json").write_text(json.dumps(bad))
    (health / "n1.json").write_text(json.dumps({"node": "n1", "time": "2026-12-01T11:58:00Z", "state": "healthy"}))
    argv = ["python3", "-m", "nodeside.validation_report", "--config", str(cfg), "status"]
    out = subprocess.run(argv, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[-3:] == [
        "node health (2 record(s)):",
        "  n1: healthy (2026-12-01T11:58:00Z)",
        "  n2: unhealthy (2026-12-01T11:57:00Z): gpu-cluster health: gpu count 7 of 8 (nvidia-smi -L)",
    ]
    doc = json.loads(subprocess.run([*argv, "--json"], capture_output=True, text=True).stdout)
    assert doc["verdict"] == "GO" and doc["health"]["n2"]["failed"] == ["gpu count 7 of 8 (nvidia-smi -L)"]


# --- the gate against fake Slurm and fake GPU tools ----------------------------------


def test_gate_gpu_path_finds_and_drains_the_bad_node(tmp_path):
    # two CUDA builds: the newest is used
    proc, report = run_fake_gpu_gate(tmp_path, ["n1", "n2", "n3", "n4"], cuda=("12.8", "13.2"), FAKE_BAD="n3")
    got = [(r["step"], "+".join(r["nodes"]), r["verdict"]) for r in report["steps"]]
    assert got[:6] == [
        ("container", "n1+n2+n3+n4", "GO"),
        ("pmix", "n1+n2+n3+n4", "GO"),
        ("single", "n1", "GO"),
        ("single", "n2", "GO"),
        ("single", "n3", "GO"),
        ("single", "n4", "GO"),
    ], proc.stdout + proc.stderr
    # the image's own hostname answers from every node (the fake srun plays Pyxis)
    assert report["steps"][0]["notes"] == ["n1", "n2", "n3", "n4"]
    host = [g for g in got if g[0] in ("all_reduce", "alltoall")]
    assert host == [
        ("all_reduce", "n1+n2", "GO"),
        ("alltoall", "n1+n2", "GO"),
        ("all_reduce", "n2+n3", "NO-GO"),
        ("alltoall", "n2+n3", "GO"),
        ("all_reduce", "n3+n4", "NO-GO"),
        ("alltoall", "n3+n4", "GO"),
        ("all_reduce", "n4+n1", "GO"),
        ("alltoall", "n4+n1", "GO"),
        # n3 had no pair that measured well: measured again with n1, which had
        ("all_reduce", "n3+n1", "NO-GO"),
        ("alltoall", "n3+n1", "GO"),
    ]
    assert [g for g in got if g[0].startswith("torch")] == [
        ("torch_all_reduce", "n1+n2", "GO"),
        ("torch_all_to_all", "n1+n2", "GO"),
    ]
    assert [g for g in got if g[0] == "pingpong"] == [("pingpong", "n1+n2", "GO"), ("pingpong", "n4+n1", "GO")]
    assert report["verdict"] == "NO-GO"
    assert set(report["blamed_nodes"]) == {"n3"}
    assert report["pair_groups"]["within:a"]["all_reduce"] == {"GO": 2, "NO-GO": 2, "median": 220.25}
    calls = (tmp_path / "calls.log").read_text()
    assert "/cuda-13.2/efa/test-cuda-13.2/all_reduce_perf" in calls and "cuda-12.8" not in calls
    assert "--cpus-per-task=24" in calls and "--export=ALL,LD_LIBRARY_PATH=" in calls
    assert "scontrol update nodename=n3 state=drain reason=gpu-cluster validation: all_reduce NO-GO" in calls
    assert "nodename=n1" not in calls and "nodename=n2" not in calls


def test_gate_names_the_job_nodes_by_name_whatever_slurm_order(tmp_path):
    # Slurm lists dynamic nodes in registration order (the faithful lane saw
    # ip-...-12,ip-...-11): the report names them in one order every run.
    proc, report = run_fake_gpu_gate(tmp_path, ["n10", "n2", "n1"])
    assert report["nodes"] == ["n1", "n2", "n10"], proc.stdout + proc.stderr
    assert [("+".join(r["nodes"])) for r in report["steps"][:2]] == ["n1+n2+n10"] * 2


# --- settings: what gate.sh and the CLI read from config.json --------------------------


def test_settings_prints_values_one_per_line_and_refuses_unknown_keys(tmp_path):
    cfg = tmp_path / "config.json"
    cfg.write_text(validation_files(ctx())["/opt/gpu-cluster/validation/config.json"])
    out = subprocess.run(
        [
            "python3",
            "-m",
            "nodeside.validation_report",
            "--config",
            str(cfg),
            "settings",
            "partition",
            "gate.timeouts.nccl",
        ],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0 and out.stdout == "train\n900\n"
    # nothing printed when any key is unknown or not a plain value: the gate's reads fail
    for key in ("gate.nope", "gate.timeouts", "partition.x"):
        out = subprocess.run(
            ["python3", "-m", "nodeside.validation_report", "--config", str(cfg), "settings", "partition", key],
            capture_output=True,
            text=True,
        )
        assert out.returncode == 2 and out.stdout == "" and f"has no {key}" in out.stderr


def test_gate_stops_before_any_step_when_config_lacks_a_setting(tmp_path):
    files = validation_files(ctx(fsx_root=str(tmp_path / "fsx")))
    cfg = json.loads(files["/opt/gpu-cluster/validation/config.json"])
    del cfg["gate"]["torch_max_bytes"]
    files["/opt/gpu-cluster/validation/config.json"] = json.dumps(cfg)
    base = tmp_path / "opt"
    for path, content in files.items():
        f = base / path.lstrip("/").replace("opt/gpu-cluster/", "", 1)
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(content.replace("/opt/gpu-cluster", str(base)))
    proc = subprocess.run(["bash", str(base / "validation" / "gate.sh")], capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0 and "has no gate.torch_max_bytes" in proc.stderr
    assert not (tmp_path / "fsx").exists()


# --- the join gate: newcomers against one healthy partner ----------------------------


def test_join_pairs_each_newcomer_with_the_partner_else_a_ring_of_newcomers():
    assert vr.join_pairs(["n5", "n6", "n1"], ["n5", "n6"], "n1") == [
        ("n5", "n1", "join", None),
        ("n6", "n1", "join", None),
    ]
    # the partner failed its own single-node check (not in nodes): newcomers pair among themselves
    assert vr.join_pairs(["n5", "n6"], ["n5", "n6"], "n1") == [("n5", "n6", "within:default", None)]


def test_join_outcome_fails_only_newcomers_and_names_check_and_log():
    records = [
        dict(rec("single", ["n5"], "GO"), log="/l/single-n5.log"),
        dict(rec("single", ["n6"], "GO"), log="/l/single-n6.log"),
        dict(rec("single", ["n1"], "GO"), log="/l/single-n1.log"),
        dict(rec("all_reduce", ["n5", "n1"], "GO", kind="join"), log="/l/a.log"),
        dict(rec("all_reduce", ["n6", "n1"], "NO-GO", kind="join", reasons=["algbw 20 < 90"]), log="/l/b.log"),
    ]
    assert vr.join_outcome(records, ["n5", "n6"], 8) == {"n6": "all_reduce NO-GO on n6+n1: algbw 20 < 90; log /l/b.log"}
    # a GPU newcomer whose single-node check never ran does not pass
    assert vr.join_outcome(records[1:], ["n5"], 8) == {"n5": "single never ran on this node (see report.json)"}
