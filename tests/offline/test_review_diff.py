"""`python -m offline.review` / `make diff`: the review diff of a change, offline.

A fixture repository (a copy of this tree, committed as the base) gets the edits a pull
request would make; the review renders both revisions and must say exactly what happens.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from offline import review as rv
from offline.mocks import _hex

REPO = Path(__file__).resolve().parents[2]
SECRET_VALUE = "hunter2-s3cr3t-value"
GIT_ENV = {
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@example.com",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@example.com",
}


def _git(cwd: Path, *args: str) -> str:
    proc = subprocess.run(
        ["git", "-c", "commit.gpgsign=false", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        env={**os.environ, **GIT_ENV},
        check=True,
    )
    return proc.stdout


def _copy_tree(dest: Path) -> None:
    """This checkout's files (tracked and new, as they are now) without its history."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    for rel in filter(None, (p.decode() for p in listed)):
        src = REPO / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)


def _edit_stack(path: Path, edit) -> None:
    doc = yaml.safe_load(path.read_text())
    edit(doc["config"]["gpu-cluster:cluster"])
    path.write_text(yaml.safe_dump(doc, sort_keys=False))


@pytest.fixture(scope="module")
def fixture_repo(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("review") / "repo"
    root.mkdir()
    _copy_tree(root)
    _git(root, "init", "-q")
    _git(root, "add", "-A")
    _git(root, "commit", "-q", "-m", "base")
    _git(root, "tag", "base")
    return root


@pytest.fixture(scope="module")
def clean_review(fixture_repo, tmp_path_factory, render_cache):
    """The unchanged tree against its own commit (before `changed` edits it), through the
    command line a workflow runs."""
    out = tmp_path_factory.mktemp("clean") / "review.md"
    proc = subprocess.run(
        [sys.executable, "-m", "offline.review", "--base", "base", "--format", "markdown", "--out", str(out)]
        + ["--repo", str(fixture_repo), "--stack", "dev"]
        + (["--cache-dir", str(render_cache)] if render_cache else []),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    return proc, out


@pytest.fixture(scope="module")
def changed(fixture_repo, clean_review, render_cache):
    def edit(c):
        c["fsx"]["deployment_type"] = "PERSISTENT_1"  # replaces the file system
        c["fsx"]["per_unit_storage_throughput"] = 200  # in place
        c["fsx"]["allow_replace"] = True
        c["root_volume"] = {"size_gib": 400}  # a new launch template version
        c["tags"]["owner"] = "alice"
        c["tags"]["api_token"] = SECRET_VALUE
        c["capacity"]["capacity_blocks"][0]["end"] = "2026-12-09T11:30:00Z"  # a later scale-in

    _edit_stack(fixture_repo / "Pulumi.dev.yaml", edit)
    step = fixture_repo / "nodeside/steps/80-limits.sh"
    step.write_text(step.read_text() + "# review fixture: a changed step\n")
    shutil.copy(fixture_repo / "Pulumi.dev.yaml", fixture_repo / "Pulumi.extra.yaml")
    (fixture_repo / "Pulumi.prod.yaml").unlink()
    sha, reports = rv.review("base", repo=fixture_repo, stacks=["dev", "extra", "prod"], cache=render_cache)
    return {
        "sha": sha,
        "reports": reports,
        "text": rv.format_text(sha, "base", reports),
        "markdown": rv.format_markdown(sha, "base", reports),
    }


def _lines(text: str) -> list[str]:
    return text.splitlines()


def _block(text: str, header: str) -> list[str]:
    """The lines of one stack's section in the text report."""
    lines = _lines(text)
    start = lines.index(header)
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("== stack ")), len(lines))
    return lines[start:end]


def test_no_changes_per_stack(clean_review):
    proc, out = clean_review
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "", "")
    md = _lines(out.read_text())
    assert md[0] == rv.MARKER and md[-1] == "### Stack `dev`: no changes"
    text = rv.format_text("0" * 40, "main", [rv.StackReport("dev")])
    assert _lines(text) == [
        "Review: base main (000000000000) -> working tree; offline plans (Pulumi mocks)",
        "",
        "== stack dev: no changes",
    ]


