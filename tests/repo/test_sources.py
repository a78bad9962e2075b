"""The repository stands alone: every cited source key is defined in docs/sources.md,
and nothing points at documents outside the repository."""

from __future__ import annotations

import ast
import io
import os
import re
import tokenize
from pathlib import Path

import pytest

from model.catalog import CATALOG

ROOT = Path(__file__).resolve().parents[2]
SOURCES_MD = ROOT / "docs" / "sources.md"
THIS_FILE = Path(__file__).resolve()

# Not part of the repository's own text: VCS data, caches, environments, rendered copies.
SKIP_DIRS = {
    ".git",
    "__pycache__",
    ".pytest_cache",
    ".mypy_cache",
    ".ruff_cache",
    "venv",
    ".venv",
    "node_modules",
    "build",
    "dist",
}
# Rendered golden files mirror the templates (checked there); tests/data holds
# third-party logs and fixtures whose brackets are not citations.
CITATION_SKIP = (ROOT / "tests" / "golden", ROOT / "tests" / "data")
REFERENCE_SKIP = (ROOT / "tests" / "golden",)

# A citation: `[KEY]`, KEY upper case letters/digits in dash-separated parts, starting
# with a letter, not glued to a word before it (`values[NAME]` is indexing) and not a
# Markdown link (`[TEXT](url)`).
CITATION = re.compile(r"(?<![\w\[])\[([A-Z][A-Z0-9]*(?:-[A-Z0-9]+)*)\](?![(\w])")
# A definition row in docs/sources.md: `| [KEY] | ...`.
DEFINITION = re.compile(r"^\|\s*\[([A-Z][A-Z0-9]*(?:-[A-Z0-9]+)*)\]\s*\|", re.M)

# Pointers to documents outside the repository. Precise on purpose: the NoCloud seed
# directory, `munged --seed-file`, or a constant named IMAGE_FACTS are normal text.
OUTSIDE_REFERENCES = [
    re.compile(r"\.\./shared\b"),
    re.compile(r"\bshared/(?:design|seeds|vendor)\b"),
    re.compile(r"(?<![\w])FACTS(?![\w])"),  # the outside facts file, by name, number or section
    re.compile(r"\bseeds?\s+\d{1,3}\b", re.I),  # "seed 000", "seed 002 section 17"
    re.compile(r"\bseed's\b", re.I),  # "the seed's order", "seed's keys"
    re.compile(r"\(seed[:;,)]", re.I),  # "(seed: ...)", "(seed)", "(seed, ...)"; not `(seed / "x")`
    re.compile(r"\bseed\s*[\"“:]", re.I),  # 'seed "How to read ..."', "seed: 1 CPU ..."
    re.compile(
        r"\bseed\s+(?:step|procedure|reference|topology|keys|sweeps?|size|"
        r"troubleshooting|order|section|§)\b",
        re.I,
    ),
]

TEXT_SUFFIXES = {
    ".py",
    ".sh",
    ".md",
    ".j2",
    ".conf",
    ".service",
    ".yaml",
    ".yml",
    ".toml",
    ".cfg",
    ".ini",
    ".in",
    ".txt",
    ".mk",
    ".json",
}
TEXT_NAMES = {"Makefile", "run", "gpu-cluster-boot", "gpu-cluster-fetch"}


def _repo_files() -> list[Path]:
    out = []
    for dirpath, dirnames, filenames in os.walk(ROOT):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS)  # prune, do not descend
        for name in sorted(filenames):
            path = Path(dirpath) / name
            if path.is_symlink() or not path.is_file():
                continue
            if path.suffix in TEXT_SUFFIXES or name in TEXT_NAMES or _has_shebang(path):
                out.append(path)
    return out


def _has_shebang(path: Path) -> bool:
    try:
        with path.open("rb") as f:
            return f.read(2) == b"#!"
    except OSError:
        return False


def _under(path: Path, dirs: tuple[Path, ...]) -> bool:
    return any(path.is_relative_to(d) for d in dirs)


def _python_prose(text: str) -> str:
    """Comments and docstrings of a Python file (string literals in code are data)."""
    parts = [tok.string for tok in tokenize.generate_tokens(io.StringIO(text).readline) if tok.type == tokenize.COMMENT]
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=False)
            if doc:
                parts.append(doc)
    return "\n".join(parts)


def _hash_comment_prose(text: str) -> str:
    """`#` comments of shell, config and template files (templated Python included)."""
    return "\n".join(line[line.index("#") :] for line in text.splitlines() if "#" in line)


def prose(path: Path, text: str) -> str:
    if path.suffix == ".md":
        return text
    if path.suffix == ".py":
        return _python_prose(text)
    if path.name.endswith(".py.j2"):
        # Jinja-templated Python does not parse; its docstring sits in the first lines.
        return _hash_comment_prose(text) + "\n" + "\n".join(re.findall(r'"""(.*?)"""', text, re.S))
    return _hash_comment_prose(text)


def defined_keys() -> set[str]:
    return set(DEFINITION.findall(SOURCES_MD.read_text(encoding="utf-8")))


