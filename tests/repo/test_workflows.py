""".github/workflows: GitHub's workflow schema [GHA-SCHEMA], zizmor's audits [ZIZMOR], pins
[GHA-PINS], permissions, and the shell and JavaScript the review workflow runs, executed here."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))
REVIEW = ROOT / ".github" / "workflows" / "review.yml"
# The first line of `make diff ... FORMAT=markdown` (offline/review.py): the comment step
# finds its own comment again by it.
MARKER = "<!-- gpu-cluster-review -->"
STACKS = sorted(p.name[len("Pulumi.") : -len(".yaml")] for p in ROOT.glob("Pulumi.*.yaml"))
USES = re.compile(r"^\s*(?:-\s+)?uses:\s*(\S+)(.*)$")
PINNED = re.compile(r"^[\w.-]+/[\w.-]+(?:/[\w./-]+)?@[0-9a-f]{40}$")
VERSION_COMMENT = re.compile(r"^\s+# v\d+\.\d+\.\d+$")


def _tool(name: str) -> str:
    """A console script of this interpreter's environment (the hash-locked dev set)."""
    beside = Path(sys.executable).parent / name
    found = str(beside) if beside.exists() else shutil.which(name)
    assert found, f"{name} is not installed: pip install --require-hashes -r requirements-dev.txt"
    return found


def _load(path: Path) -> dict:
    # YAML 1.1 reads the bare key `on` as True; GitHub reads it as the string.
    doc = yaml.safe_load(path.read_text())
    if True in doc:
        doc["on"] = doc.pop(True)
    return doc


@pytest.fixture(scope="module")
def review() -> dict:
    return _load(REVIEW)


def _steps(job: dict) -> dict[str, dict]:
    return {s.get("id") or s.get("name") or s.get("uses"): s for s in job["steps"]}


