"""The shape limits of issue 16, measured: ruff has no rule for a function's length.

- No function (or method, nested ones included) over MAX_FUNCTION_LINES lines outside
  tests, measured as `end_lineno - lineno` of its syntax-tree node (the decorators and
  the signature's first line are not counted, the docstring is).
- No file under model/ over MAX_MODEL_FILE_LINES lines: one module per stack-file
  section keeps each one readable on its own.
- No test module imports another (helpers they share live in tests/support/).

Every offender is named in one failure, so a run shows the whole list at once.
"""

from __future__ import annotations

import ast
import os
from collections.abc import Iterator
from pathlib import Path

MAX_FUNCTION_LINES = 60
MAX_MODEL_FILE_LINES = 400


def _repo_root() -> Path:
    # Found by its pyproject.toml, not by a fixed depth: the test tree is being regrouped.
    for parent in Path(__file__).resolve().parents:
        if (parent / "pyproject.toml").is_file():
            return parent
    raise AssertionError(f"no pyproject.toml above {__file__}")


ROOT = _repo_root()
# tests/ holds the test code (golden files included); venv/ and build/ are not ours.
SKIPPED_TOP = {"tests", "venv", "build"}


def _source_files() -> Iterator[Path]:
    for dirpath, dirnames, filenames in os.walk(ROOT):
        here = Path(dirpath)
        dirnames[:] = sorted(
            d
            for d in dirnames
            if not d.startswith(".") and d != "__pycache__" and not (here == ROOT and d in SKIPPED_TOP)
        )
        for name in sorted(filenames):
            if name.endswith(".py"):
                yield here / name


def _length(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    # ast.parse always sets end_lineno; the fallback only satisfies its Optional type.
    return (node.end_lineno or node.lineno) - node.lineno


def long_functions(path: Path, root: Path = ROOT, limit: int = MAX_FUNCTION_LINES) -> list[str]:
    """`path:line name (N lines)` for each function in `path` longer than `limit`, in line order."""
    tree = ast.parse(path.read_text(), filename=str(path))
    rel = path.relative_to(root)
    functions = (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef))
    long = sorted((n for n in functions if _length(n) > limit), key=lambda n: n.lineno)
    return [f"{rel}:{n.lineno} {n.name} ({_length(n)} lines)" for n in long]


def test_the_walk_sees_the_program_and_skips_the_tests():
    files = {p.relative_to(ROOT).as_posix() for p in _source_files()}
    assert {"infra/cluster.py", "userdata/layout.py", "__main__.py"} <= files
    assert not any(f.startswith(("tests/", "venv/", "build/")) for f in files)


def test_the_measure_counts_end_lineno_minus_lineno(tmp_path):
    # 60 lines after the `def` line is the limit; a method one line longer is named.
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES))
    nested = body.replace("\n", "\n    ")
    probe = tmp_path / "probe.py"
    probe.write_text(f"def at_limit():\n{body}\n\n\nclass C:\n    def over(self):\n    {nested}\n        return 0\n")
    assert long_functions(probe, root=tmp_path) == [f"probe.py:{MAX_FUNCTION_LINES + 5} over (61 lines)"]


def test_no_function_over_60_lines_outside_tests():
    offenders = [line for path in _source_files() for line in long_functions(path)]
    assert not offenders, (
        f"{len(offenders)} function(s) over {MAX_FUNCTION_LINES} lines (end_lineno - lineno); "
        "split them into named pieces:\n  " + "\n  ".join(offenders)
    )


def test_no_model_file_over_400_lines():
    offenders = [
        f"{p.relative_to(ROOT)} ({n} lines)"
        for p in sorted((ROOT / "model").rglob("*.py"))
        if (n := len(p.read_text().splitlines())) > MAX_MODEL_FILE_LINES
    ]
    assert not offenders, f"model/ files over {MAX_MODEL_FILE_LINES} lines:\n  " + "\n  ".join(offenders)


def direct_extractions(path: Path, root: Path = ROOT) -> list[str]:
    """`path:line` for each `<x>.extractall(...)` call in `path`."""
    tree = ast.parse(path.read_text(), filename=str(path))
    calls = (n for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute))
    return [f"{path.relative_to(root)}:{n.lineno}" for n in calls if n.func.attr == "extractall"]  # type: ignore[attr-defined]


def test_the_extraction_probe_finds_a_direct_call(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text("import tarfile\n\nwith tarfile.open('a') as t:\n    t.extractall('d', filter='data')\n")
    assert direct_extractions(probe, root=tmp_path) == ["probe.py:4"]


def test_every_tar_extraction_goes_through_model_archive():
    # Debian 12's python3 (3.11.2) has no extractall(filter=...): a direct call with it
    # broke the lanes' Slurm build on a machine whose venv came from that interpreter.
    offenders = [
        line for path in _source_files() if path != ROOT / "model" / "archive.py" for line in direct_extractions(path)
    ]
    assert not offenders, "extract tar archives with model.archive.extract_all:\n  " + "\n  ".join(offenders)


def imports_of_test_modules(path: Path, root: Path = ROOT) -> list[str]:
    """`path:line module` for each import in `path` of a test module (a `test_*` module
    anywhere under tests/, by absolute or relative import)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = ("." * node.level) + (node.module or "")
            # `from tests.x import test_y` names the module in the imported names
            names = [base] + [f"{base}.{a.name}" if node.module else f"{base}{a.name}" for a in node.names]
        else:
            continue
        for name in names:
            parts = name.lstrip(".").split(".")
            if name.startswith(("tests.", ".")) and parts[-1].startswith("test_"):
                found.append(f"{path.relative_to(root)}:{node.lineno} {name}")
                break
    return found


def test_the_import_probe_finds_test_modules_by_any_spelling(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text(
        "import tests.ops.test_status\n"
        "from tests.model.test_config import CASES\n"
        "from tests.model import test_config\n"
        "from .test_sibling import helper\n"
        "from tests.support.fake_slurm import FakeSlurm\n"
        "from tests.support import test_data_maker\n"
    )
    assert imports_of_test_modules(probe, root=tmp_path) == [
        "probe.py:1 tests.ops.test_status",
        "probe.py:2 tests.model.test_config",
        "probe.py:3 tests.model.test_config",
        "probe.py:4 .test_sibling",
        "probe.py:6 tests.support.test_data_maker",
    ]


def test_no_test_module_imports_another():
    # Shared helpers live in tests/support/; a test module importing another runs that
    # module's fixtures and collection side effects in a place nobody reads for them.
    tests = ROOT / "tests"
    files = sorted(p for p in tests.rglob("*.py") if p.relative_to(tests).parts[0] != "golden")
    offenders = [line for path in files for line in imports_of_test_modules(path)]
    assert not offenders, "move what they share to tests/support/:\n  " + "\n  ".join(offenders)