def test_fsx_replacement_banner_comes_first(changed):
    lines = _lines(changed["text"])
    assert lines[2:6] == [
        "!" * 78,
        "!! FSx DATA AT RISK: data on /fsx will be lost unless backed up",
        "!! dev: FSx file system dev-lustre will be REPLACED (deploymentType cannot change in place): the data "
        "on /fsx (Slurm state, checkpoints, datasets, validation baselines) is lost unless backed up. The new "
        "file system has a new DNS name, so the nodes' payload and launch template change too when it is "
        "applied; running nodes keep mounting the old one until replaced.",
        "!" * 78,
    ]
    dev = _block(changed["text"], "== stack dev: 20 changed, 2 replaced, 2 node file(s) changed")
    # The file system leads its stack; the throughput change alone would be in place.
    assert dev[1:7] == [
        "  replaced               LustreFileSystem dev-lustre",
        "      because deploymentType cannot change in place",
        '      deploymentType: "PERSISTENT_2" -> "PERSISTENT_1"',
        "      perUnitStorageThroughput: 250 -> 200",
        "      tags.api_token: (none) -> [secret]",
        '      tags.owner: (none) -> "alice"',
    ]


def test_launch_template_change_says_what_running_nodes_get(changed):
    dev = _block(changed["text"], "== stack dev: 20 changed, 2 replaced, 2 node file(s) changed")
    i = dev.index("  changed                LaunchTemplate dev-lt")
    assert "      blockDeviceMappings[0].ebs.volumeSize: 512 -> 400" in dev[i:]
    assert (
        "      note: new launch template version: running nodes keep the old one; only new and replaced "
        "nodes get it; see README 'Rolling out a template change on purpose'."
    ) in dev[i:]


def test_tags_are_matched_by_key(changed):
    dev = _block(changed["text"], "== stack dev: 20 changed, 2 replaced, 2 node file(s) changed")
    i = dev.index("  changed                Group dev-block-a")
    assert dev[i + 1 : i + 4] == [
        '      tags[key=GpuClusterBlockEnd].value: "2026-12-08T11:30:00Z" -> "2026-12-09T11:30:00Z"',
        "      tags[key=api_token]: (none) -> [secret]",
        '      tags[key=owner]: (none) -> {"key": "owner", "propagateAtLaunch": true, "value": "alice"}',
    ]
    assert '      tags.owner: (none) -> "alice"' in dev[dev.index("  changed                SecurityGroup dev-sg") :]


def test_schedule_change_says_when(changed):
    dev = _block(changed["text"], "== stack dev: 20 changed, 2 replaced, 2 node file(s) changed")
    i = dev.index("  changed                Schedule dev-block-a-scale-in")
    assert dev[i + 1 : i + 3] == [
        '      startTime: "2026-12-08T10:50:00Z" -> "2026-12-09T10:50:00Z"',
        "      note: scheduled action: at 2026-12-09T10:50:00Z the group becomes min/max/desired 0/0/0.",
    ]


def test_changed_node_file_has_a_unified_diff(changed):
    dev = _block(changed["text"], "== stack dev: 20 changed, 2 replaced, 2 node file(s) changed")
    i = dev.index("  node files:")
    assert dev[i + 1 : i + 9] == [
        "    changed node:/opt/gpu-cluster/steps/80-limits.sh",
        "      --- base/node:/opt/gpu-cluster/steps/80-limits.sh",
        "      +++ head/node:/opt/gpu-cluster/steps/80-limits.sh",
        dev[i + 4],
        '       main "$@"',
        "      +# review fixture: a changed step",
        "    changed node:user-data",
        "      (gzip'd MIME user data: the files it writes are listed one by one)",
    ]
    assert dev[i + 4].startswith("      @@ -")


