#!/usr/bin/python3
"""gpu-cluster-run: start a training command from the newest complete checkpoint.

    gpu-cluster-run [--checkpoint-dir DIR] [--marker NAME] [--resume-flag=FLAG]
                    [--max-restarts N] -- COMMAND [ARG...]

(a FLAG that starts with `-` needs the `=` form: `--resume-flag=--resume`)

In a batch job submitted with `--requeue` (the job templates are): when Slurm requeues
the job after a node failure or `scontrol requeue` (slurm.conf JobRequeue=1), the batch
script runs again from its first line with SLURM_RESTART_COUNT set [SLURM-SBATCH]; this
launcher turns that restart into a resume. It finds the newest complete checkpoint in
DIR (--checkpoint-dir, else $GPU_CLUSTER_CHECKPOINT_DIR), exports it as
GPU_CLUSTER_CHECKPOINT (empty on a first run) and the restart count as
GPU_CLUSTER_RESTART_COUNT, appends `FLAG PATH` to the command when --resume-flag is
given and a checkpoint exists, and execs the command: same process, so Slurm's signals,
cgroup (task/cgroup) and CPU binding (task/affinity) apply to the command itself; no
Slurm plugin and no TaskPlugin change is needed.

A checkpoint is an entry of DIR: a directory holding the marker file (default
`.complete`, written by the training code after the last byte) or, with `--marker ''`,
any file or directory whose name does not end in .tmp/.partial. Newest: latest mtime,
then the name. Stdlib only.
"""

import argparse
import os
import sys

# The exit-code table of every gpu-cluster CLI: a copy of clitools/exits.py (this program
# runs on the nodes as a single file); tests/repo/test_exit_codes.py keeps it equal.
EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_UNREACHABLE, EXIT_INTERNAL, EXIT_INTERRUPTED = 0, 1, 2, 3, 4, 130
CHECKPOINT_ENV = "GPU_CLUSTER_CHECKPOINT"
RESTART_ENV = "GPU_CLUSTER_RESTART_COUNT"
DIR_ENV = "GPU_CLUSTER_CHECKPOINT_DIR"
INCOMPLETE_SUFFIXES = (".tmp", ".partial")


def complete(path, marker):
    if os.path.basename(path).startswith(".") or path.endswith(INCOMPLETE_SUFFIXES):
        return False
    if marker:
        return os.path.isdir(path) and os.path.isfile(os.path.join(path, marker))
    return os.path.exists(path)


def newest_checkpoint(directory, marker=".complete"):
    """The newest complete checkpoint in `directory`, or None (also when it does not exist)."""
    try:
        names = os.listdir(directory)
    except OSError:
        return None
    found = []
    for name in names:
        path = os.path.join(directory, name)
        if complete(path, marker):
            found.append((os.stat(path).st_mtime, name, path))
    return max(found)[2] if found else None


def restart_count(environ):
    try:
        return int(environ.get("SLURM_RESTART_COUNT", "0") or 0)
    except ValueError:
        return 0


class Refused(Exception):
    """Why the command is not started, and the exit code (usage 2, a stopped loop 1)."""

    def __init__(self, message, code):
        super().__init__(message)
        self.code = code


def plan(args, environ):
    """(argv, extra environment, message) for the command, or raise Refused with a reason."""
    directory = args.checkpoint_dir or environ.get(DIR_ENV, "")
    if not directory:
        raise Refused(f"gpu-cluster-run: no checkpoint directory: pass --checkpoint-dir or set {DIR_ENV}", EXIT_USAGE)
    if not args.command:
        raise Refused("gpu-cluster-run: no command after --", EXIT_USAGE)
    if os.path.exists(directory) and not os.path.isdir(directory):
        raise Refused(f"gpu-cluster-run: checkpoint directory {directory} is a file, not a directory", EXIT_USAGE)
    restarts = restart_count(environ)
    if args.max_restarts is not None and restarts > args.max_restarts:
        raise Refused(
            f"gpu-cluster-run: restart {restarts} is over --max-restarts {args.max_restarts}; not starting again",
            EXIT_FAILED,
        )
    checkpoint = newest_checkpoint(directory, args.marker)
    argv = list(args.command)
    if checkpoint and args.resume_flag:
        argv += [args.resume_flag, checkpoint]
    extra = {CHECKPOINT_ENV: checkpoint or "", RESTART_ENV: str(restarts), DIR_ENV: directory}
    if checkpoint:
        message = f"gpu-cluster-run: restart {restarts}, resuming from {checkpoint}"
    else:
        message = f"gpu-cluster-run: restart {restarts}, no complete checkpoint in {directory}: starting fresh"
    return argv, extra, message


def _count(text):
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is out of range: give a whole number of at least 0")
    return value


_count.__name__ = "count"


def parser():
    p = argparse.ArgumentParser(
        prog="gpu-cluster-run",
        description="resume a training command from its newest complete checkpoint",
        epilog="example:\n  gpu-cluster-run --checkpoint-dir /fsx/ckpt --resume-flag=--resume -- python train.py",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--version", action="version", version=f"gpu-cluster-run (gpu-cluster) {_version()}")
    p.add_argument("--checkpoint-dir", help=f"where the checkpoints are (default ${DIR_ENV})")
    p.add_argument(
        "--marker", default=".complete", help="file that marks a checkpoint directory complete (default: .complete)"
    )
    p.add_argument("--resume-flag", help="append FLAG PATH to the command when a checkpoint exists (default: none)")
    p.add_argument(
        "--max-restarts", type=_count, help="refuse to start when SLURM_RESTART_COUNT is over this (default: no limit)"
    )
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND [ARG...]")
    return p


def _version():
    """The payload's version (lib/version beside bin/), else "unknown"."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "lib", "version")
    try:
        with open(path, encoding="utf-8") as f:
            return f.read(200).strip() or "unknown"
    except OSError:
        return "unknown"


def main(argv=None, environ=None, execvpe=os.execvpe):
    """Execs the command (no return); otherwise the exit code: 2 usage or a command that
    cannot be started, 1 the restart loop stopped (--max-restarts)."""
    environ = dict(os.environ if environ is None else environ)
    args = parser().parse_args(argv)
    if args.command[:1] == ["--"]:
        args.command = args.command[1:]
    try:
        cmd, extra, message = plan(args, environ)
    except Refused as e:
        print(e, file=sys.stderr)
        return e.code
    print(message, file=sys.stderr, flush=True)
    try:
        execvpe(cmd[0], cmd, {**environ, **extra})
    except OSError as e:
        print(f"gpu-cluster-run: cannot start {cmd[0]}: {e.strerror or e}", file=sys.stderr)
        return EXIT_USAGE
    return EXIT_OK  # only with a test's execvpe that returns


if __name__ == "__main__":
    sys.exit(main())
