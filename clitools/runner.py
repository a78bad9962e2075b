"""The guarded entry point every package CLI runs its body in: a CliError becomes its
lines and its exit code, an interrupt 130, anything else (a bug) one line and exit 4,
with the traceback only when GPU_CLUSTER_DEBUG is set."""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Callable
from typing import TextIO

from clitools import exits
from clitools.errors import CliError
from model.errors import one_line

# The longest message an internal error line repeats (the type and the start say enough).
MAX_MESSAGE = 500


def internal_error_line(prog: str, err: BaseException) -> str:
    text = one_line(" ".join(str(err).split()))[:MAX_MESSAGE]
    return f"{prog}: internal error: {type(err).__name__}: {text}; rerun with {exits.DEBUG_ENV}=1 for the traceback"


def guarded(prog: str, body: Callable[[], int], err: TextIO | None = None) -> int:
    stream = err or sys.stderr
    try:
        return body()
    except CliError as e:
        for line in e.lines:
            print(one_line(line), file=stream)
        return e.code
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=stream)
        return exits.INTERRUPTED
    except (Exception, MemoryError) as e:  # noqa: BLE001 - a bug: one line, the traceback on request
        if os.environ.get(exits.DEBUG_ENV):
            traceback.print_exc(file=stream)
        print(internal_error_line(prog, e), file=stream)
        return exits.INTERNAL