def cited_keys() -> dict[str, list[str]]:
    cites: dict[str, list[str]] = {}
    for path in _repo_files():
        if path in (SOURCES_MD, THIS_FILE) or _under(path, CITATION_SKIP):
            continue
        # Prose is comments and docstrings cut from the text, so a file whose whole text
        # has no citation has none in its prose either (and is not tokenized and parsed).
        text = path.read_text(encoding="utf-8")
        if not CITATION.search(text):
            continue
        for key in CITATION.findall(prose(path, text)):
            cites.setdefault(key, []).append(str(path.relative_to(ROOT)))
    return cites


def test_sources_table_defines_each_key_once_with_a_public_url() -> None:
    rows = [line for line in SOURCES_MD.read_text(encoding="utf-8").splitlines() if DEFINITION.match(line)]
    keys = [DEFINITION.match(row).group(1) for row in rows]  # type: ignore[union-attr]
    assert len(keys) == len(set(keys)), sorted(k for k in keys if keys.count(k) > 1)
    assert len(keys) >= 30
    for row in rows:
        cells = [c.strip() for c in row.strip().strip("|").split("|")]
        assert len(cells) == 4, row
        assert re.fullmatch(r"https://\S+", cells[2]), f"{cells[0]}: URL cell {cells[2]!r}"
        assert cells[1] and cells[3], row


def test_every_cited_key_is_defined() -> None:
    cites = cited_keys()
    assert "PC-5797" in cites and "EC2-UD" in cites  # the scan reaches comments and docstrings
    missing = {k: v for k, v in cites.items() if k not in defined_keys()}
    assert not missing, f"cited but not defined in docs/sources.md: {missing}"


def test_catalog_source_keys_are_defined() -> None:
    defined = defined_keys()
    for name, spec in CATALOG.items():
        assert spec.sources, name
        for fields, source in spec.sources.items():
            key = source.split()[0]
            assert key in defined, f"{name}.sources[{fields!r}]: {key} not in docs/sources.md"


def test_nothing_refers_to_documents_outside_the_repository() -> None:
    hits = []
    for path in _repo_files():
        if path == THIS_FILE or _under(path, REFERENCE_SKIP):
            continue
        text = path.read_text(encoding="utf-8")
        found = [p for p in OUTSIDE_REFERENCES if p.search(text)]  # then the lines, for the report
        for n, line in enumerate(text.splitlines() if found else [], 1):
            if any(p.search(line) for p in found):
                hits.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert not hits, "\n".join(hits)


@pytest.mark.parametrize(
    "line",
    [
        '# Pinned versions (seed 000 "Validated environment").',
        "fails under a low memlock (seed 002 §17).",
        "Sources (full references in " + "../" + "shared/" + "design/" + "FA" + "CTS.md section 1):",
        "# Capacity Blocks hold at most 64 instances each (" + "FA" + "CTS 3.2, [CB-USE]).",
        "as the seed's salloc line",
        "nothing forces IB (seed troubleshooting)",
        "(seed: 92 vs 368 GB/s)",
        "#   --export=ALL,...: a bare list drops PATH (seed); no NCCL_NET",
    ],
)
def test_outside_reference_patterns_catch_citations(line: str) -> None:
    assert any(p.search(line) for p in OUTSIDE_REFERENCES)


@pytest.mark.parametrize(
    "line",
    [
        'SEED_DIR = "var/lib/cloud/seed/nocloud"',
        "- the NoCloud seed and `datasource_list: [ NoCloud, None ]`",
        "# datasource_list: only our seed (None = keep booting if the seed is unreadable",
        "f\"--seed-file={m / 'munged.seed'}\",",
        "spec = profile.test_instance_spec(profile.slurmd_facts(IMAGE_FACTS))",
        "| `torch_allreduce_seed_reference.log` | synthetic |",
        'assert (seed / "user-data").read_bytes() == raw',
    ],
)
def test_outside_reference_patterns_leave_normal_text(line: str) -> None:
    assert not any(p.search(line) for p in OUTSIDE_REFERENCES)


@pytest.mark.parametrize(
    ("text", "keys"),
    [
        ("EC2 takes at most 16384 bytes [EC2-UD].", ["EC2-UD"]),
        ("p5 [PC-5797] and [K-IT][CNI]", ["PC-5797", "K-IT", "CNI"]),
        ('"""Replace `@NAME@` with values[NAME], as the boot does."""', []),
        ("see [the guide](https://example.invalid/x) and [FOO](bar)", []),
    ],
)
def test_citation_pattern(text: str, keys: list[str]) -> None:
    assert CITATION.findall(text) == keys


def test_python_prose_is_comments_and_docstrings_only() -> None:
    text = (
        '"""Module [EC2-UD]."""\n'
        'PAT = r"@([A-Z][A-Z0-9_]*)@"  # [CB-USE]\n'
        'def f():\n    """[PC-5797]"""\n    return ["[NOT-PROSE]"]\n'
    )
    assert sorted(CITATION.findall(_python_prose(text))) == ["CB-USE", "EC2-UD", "PC-5797"]
