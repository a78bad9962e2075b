"""Fuzz every CLI: random argv and random file contents from a seeded generator, in
this process (no fresh interpreter per case). Every outcome must be an exit code of the
table other than 4 (internal error) with no traceback on stderr, within a per-case hang
guard, and the whole run must not grow this process's memory without bound.

The work behind the input layer is replaced by a stub that stops the case once reached
(`Reached`): a render under Pulumi's mocks, git archives, AWS clients (every client
creation fails as without credentials), the local cluster's machines, Slurm calls and
`exec`. The input layer, the stack-file reader, the config model and the verdict engine
run for real. `GPU_CLUSTER_CLI_FUZZ_CASES` sets the cases per CLI (`make check` runs the
first ones of the same seeded sequence, `make test` all 300: about a minute in all).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import random
import resource
import signal
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from botocore.exceptions import NoCredentialsError

from clitools import exits

REPO = Path(__file__).resolve().parents[2]
SEED = 20261221
CASES = int(os.environ.get("GPU_CLUSTER_CLI_FUZZ_CASES", "300"))
HANG_SECONDS = 20  # a guard against a hang only: a case takes milliseconds
ALLOWED = {exits.OK, exits.FAILED, exits.USAGE, exits.UNREACHABLE}
# Peak memory may grow this much over the whole run: a device read without bound, an
# alias bomb expanded or a runaway regex would go far past it.
MAX_GROWTH_KIB = 1 << 20

WORDS = [
    "",
    " ",
    "-",
    "--",
    "-1",
    "0",
    "1",
    "2",
    "64",
    "65",
    "1e400",
    "nan",
    "inf",
    "-inf",
    "0x10",
    "9" * 40,
    "a" * 3000,
    "\u00fc\u4e2d\U0001d518",
    "zero\u200bwidth",
    "line\nbreak",
    "../../etc/passwd",
    "$(reboot)",
    "%s%n",
    "dev",
    "prod",
    "us-east-2",
    "mars-1",
    "p5.48xlarge",
    "i-0123456789abcdef0",
    "i-zz",
    "ip-10-0-1-5",
    "ip-999-0-0-1",
    "fs-0123456789abcdef0",
    "cb-0123456789abcdefg",
    "2026-12-08",
    "2026-12-08T11:30:00Z",
    "9999-12-31T23:30:00-12:00",
    "0001-01-01",
    "2026-13-45",
    "capacity.nodes=4",
    'tags["a"]=b',
    "capacity.capacity_blocks[99].end=x",
    "aws:region=",
    "HEAD",
    "origin/none",
    "bookworm",
    "namespace",
]


class Reached(BaseException):
    """The case reached the work behind the input layer (not caught by the CLIs' guards)."""


class Hang(BaseException):
    pass


def _reached(*_a, **_k):
    raise Reached()


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """Paths of every kind a file argument may be given: regular, directory, device,
    FIFO, missing, below a file; and a stack directory whose `bad` stack is rewritten
    with random bytes per case."""
    root = tmp_path_factory.mktemp("fuzz")
    (root / "stacks").mkdir()
    (root / "stacks" / "Pulumi.dev.yaml").write_text((REPO / "Pulumi.dev.yaml").read_text())
    (root / "stacks" / "Pulumi.bad.yaml").write_text("")
    (root / "file").write_text("x\n")
    fifo = root / "fifo"
    os.mkfifo(fifo)
    paths = [
        root / "stacks",
        root / "stacks" / "Pulumi.dev.yaml",
        root / "stacks" / "Pulumi.bad.yaml",
        root / "file",
        root / "file" / "below",
        root / "missing",
        root / "out",
        fifo,
        Path("/dev/zero"),
        Path("/dev/null"),
        Path("/proc/nope/x"),
        REPO / "tests" / "data" / "verdict" / "efa_p5_allreduce_16g.log",
    ]
    return root, [str(p) for p in paths]


def _content(rng: random.Random) -> bytes:
    """Random file content: bytes, a damaged stack file, a damaged log, YAML aliases."""
    kind = rng.randrange(6)
    if kind == 0:
        return rng.randbytes(rng.randrange(0, 4096))
    if kind == 1:
        text = (REPO / "Pulumi.dev.yaml").read_bytes()
        cut = rng.randrange(len(text))
        return text[:cut] + rng.choice([b"", b"\xff\xfe", b"\n  - *x\n", b": [", b"\t"]) + text[cut + 1 :]
    if kind == 2:
        log = (REPO / "tests" / "data" / "verdict" / "gcp_h100_allreduce_8g.log").read_bytes().splitlines()
        rng.shuffle(log)
        return b"\n".join(log[: rng.randrange(len(log))])
    if kind == 3:
        return (
            b"a: &a ["
            + b",".join([b"x"] * 9)
            + b"]\n"
            + b"".join(
                b"a%d: &a%d [" % (i, i) + b",".join([b"*a" + (b"%d" % (i - 1) if i > 1 else b"")] * 9) + b"]\n"
                for i in range(1, 9)
            )
        )
    if kind == 4:
        return rng.choice([b"[]", b"{}", b"null", b"config: 5", b'{"fsx_root": 1}', b"config:\n  aws:region: [1]\n"])
    return rng.choice(WORDS).encode("utf-8", "surrogatepass") * rng.randrange(1, 200)


# Values that pass an option's own check, by its dest: half the cases get one, so the
# cases reach past argparse into the stack file, the config and the commands.
PLAUSIBLE = {
    "stack": ["dev", "bad", "dev", "nope"],
    "region": ["us-east-2", "us-west-2"],
    "stack_dir": ["{root}/stacks"],
    "node": ["ip-10-0-1-5", "i-0123456789abcdef0"],
    "count": ["2", "64"],
    "days": ["7", "14", "21", "15"],
    "earliest": ["2030-01-10", "2020-01-01", "2030-01-10T11:30:00Z"],
    "latest": ["2030-02-10", "2030-01-11"],
    "name": ["a", "local", "t1"],
    "wait": ["0", "30"],
    "poll": ["1", "30"],
    "out": ["{root}/out", "{root}/out/r.md"],
    "config_file": ["{root}/stacks/Pulumi.bad.yaml", "{root}/stacks/Pulumi.dev.yaml"],
    "at": ["2026-12-08T12:00:00Z", "2026-12-08T12:00:00"],
    "overrides": ["capacity.nodes=2", "aws:region=us-east-2", "x[=1"],
    "logs": ["{root}/file", "{root}/stacks/Pulumi.bad.yaml"],
    "config": ["{root}/file"],
    "run": ["{root}/run", "{root}"],
    "features": ["{root}/file"],
    "nodes": ["a,b", "a"],
    "step": ["pmix", "all_reduce", "single"],
    "base": ["HEAD"],
    "repo": [str(REPO)],
}


def _value(rng: random.Random, action: argparse.Action, paths: list[str]) -> str:
    if action.choices and rng.random() < 0.6:
        return str(rng.choice(list(action.choices)))
    if action.dest in PLAUSIBLE and rng.random() < 0.5:
        return rng.choice(PLAUSIBLE[action.dest]).format(root=Path(paths[0]).parent)
    if rng.random() < 0.35:
        return rng.choice(paths)
    return rng.choice(WORDS)


def _argv(rng: random.Random, parser: argparse.ArgumentParser, paths: list[str]) -> list[str]:
    """A random command line for `parser`: a subcommand, some of its options with random
    values, its positionals, now and then a stray word."""
    argv: list[str] = []
    p = parser
    while True:
        subs = [a for a in p._actions if isinstance(a, argparse._SubParsersAction)]
        options = [a for a in p._actions if a.option_strings and a.dest not in ("help", "version")]
        for a in options:
            if rng.random() < (0.9 if a.required else 0.3):
                argv.append(rng.choice(a.option_strings))
                if a.nargs != 0:
                    argv.append(_value(rng, a, paths))
        for a in p._actions:
            if not a.option_strings and not isinstance(a, argparse._SubParsersAction):
                argv += [_value(rng, a, paths) for _ in range(1 if a.nargs in (None, 1) else rng.randrange(1, 3))]
        if not subs:
            break
        name = rng.choice(list(subs[0].choices))
        argv.append(name)
        p = subs[0].choices[name]
    if rng.random() < 0.05:
        argv.insert(rng.randrange(len(argv) + 1), rng.choice(WORDS))
    if rng.random() < 0.03:
        argv.append(rng.choice(["--help", "--version"]))
    return argv


def _run_case(main: Callable[[list[str]], int | None], argv: list[str]) -> tuple[int | None, str]:
    out, err = io.StringIO(), io.StringIO()
    old = signal.signal(signal.SIGALRM, lambda *_: (_ for _ in ()).throw(Hang()))
    signal.alarm(HANG_SECONDS)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(argv)
            except SystemExit as e:  # argparse: usage (2), --help and --version (0)
                code = e.code if isinstance(e.code, int) else exits.USAGE
            except Reached:
                code = None
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    return code, err.getvalue()


def _fuzz(name, main, parser, files, rng_seed, rewrite=True):
    root, paths = files
    rng = random.Random(f"{SEED}-{name}-{rng_seed}")
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    reached = 0
    for case in range(CASES):
        if rewrite:
            (root / "stacks" / "Pulumi.bad.yaml").write_bytes(_content(rng))
            (root / "file").write_bytes(_content(rng))
        argv = _argv(rng, parser, paths)
        try:
            code, err = _run_case(main, argv)
        except Hang:
            pytest.fail(f"{name} case {case} hung (>{HANG_SECONDS}s): {argv!r}")
        reached += code is None
        assert code is None or code in ALLOWED, f"{name} case {case}: exit {code} for {argv!r}\n{err[-2000:]}"
        assert "Traceback" not in err, f"{name} case {case}: traceback for {argv!r}\n{err[-2000:]}"
    grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert grown < MAX_GROWTH_KIB, f"{name}: peak memory grew {grown} KiB over {CASES} cases"
    return reached


def test_fuzz_ops(files, monkeypatch):
    from ops import cli
    from ops.aws import Session
    from ops.context import Context

    def no_credentials(service, region):
        raise NoCredentialsError()

    def main(argv):
        ctx = Context(session=None, prompt=lambda q: "no", interactive=False)  # type: ignore[arg-type]
        ctx.out, ctx.err = sys.stdout, sys.stderr
        return cli.main(argv, ctx=ctx, session_for=lambda region: Session(region, factory=no_credentials))

    root, _ = files
    monkeypatch.chdir(root / "stacks")
    _fuzz("ops", main, cli.parser(), files, 1)


def test_fuzz_plan_writer(files, monkeypatch):
    from offline import plan

    monkeypatch.setattr(plan, "run_under_mocks", _reached)
    monkeypatch.setattr(plan, "REPO", files[0] / "stacks")
    main = plan.main
    _fuzz("plan", lambda argv: main(argv), plan.parser(), files, 2)


def test_fuzz_review(files, monkeypatch):
    from offline import review

    monkeypatch.setattr(review, "extract_tree", _reached)
    _fuzz("review", review.main, review.parser(), files, 3)


def test_fuzz_localcluster_and_images(files, monkeypatch):
    from localcluster import cli, images

    monkeypatch.setattr(cli, "LocalCluster", _reached)
    monkeypatch.setattr(cli, "_root_check", lambda: None)
    _fuzz("localcluster", cli.main, cli._parser(), files, 4)
    monkeypatch.setattr(images, "build_root", _reached)
    monkeypatch.setattr(images, "prune", _reached)
    _fuzz("images", images.main, images.parser(), files, 5)


def test_fuzz_verdict(files):
    from nodeside import verdict

    reached = _fuzz("verdict", verdict.main, verdict._parser(), files, 6)
    assert reached == 0  # nothing stubbed: every case ran to its exit code


def test_fuzz_validation_report(files, monkeypatch):
    from nodeside import validation_report as vr

    monkeypatch.setattr(vr, "drain", lambda *a, **k: {})
    _fuzz("validation_report", vr.main, vr._parser(), files, 7)


def test_fuzz_node_programs(files, monkeypatch):
    from nodeside import cluster_status, health, run

    monkeypatch.setattr(health, "_run", _reached)
    _fuzz("health", health.main, argparse.ArgumentParser(add_help=False), files, 8, rewrite=False)

    def launch(argv):
        return run.main(argv, environ={"SLURM_RESTART_COUNT": random.choice(["", "x", "3", "-1"])}, execvpe=_reached)

    _fuzz("run", launch, run.parser(), files, 9)

    monkeypatch.setattr(cluster_status, "run", lambda cmd: (-1, "", "not here"))
    root, _ = files
    rng = random.Random(f"{SEED}-status")
    for d in ("status", "health"):
        (root / "fsx" / d).mkdir(parents=True, exist_ok=True)
    for case in range(CASES):
        for d in ("status", "health"):
            (root / "fsx" / d / f"n{case % 5}.json").write_bytes(_content(rng))
        code, err = _run_case(lambda argv: cluster_status.main(argv[0]) or 0, [str(root / "fsx")])
        assert code == 0 and "Traceback" not in err, f"cluster_status case {case}\n{err}"
