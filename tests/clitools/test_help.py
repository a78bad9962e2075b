"""`--help` of every package CLI: a description, an example and every default, on the
program and on each subcommand; `--version`; the bash completion script, run in bash."""

from __future__ import annotations

import argparse
import subprocess

import pytest

from model.version import VERSION


def _parsers():
    from localcluster import cli as lc_cli
    from localcluster import images
    from nodeside import verdict
    from offline import plan, review
    from ops import cli as ops_cli

    return {
        "ops": ops_cli.parser(),
        "plan": plan.parser(),
        "review": review.parser(),
        "localcluster": lc_cli._parser(),
        "images": images.parser(),
        "verdict": verdict._parser(),
    }


def _walk(p: argparse.ArgumentParser, name: str):
    yield name, p
    for action in p._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub, sp in action.choices.items():
                yield from _walk(sp, f"{name} {sub}")


def _cases():
    return [(name, p) for top, parser in _parsers().items() for name, p in _walk(parser, top)]


@pytest.mark.parametrize("name, p", _cases(), ids=lambda x: x if isinstance(x, str) else "")
def test_every_command_has_a_description_an_example_and_its_defaults(name, p):
    text = " ".join(p.format_help().split())
    assert p.description and "\n" not in p.description.strip(), f"{name}: a one-line description"
    assert "example" in (p.epilog or ""), f"{name}: an example in --help"
    for action in p._actions:
        d = action.default
        if not action.option_strings or d is None or d is False or d == [] or d is argparse.SUPPRESS:
            continue
        assert f"default: {d}" in text or "default" in (action.help or ""), f"{name} {action.option_strings}"


@pytest.mark.parametrize("top", ["ops", "plan", "review", "localcluster", "images", "verdict"])
def test_version(top, capsys):
    p = _parsers()[top]
    with pytest.raises(SystemExit) as e:
        p.parse_args(["--version"])
    assert e.value.code == 0
    assert capsys.readouterr().out.strip().endswith(f"(gpu-cluster) {VERSION}")


def _complete(script: str, words: str, tmp_path) -> list[str]:
    (tmp_path / "Pulumi.dev.yaml").write_text("")
    (tmp_path / "Pulumi.prod.yaml").write_text("")
    (tmp_path / "c.sh").write_text(script)
    cmd = (
        f"source {tmp_path / 'c.sh'}; COMP_WORDS=({words}); COMP_CWORD=$((${{#COMP_WORDS[@]}} - 1)); "
        "_gpu_cluster_ops; printf '%s\\n' \"${COMPREPLY[@]}\""
    )
    r = subprocess.run(["bash", "-c", cmd], cwd=tmp_path, capture_output=True, text=True, timeout=30, check=True)
    return sorted(r.stdout.split())


def test_bash_completion_of_ops(tmp_path, capsys):
    from ops.cli import main
    from ops.context import Context

    ctx = Context(session=None)  # type: ignore[arg-type]
    import io

    ctx.out = io.StringIO()
    assert main(["completion", "bash"], ctx=ctx) == 0
    script = ctx.out.getvalue()
    assert _complete(script, "gpu-cluster-ops pre", tmp_path) == ["preflight"]
    assert _complete(script, "gpu-cluster-ops status --stack ''", tmp_path) == ["dev", "prod"]
    assert _complete(script, "gpu-cluster-ops health node --level ''", tmp_path) == ["1", "2", "3"]
    assert "--no-ssm" in _complete(script, "gpu-cluster-ops status --", tmp_path)
    assert _complete(script, "gpu-cluster-ops find-blocks --instance-type p5e", tmp_path) == [
        "p5e.48xlarge",
        "p5en.48xlarge",
    ]
    # every option of every subcommand is offered
    from ops.cli import parser

    for name, sp in _walk(parser(), "gpu-cluster-ops"):
        if name == "gpu-cluster-ops":
            continue
        words = name.split()
        got = _complete(script, f"{' '.join(words)} --", tmp_path)
        want = sorted(o for a in sp._actions for o in a.option_strings if o.startswith("--"))
        assert got == want, name