def test_added_and_removed_stacks(changed):
    text = changed["text"]
    extra = _block(text, "== stack extra (new stack): 34 added")
    assert extra[1:3] == [
        "   75 node files, all new: `python -m offline.plan --stack extra --out DIR` writes them.",
        "  added                  LustreFileSystem dev-lustre",
    ]
    prod = _block(text, "== stack prod (stack removed): stack file removed, no resource deleted by it")
    assert prod[1:] == [
        "   Pulumi.prod.yaml is removed: that alone deletes nothing. The stack's 51 resources (its FSx file "
        "system and the data on /fsx included) stay until `pulumi destroy` is run on it."
    ]
    # Only a change that deletes or replaces the file system raises the banner.
    assert [ln for ln in _lines(text) if ln.startswith("!! ") and "FSx file system" in ln] == [_lines(text)[4]]


def test_secret_value_is_never_printed(changed):
    for out in (changed["text"], changed["markdown"]):
        assert SECRET_VALUE not in out
    assert "      tags[key=api_token]: (none) -> [secret]" in _lines(changed["text"])


def test_markdown_comment(changed):
    md = changed["markdown"]
    lines = _lines(md)
    assert lines[0] == rv.MARKER
    caution = lines.index("> [!CAUTION]")
    assert lines[caution + 1] == "> **FSx data at risk: the data on /fsx will be lost unless backed up.**"
    assert lines[caution + 2].startswith("> - dev: FSx file system dev-lustre will be REPLACED")
    dev = lines.index("### Stack `dev`: 20 changed, 2 replaced, 2 node file(s) changed")
    assert caution < dev
    assert lines[dev + 2 : dev + 5] == [
        "| change | type | name | why |",
        "|---|---|---|---|",
        # allow_replace lifts protect: the review says so (the plan records resource options).
        "| **replaced** | `LustreFileSystem` | `dev-lustre` | deploymentType cannot change in place; "
        "inputs: deploymentType, perUnitStorageThroughput, tags; options: protect true -> false; "
        "protect off: the engine may now delete or replace it |",
    ]
    assert "<details><summary>changed <code>node:/opt/gpu-cluster/steps/80-limits.sh</code></summary>" in lines
    assert "+# review fixture: a changed step" in lines


