"""Safe tar extraction on Pythons with and without tarfile's extraction filters (Debian
12's python3 is 3.11.2, which has none)."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

from model.archive import UnsafeArchive, extract_all

# tarfile's own refusal exists from 3.11.4 on (Debian 12's python3 is 3.11.2).
FILTER_ERROR = getattr(tarfile, "FilterError", UnsafeArchive)


def _tar(tmp_path: Path, *members: tuple[str, str]) -> Path:
    path = tmp_path / "a.tar"
    with tarfile.open(path, "w") as tar:
        for name, kind in members:
            info = tarfile.TarInfo(name)
            if kind.startswith("link:"):
                info.type, info.linkname = tarfile.SYMTYPE, kind[5:]
                tar.addfile(info)
            else:
                data = kind.encode()
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return path


@pytest.fixture(params=["with filter", "without filter"])
def python(request, monkeypatch):
    if request.param == "without filter":
        monkeypatch.delattr(tarfile, "data_filter", raising=False)
    return request.param


def test_an_ordinary_archive_is_extracted(tmp_path, python):
    src = _tar(tmp_path, ("top/a.txt", "hello"), ("top/link", "link:a.txt"))
    with tarfile.open(src) as tar:
        extract_all(tar, tmp_path / "out")
    assert (tmp_path / "out" / "top" / "a.txt").read_text() == "hello"
    assert (tmp_path / "out" / "top" / "link").read_text() == "hello"


@pytest.mark.parametrize("member", [("../evil.txt", "x"), ("/tmp/evil-i20.txt", "x"), ("top/l", "link:/etc/passwd")])
def test_nothing_lands_outside_the_directory(tmp_path, python, member):
    src = _tar(tmp_path, member)
    out = tmp_path / "out"
    out.mkdir()
    with tarfile.open(src) as tar:
        try:
            extract_all(tar, out)
        except (UnsafeArchive, FILTER_ERROR):
            refused = True
        else:
            # The data filter strips a leading "/" and extracts inside instead.
            refused = False
    assert not (tmp_path / "evil.txt").exists() and not Path("/tmp/evil-i20.txt").exists()
    if python == "without filter":
        assert refused
