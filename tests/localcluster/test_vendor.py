"""`make vendor` against a file:// mirror and a loopback HTTP server: pinned files are
kept, other bytes are refused with both digests, an unreachable source says which file
to put where."""

from __future__ import annotations

import hashlib
import http.server
import io
import threading
from dataclasses import replace
from functools import partial
from pathlib import Path

import pytest

from localcluster import vendor
from model import pins


@pytest.fixture
def release(tmp_path, monkeypatch) -> tuple[Path, tuple[pins.VendorTarball, ...]]:
    """Three small release files in a mirror directory, pinned by their real digests."""
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    fake = []
    for pin in pins.VENDOR:
        body = f"release {pin.file}\n".encode() * 1000
        (mirror / pin.file).write_bytes(body)
        fake.append(replace(pin, sha256=hashlib.sha256(body).hexdigest()))
    monkeypatch.setattr(pins, "VENDOR", tuple(fake))
    return mirror, tuple(fake)


def _run(dest: Path, mirror: str | None, **kw) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    rc = vendor.run(dest, mirror, out=out, err=err, **kw)
    return rc, out.getvalue(), err.getvalue()


def test_file_mirror_fills_the_directory_then_only_checks(release, tmp_path):
    mirror, fake = release
    dest = tmp_path / "vendor"
    rc, out, err = _run(dest, mirror.as_uri())
    assert (rc, err) == (0, "")
    assert out.splitlines() == [f"vendor: fetched {dest / p.file} from {mirror.as_uri()}/{p.file}" for p in fake]
    assert sorted(p.name for p in dest.iterdir()) == sorted(p.file for p in fake)  # no .part left
    rc, out, _ = _run(dest, "file:///nonexistent")  # present and pinned: nothing fetched
    assert rc == 0 and all(line.startswith("vendor: ok ") for line in out.splitlines())


def test_loopback_http_mirror(release, tmp_path):
    mirror, fake = release
    handler = partial(http.server.SimpleHTTPRequestHandler, directory=str(mirror))
    handler.log_message = lambda *a: None  # type: ignore[attr-defined]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        rc, out, err = _run(tmp_path / "vendor", url, timeout=10)
    finally:
        server.shutdown()
        server.server_close()
    assert (rc, err) == (0, "")
    assert [line.split(" from ")[1] for line in out.splitlines()] == [f"{url}/{p.file}" for p in fake]


def test_other_bytes_are_refused_and_not_kept(release, tmp_path):
    mirror, fake = release
    (mirror / fake[1].file).write_bytes(b"tampered")
    dest = tmp_path / "vendor"
    rc, _, err = _run(dest, mirror.as_uri())
    assert rc == 1
    bad = hashlib.sha256(b"tampered").hexdigest()
    assert err.splitlines() == [
        f"vendor: {mirror.as_uri()}/{fake[1].file}: sha256 {bad}, but model/pins.py pins {fake[1].sha256}; "
        f"not kept ({fake[1].source})"
    ]
    assert not (dest / fake[1].file).exists() and not list(dest.glob(".*part"))
    assert (dest / fake[0].file).exists() and (dest / fake[2].file).exists()


def test_a_present_file_with_other_bytes_is_named(release, tmp_path):
    mirror, fake = release
    dest = tmp_path / "vendor"
    dest.mkdir()
    (dest / fake[0].file).write_bytes(b"old")
    rc, _, err = _run(dest, mirror.as_uri())
    assert rc == 1
    assert err.startswith(f"vendor: {dest / fake[0].file}: sha256 {hashlib.sha256(b'old').hexdigest()}, but")
    assert "delete it and run `make vendor` again" in err


def test_no_network_says_which_file_to_put_where(release, tmp_path):
    _, fake = release
    dest = tmp_path / "vendor"
    rc, out, err = _run(dest, None, opener=_refuse)
    assert (rc, out) == (3, "")
    lines = err.splitlines()
    assert lines[:3] == [f"vendor: cannot download {p.url}: [Errno 101] Network is unreachable" for p in fake]
    assert (
        lines[3] == f"vendor: without a network, put these files in {dest}/ and run `make vendor` again to check them:"
    )
    assert lines[4:] == [f"vendor:   {p.file}  sha256 {p.sha256}  from {p.url}" for p in fake]


def _refuse(url, timeout):
    raise OSError(101, "Network is unreachable")


def test_pins_name_upstream_release_urls_for_every_lane_source():
    assert [p.file for p in pins.VENDOR] == ["enroot-4.1.2.tar.gz", "pyxis-0.24.0.tar.gz", "slurm-23.11.4.tar.gz"]
    for p in pins.VENDOR:
        assert p.url.startswith("https://github.com/") and p.url.endswith(".tar.gz")
        assert len(p.sha256) == 64 and p.source