def test_bad_ref_exits_2_with_a_message(fixture_repo, capsys):
    assert rv.main(["--base", "no-such-ref", "--repo", str(fixture_repo)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("review: base revision 'no-such-ref' is not a commit in this repository")
    assert "Traceback" not in err


def test_not_a_checkout_exits_2(tmp_path, capsys):
    assert rv.main(["--base", "HEAD", "--repo", str(tmp_path)]) == 2
    assert "is not a git checkout" in capsys.readouterr().err


def test_make_diff_interface():
    proc = subprocess.run(
        ["make", "--no-print-directory", "-n", "diff", "BASE=origin/main", "FORMAT=markdown", "OUT=build/review.md"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    )
    assert proc.stdout.strip().endswith("-m offline.review --base origin/main --format markdown --out build/review.md")
    proc = subprocess.run(
        ["make", "--no-print-directory", "-n", "diff", "BASE=main"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
        env=os.environ,
    )
    assert proc.stdout.strip().endswith("-m offline.review --base main --format text")


# --- the comparison itself, on small plans (no rendering) ----------------------------------


def _res(typ: str, name: str, **inputs) -> dict:
    return {"type": typ, "name": name, "custom": True, "urn": f"urn:{typ}::{name}", "inputs": inputs}


def _kinds(changes) -> dict[str, str]:
    return {c.name: c.kind for c in changes}


def test_replaced_security_group_replaces_the_file_system():
    sg_id = "sg-" + _hex("c-sg")
    fs = _res(rv.FSX_TYPE, "c-lustre", securityGroupIds=[sg_id], deploymentType="PERSISTENT_2")
    base = {"resources": [_res("aws:ec2/securityGroup:SecurityGroup", "c-sg", description="old"), fs]}
    head = {"resources": [_res("aws:ec2/securityGroup:SecurityGroup", "c-sg", description="new"), fs]}
    changes = rv.compare_plans(base, head)
    assert _kinds(changes) == {"c-sg": "replaced", "c-lustre": "replaced"}
    fs_change = next(c for c in changes if c.name == "c-lustre")
    assert fs_change.reasons == ["securityGroupIds refers to c-sg, which is replaced (new id)"]


def test_group_size_change_is_explained():
    def plan(n):
        return {"resources": [_res(rv.ASG_TYPE, "g", minSize=n, maxSize=n, desiredCapacity=n)]}

    rep = rv.StackReport("s", changes=rv.compare_plans(plan(2), plan(4)))
    rv.explain(rep, plan(2), plan(4))
    (c,) = rep.changes
    assert (c.kind, c.notes) == (
        "changed",
        [
            "group size min/max/desired 2/2/2 -> 4/4/4: Auto Scaling launches or terminates nodes at once "
            "to match (a shrink terminates running nodes)."
        ],
    )


def test_storage_decrease_replaces_increase_does_not():
    def plan(gib):
        return {"resources": [_res(rv.FSX_TYPE, "c-lustre", storageCapacity=gib, deploymentType="PERSISTENT_2")]}

    assert _kinds(rv.compare_plans(plan(2400), plan(1200))) == {"c-lustre": "replaced"}
    assert _kinds(rv.compare_plans(plan(1200), plan(2400))) == {"c-lustre": "changed"}


def test_unknown_type_or_input_may_replace():
    base = {"resources": [_res("aws:foo/bar:Bar", "x", a=1), _res(rv.ASG_TYPE, "g", mystery=1, maxSize=1)]}
    head = {"resources": [_res("aws:foo/bar:Bar", "x", a=2), _res(rv.ASG_TYPE, "g", mystery=2, maxSize=1)]}
    changes = rv.compare_plans(base, head)
    assert _kinds(changes) == {"x": "may-replace", "g": "may-replace"}
    assert next(c for c in changes if c.name == "g").reasons == ["mystery: not known to update in place"]


def test_secret_wrapped_and_secret_named_inputs_are_hidden():
    wrapped = {"4dabf18193072939515e22adb298388d": "1b47061264138c4ac30d75fd1eb44270", "value": "pw-1"}
    wrapped2 = {**wrapped, "value": "pw-2"}
    diffs = rv.diff_inputs(
        {"value": wrapped, "dbPassword": "old-pw", "note": "-----BEGIN RSA PRIVATE KEY-----abc", "n": 1},
        {"value": wrapped2, "dbPassword": "new-pw", "note": "plain", "n": 2},
    )
    assert diffs == [
        ("dbPassword", "[secret]", "[secret]"),
        ("n", "1", "2"),
        ("note", "[secret]", '"plain"'),
        ("value", "[secret]", "[secret]"),
    ]
    # IMDSv2's httpTokens is not a secret.
    assert rv.diff_inputs({"httpTokens": "optional"}, {"httpTokens": "required"}) == [
        ("httpTokens", '"optional"', '"required"')
    ]


def test_node_file_diff_is_capped_and_redacted(tmp_path):
    for side, word in (("base", "old"), ("head", "new")):
        f = tmp_path / side / "userdata" / "node" / "files" / "etc" / "x.conf"
        f.parent.mkdir(parents=True)
        f.write_text("".join(f"line{i} {word}\n" for i in range(100)) + f"API_TOKEN={word}-tok-123\n")
    (diff,) = rv.compare_files(tmp_path / "base", tmp_path / "head")
    assert diff.path == "node:/etc/x.conf" and diff.status == "changed"
    assert len(diff.lines) == rv.DIFF_LINES and diff.more == 3 + 2 * 101 - rv.DIFF_LINES
    text = rv.format_text("0" * 40, "b", [rv.StackReport("s", files=[diff])])
    assert f"      ... {diff.more} more lines" in _lines(text)
    (short,) = rv.compare_files(tmp_path / "base", tmp_path / "head", max_lines=1000)
    assert {"-API_TOKEN=[secret]", "+API_TOKEN=[secret]"} < set(short.lines)
    assert not [ln for ln in short.lines if "tok-123" in ln]


def test_markdown_stays_under_the_comment_limit(tmp_path):
    big = [rv.FileDiff(f"node:/etc/f{i}", "changed", ["+" + "x" * 100] * rv.DIFF_LINES) for i in range(40)]
    inputs = [(f"k{i}", '"a"', '"b"') for i in range(10)]
    rep = rv.StackReport("s", changes=[rv.Change("u", rv.LT_TYPE, "lt", "changed", inputs)], files=big)
    md = rv.format_markdown("0" * 40, "main", [rep])
    assert len(md) <= rv.MD_LIMIT
    lines = _lines(md)
    assert "Node files (40), diffs left out (comment size limit):" in lines
    assert "- changed `node:/etc/f0`" in lines and '  k0: "a" -> "b"' in lines


def test_a_base_from_before_the_offline_package_renders_with_its_own_plan_module(tmp_path):
    """Bases from before the plan writer left infra/ have `python -m infra.plan`; the base
    is rendered with its own code, so the review runs the module that base has."""
    old = tmp_path / "old"
    (old / "infra").mkdir(parents=True)
    (old / "infra" / "__init__.py").write_text("")
    (old / "infra" / "plan.py").write_text(
        "import json, sys\n"
        "args = sys.argv[1:]\n"
        "out = args[args.index('--out') + 1]\n"
        "import os\n"
        "os.makedirs(out)\n"
        "json.dump({'module': __spec__.name, 'stack': args[args.index('--stack') + 1]}, open(out + '/plan.json', 'w'))\n"
    )
    assert rv.plan_module(old) == "infra.plan" and rv.plan_module(REPO) == "offline.plan"
    result = rv.render(old, "dev", tmp_path / "out")
    assert result.error is None
    assert yaml.safe_load((tmp_path / "out" / "plan.json").read_text()) == {"module": "infra.plan", "stack": "dev"}


def test_the_render_cache_renders_identical_content_once_and_misses_on_any_change(tmp_path, monkeypatch):
    calls = []

    def fake_render(tree, stack, out):
        calls.append((tree.name, stack))
        out.mkdir(parents=True, exist_ok=True)
        (out / "plan.json").write_text(json.dumps({"tree": tree.name, "stack": stack}))
        return rv.Render(stack, out)

    monkeypatch.setattr(rv, "render", fake_render)
    base, head, cache = tmp_path / "base", tmp_path / "head", tmp_path / "cache"
    for tree in (base, head):
        (tree / "bin").mkdir(parents=True)
        (tree / "Pulumi.dev.yaml").write_text("config: {}\n")
        (tree / "bin" / "run").write_text("#!/bin/sh\n")
    jobs = [(base, "dev", tmp_path / "o" / "b"), (head, "dev", tmp_path / "o" / "h")]
    monkeypatch.setattr(rv, "head_files", rv.tree_files)  # `head` is no git checkout here
    by = rv._render_all(jobs, base, head, cache)
    assert calls == [("base", "dev")]  # the same content at both revisions: one render
    assert by[(str(base), "dev")].out == by[(str(head), "dev")].out
    assert [p.name for p in cache.iterdir()] == [rv.render_key(rv.tree_digest(base, rv.tree_files(base)), base, "dev")]
    by = rv._render_all(jobs, base, head, cache)
    assert len(calls) == 1  # kept: nothing rendered again, the kept render is read where it lies
    assert by[(str(head), "dev")].out.parent == cache
    (head / "bin" / "run").chmod(0o755)  # a mode is content too
    rv._render_all(jobs, base, head, cache)
    assert calls[1:] == [("head", "dev")]
    (base / "Pulumi.dev.yaml").write_text("config: {a: 1}\n")
    rv._render_all(jobs, base, head, cache)
    assert calls[2:] == [("base", "dev")]
    # without a cache every job renders, as before
    rv._render_all(jobs, base, head, None)
    assert calls[3:] == [("base", "dev"), ("head", "dev")]


def test_a_failed_render_is_not_kept(tmp_path, monkeypatch):
    monkeypatch.setattr(rv, "render", lambda tree, stack, out: rv.Render(stack, out, "boom"))
    tree = tmp_path / "t"
    tree.mkdir()
    got = rv.cached_render(tree, "dev", tmp_path / "out", "k" * 64, tmp_path / "cache")
    assert got.error == "boom" and not (tmp_path / "cache").exists()