def test_workflows_exist():
    assert [p.name for p in WORKFLOWS] == ["review.yml"]


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_schema(path):
    proc = subprocess.run(
        [_tool("check-jsonschema"), "--builtin-schema", "vendor.github-workflows", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_schema_rejects_a_broken_workflow(tmp_path):
    """The schema check can fail: a permission level GitHub does not know."""
    bad = tmp_path / "bad.yml"
    bad.write_text(REVIEW.read_text().replace("contents: read # check out the code", "contents: maybe", 1))
    proc = subprocess.run(
        [_tool("check-jsonschema"), "--builtin-schema", "vendor.github-workflows", str(bad)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1 and "maybe" in proc.stdout + proc.stderr


def _zizmor(*paths: Path) -> subprocess.CompletedProcess:
    # Offline: no GitHub API here; the auditor persona reports everything, even the
    # findings zizmor's default persona keeps back as likely false positives.
    return subprocess.run(
        [_tool("zizmor"), "--offline", "--no-progress", "--persona", "auditor", "--format", "json", *map(str, paths)],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_zizmor_no_findings():
    proc = _zizmor(*WORKFLOWS)
    findings = json.loads(proc.stdout or "[]")
    assert findings == [] and proc.returncode == 0, json.dumps(findings, indent=1)[:4000] + proc.stderr


def test_zizmor_flags_template_injection(tmp_path):
    """zizmor can fail here: the base ref spliced into the shell script."""
    text = REVIEW.read_text()
    spliced = text.replace('BASE="origin/$BASE_REF"', 'BASE="origin/${{ github.head_ref }}"')
    assert spliced != text
    bad = tmp_path / ".github" / "workflows" / "review.yml"
    bad.parent.mkdir(parents=True)
    bad.write_text(spliced)
    proc = _zizmor(bad)
    idents = {f["ident"] for f in json.loads(proc.stdout)}
    assert "template-injection" in idents and proc.returncode != 0


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_every_action_pinned_to_a_commit(path):
    """A tag can be moved to other code; a full commit id cannot. The `# vX.Y.Z` comment
    says which release the commit is, and docs/sources.md where that was checked."""
    sources = (ROOT / "docs" / "sources.md").read_text()
    uses = [m for line in path.read_text().splitlines() if (m := USES.match(line))]
    assert uses
    for m in uses:
        ref, comment = m.group(1), m.group(2)
        assert PINNED.match(ref), ref
        assert VERSION_COMMENT.match(comment), f"{ref}: no `# vX.Y.Z` comment"
        assert ref.split("@")[1] in sources, f"{ref}: commit not recorded in docs/sources.md"


def test_least_permissions(review):
    assert review["permissions"] == {}
    assert review["jobs"]["check"]["permissions"] == {"contents": "read", "pull-requests": "write"}
    assert review["jobs"]["preview"]["permissions"] == {
        "contents": "read",
        "pull-requests": "write",
        "id-token": "write",
    }


def test_no_expressions_in_code(review):
    """Expressions reach shell and JavaScript through env only (a branch name or title
    spliced into code is code)."""
    for job in review["jobs"].values():
        for step in job["steps"]:
            code = step.get("run", "") + (step.get("with") or {}).get("script", "")
            assert "${{" not in code, step.get("name")


def test_checkouts_keep_no_credentials(review):
    for job in review["jobs"].values():
        for step in job["steps"]:
            if step.get("uses", "").startswith("actions/checkout@"):
                assert step["with"]["persist-credentials"] is False


def test_check_job(review):
    job = review["jobs"]["check"]
    assert review["on"] == {"pull_request": None}
    assert review["concurrency"] == {
        "group": "review-${{ github.event.pull_request.number }}",
        "cancel-in-progress": True,
    }
    steps = job["steps"]
    assert steps[0]["with"]["fetch-depth"] == 0  # the base branch must be there to diff against
    assert steps[1]["with"]["python-version"] == "3.11"
    assert steps[2]["run"] == "make check"
    diff = _steps(job)["diff"]
    assert diff["env"] == {"BASE_REF": "${{ github.base_ref }}"}
    assert 'make diff BASE="origin/$BASE_REF" FORMAT=markdown OUT=review.md' in diff["run"].splitlines()
    comment = steps[-1]
    assert comment["uses"].startswith("actions/github-script@")
    assert comment["env"]["REVIEW_MARKER"] == MARKER and comment["env"]["REVIEW_FILE"] == "review.md"
    # Forks get a read-only token; their diff stays in the job summary.
    assert "github.event.pull_request.head.repo.full_name == github.repository" in comment["if"]


def test_marker_matches_the_diff_command():
    from offline import review as review_mod

    assert review_mod.MARKER == MARKER


def test_preview_job(review):
    job = review["jobs"]["preview"]
    assert job["strategy"]["matrix"] == {"stack": STACKS} and STACKS == ["dev", "prod", "smoke"]
    steps = _steps(job)
    gated = [s for s in job["steps"] if s.get("id") != "gate"]
    assert job["steps"][0]["id"] == "gate"
    assert all(s["if"] == "steps.gate.outputs.enabled == 'true'" for s in gated)
    aws = next(s for s in gated if s.get("uses", "").startswith("aws-actions/configure-aws-credentials@"))
    assert aws["with"]["role-to-assume"] == "${{ vars.GPU_CLUSTER_PREVIEW_ROLE_ARN }}"
    assert aws["with"]["aws-region"] == "${{ steps.venv.outputs.region }}"
    pulumi = next(s for s in gated if s.get("uses", "").startswith("pulumi/actions@"))
    assert pulumi["with"]["command"] == "preview"
    assert pulumi["with"]["diff"] is True and pulumi["with"]["comment-on-pr"] is True
    assert pulumi["with"]["policyPacks"] == "policy/"
    assert pulumi["with"]["stack-name"].endswith("${{ matrix.stack }}")
    assert (
        "venv/bin/pip install -q --disable-pip-version-check --require-hashes -r requirements.txt"
        in (steps["venv"]["run"])
    )


def _run_step(script: str, env: dict[str, str], tmp_path: Path) -> tuple[subprocess.CompletedProcess, str]:
    out = tmp_path / "github_output"
    out.write_text("")
    proc = subprocess.run(
        ["bash", "-eo", "pipefail", "-c", script],
        env={"PATH": os.environ["PATH"], "GITHUB_OUTPUT": str(out), **env},
        capture_output=True,
        text=True,
        timeout=30,
        cwd=ROOT,
    )
    return proc, out.read_text()


@pytest.mark.parametrize(
    ("role", "head", "enabled", "notice"),
    [
        ("", "org/gpu-cluster", "false", "GPU_CLUSTER_PREVIEW_ROLE_ARN is not set"),
        ("arn:aws:iam::123456789012:role/preview", "someone/gpu-cluster", "false", "pull request from a fork"),
        ("arn:aws:iam::123456789012:role/preview", "org/gpu-cluster", "true", None),
    ],
)
def test_preview_gate(review, tmp_path, role, head, enabled, notice):
    gate = _steps(review["jobs"]["preview"])["gate"]
    assert set(gate["env"]) == {"ROLE_ARN", "HEAD_REPO", "THIS_REPO"}
    proc, outputs = _run_step(
        gate["run"], {"ROLE_ARN": role, "HEAD_REPO": head, "THIS_REPO": "org/gpu-cluster"}, tmp_path
    )
    assert proc.returncode == 0, proc.stderr
    assert outputs == f"enabled={enabled}\n"
    if notice:
        assert proc.stdout.startswith("::notice title=pulumi preview skipped::") and notice in proc.stdout
    else:
        assert proc.stdout == ""


def test_preview_region_from_stack_file(review, tmp_path):
    """The region line of the venv step, run against each shipped stack file."""
    run = _steps(review["jobs"]["preview"])["venv"]["run"]
    region_lines = [line for line in run.splitlines() if "region" in line]
    python_dir = str(Path(sys.executable).parent)
    script = "\n".join(region_lines).replace("venv/bin/python", sys.executable)
    for stack in STACKS:
        expected = yaml.safe_load((ROOT / f"Pulumi.{stack}.yaml").read_text())["config"]["aws:region"]
        proc, outputs = _run_step(script, {"STACK": stack, "PATH": python_dir + ":" + os.environ["PATH"]}, tmp_path)
        assert proc.returncode == 0, proc.stderr
        assert outputs == f"region={expected}\n"


# --- the comment step's JavaScript, run under node with a recording GitHub client ------

HARNESS = r"""
const fs = require('fs');
const state = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'));
const calls = [];
const github = {
  paginate: async (fn, args) => { calls.push(['list', args.issue_number]); return state.comments; },
  rest: { issues: {
    listComments: 'listComments',
    updateComment: async (a) => { calls.push(['update', a.comment_id, a.body]); },
    createComment: async (a) => { calls.push(['create', a.issue_number, a.body]); },
  } },
};
const core = { setFailed: (m) => { calls.push(['failed', m]); } };
const context = { repo: { owner: 'org', repo: 'gpu-cluster' }, payload: { pull_request: { number: 7 } } };
const script = fs.readFileSync(process.argv[3], 'utf8');
const AsyncFunction = Object.getPrototypeOf(async function () {}).constructor;
new AsyncFunction('require', 'github', 'context', 'core', script)(require, github, context, core)
  .then(() => console.log(JSON.stringify(calls)))
  .catch((e) => { console.error(e); process.exit(1); });
"""


def _comment(review, tmp_path: Path, body: str, comments: list[dict]) -> list:
    step = review["jobs"]["check"]["steps"][-1]
    (tmp_path / "review.md").write_text(body)
    (tmp_path / "state.json").write_text(json.dumps({"comments": comments}))
    (tmp_path / "script.js").write_text(step["with"]["script"])
    (tmp_path / "harness.js").write_text(HARNESS)
    proc = subprocess.run(
        ["node", "harness.js", "state.json", "script.js"],
        cwd=tmp_path,
        env={"PATH": os.environ["PATH"], **step["env"]},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


needs_node = pytest.mark.skipif(shutil.which("node") is None, reason="node (Debian nodejs) not installed")


@needs_node
def test_comment_created_once_then_updated(review, tmp_path):
    body = f"{MARKER}\n## Review\nno changes\n"
    others = [{"id": 1, "user": {"type": "User"}, "body": f"{MARKER} quoted by a human"}]
    assert _comment(review, tmp_path, body, others) == [["list", 7], ["create", 7, body]]
    ours = others + [{"id": 42, "user": {"type": "Bot"}, "body": f"{MARKER}\nold"}]
    assert _comment(review, tmp_path, body, ours) == [["list", 7], ["update", 42, body]]


@needs_node
def test_comment_refuses_a_body_without_the_marker(review, tmp_path):
    calls = _comment(review, tmp_path, "## Review\n", [])
    assert calls == [["failed", f"review.md does not start with {MARKER}: the comment could not be found again"]]


@needs_node
def test_comment_truncated_below_githubs_limit(review, tmp_path):
    body = MARKER + "\n" + "x" * 70000
    [_, (kind, _, posted)] = _comment(review, tmp_path, body, [])
    assert kind == "create" and len(posted) < 65536 and posted.startswith(MARKER)
    assert posted.endswith("_(truncated: the whole diff is in the job summary)_\n")


@pytest.mark.skipif(shutil.which("shellcheck") is None, reason="shellcheck not installed")
def test_shellcheck_run_scripts(review, tmp_path):
    """Each `run:` block as the runner executes it (bash -e, pipefail)."""
    scripts = []
    for job_name, job in review["jobs"].items():
        for i, step in enumerate(job["steps"]):
            if "run" in step:
                path = tmp_path / f"{job_name}-{i}.sh"
                path.write_text("#!/usr/bin/env bash\nset -eo pipefail\n" + step["run"])
                scripts.append(str(path))
    assert len(scripts) == 4
    proc = subprocess.run(["shellcheck", *scripts], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout
