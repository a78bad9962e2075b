"""localcluster/apt_repo.py: a flat apt repository that apt itself reads and checks.

apt runs here as an ordinary process with its state in a temp directory (no root, no
chroot): `apt-get update` reads the Release and Packages files, `apt-cache policy` shows
the candidate, `apt-get download` fetches and checks the .deb against the hashes.
"""

from __future__ import annotations

import gzip
import hashlib

import pytest

from localcluster import apt_repo
from tests.support.apt_sandbox import AptBox, make_deb, missing_tools

pytestmark = pytest.mark.skipif(missing_tools() is not None, reason=str(missing_tools()))


@pytest.fixture
def debs(tmp_path):
    out = tmp_path / "debs"
    out.mkdir()
    return {
        "a1": make_deb(out, "gcl-alpha", "1.0"),
        "a2": make_deb(out, "gcl-alpha", "1.0+local1", payload="patched"),
        "b": make_deb(out, "gcl-beta", "2:3.4-1", arch="amd64", depends="gcl-alpha (>= 1.0)"),
    }


def _box(tmp_path, repo, preferences: str = "") -> AptBox:
    box = AptBox(tmp_path / "apt", f"deb [trusted=yes] file:{repo.root} ./\n", preferences)
    r = box.run("apt-get", "update")
    assert r.returncode == 0, r.stdout + r.stderr
    return box


def test_packages_and_release_carry_every_hash_apt_checks(tmp_path, debs):
    repo = apt_repo.build_repo("demo", [debs["b"], debs["a1"]], cache=tmp_path / "cache")
    assert [(p.name, p.version, p.filename) for p in repo.packages] == [
        ("gcl-alpha", "1.0", "gcl-alpha_1.0_all.deb"),
        ("gcl-beta", "2:3.4-1", "gcl-beta_3.4-1_amd64.deb"),
    ]
    packages = (repo.root / "Packages").read_bytes()
    assert gzip.decompress((repo.root / "Packages.gz").read_bytes()) == packages
    first = packages.decode().split("\n\n")[0]
    data = (repo.root / "gcl-alpha_1.0_all.deb").read_bytes()
    assert f"SHA256: {hashlib.sha256(data).hexdigest()}" in first.splitlines()
    assert f"Size: {len(data)}" in first.splitlines()
    assert "Description: test package\n a second line\n" in first
    release = (repo.root / "Release").read_text()
    assert f" {hashlib.sha256(packages).hexdigest()} {len(packages)} Packages\n" in release
    assert "Label: gpu-cluster-demo\n" in release and "Architectures: amd64\n" in release


def test_the_same_debs_give_the_same_bytes_and_the_cached_directory(tmp_path, debs):
    one = apt_repo.build_repo("demo", [debs["a1"], debs["b"]], cache=tmp_path / "c1")
    two = apt_repo.build_repo("demo", [debs["b"], debs["a1"]], cache=tmp_path / "c2")
    assert one.root.name == two.root.name
    for name in ("Packages", "Packages.gz", "Release"):
        assert (one.root / name).read_bytes() == (two.root / name).read_bytes()
    (one.root / "marker").write_text("")
    assert apt_repo.build_repo("demo", [debs["a1"], debs["b"]], cache=tmp_path / "c1").root == one.root
    other = apt_repo.build_repo("demo", [debs["a2"], debs["b"]], cache=tmp_path / "c1")
    assert other.root != one.root and other.version_of("gcl-alpha") == "1.0+local1"


def test_apt_reads_the_repository_and_takes_the_newer_version(tmp_path, debs):
    repo = apt_repo.build_repo("demo", [debs["a1"], debs["a2"], debs["b"]], cache=tmp_path / "cache")
    box = _box(tmp_path, repo)
    policy = box.run("apt-cache", "policy", "gcl-alpha").stdout
    assert "Candidate: 1.0+local1" in policy
    r = box.run("apt-get", "download", "gcl-alpha", "gcl-beta")
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in (box.root / "download").iterdir()) == [
        "gcl-alpha_1.0+local1_all.deb",
        "gcl-beta_2%3a3.4-1_amd64.deb",  # apt's own name for an epoch
    ]


def test_a_changed_deb_is_refused_by_its_hash(tmp_path, debs):
    repo = apt_repo.build_repo("demo", [debs["a1"]], cache=tmp_path / "cache")
    box = _box(tmp_path, repo)
    served = repo.root / "gcl-alpha_1.0_all.deb"
    data = bytearray(served.read_bytes())
    data[-3] ^= 0xFF
    served.write_bytes(bytes(data))
    r = box.run("apt-get", "download", "gcl-alpha")
    assert r.returncode != 0 and "Hash Sum mismatch" in r.stdout + r.stderr


def test_a_changed_packages_file_is_refused_by_the_release_hashes(tmp_path, debs):
    repo = apt_repo.build_repo("demo", [debs["a1"]], cache=tmp_path / "cache")
    packages = repo.root / "Packages"
    packages.write_text(packages.read_text().replace("Version: 1.0", "Version: 9.0"))
    (repo.root / "Packages.gz").unlink()
    box = AptBox(tmp_path / "apt", repo.source_line().replace(repo.mount_point, str(repo.root)))
    r = box.run("apt-get", "update")
    assert "Hash Sum mismatch" in r.stdout + r.stderr or "unexpected size" in r.stdout + r.stderr
    assert "Candidate: 9.0" not in box.run("apt-cache", "policy", "gcl-alpha").stdout


def test_a_pin_makes_the_repositorys_version_win_over_a_newer_one(tmp_path, debs):
    old = apt_repo.build_repo("old", [debs["a1"]], cache=tmp_path / "cache")
    new = apt_repo.build_repo("new", [debs["a2"]], cache=tmp_path / "cache")
    files = old.apt_files(pin_priority=1001)
    pin = files[f"/etc/apt/preferences.d/{old.label}.pref"].decode()
    assert pin == "Package: *\nPin: release l=gpu-cluster-old\nPin-Priority: 1001\n"
    sources = "".join(f"deb [trusted=yes] file:{r.root} ./\n" for r in (old, new))
    box = AptBox(tmp_path / "apt", sources)
    # in the parts directory under its own name, as a root gets it (apt skips some names)
    (box.root / "parts" / f"{old.label}.pref").write_text(pin)
    assert box.run("apt-get", "update").returncode == 0
    assert "Candidate: 1.0\n" in box.run("apt-cache", "policy", "gcl-alpha").stdout
    # a dotted repository name keeps its pin file readable (".pref", not an extension "11")
    dotted = apt_repo.build_repo("old-1.11", [debs["a1"]], cache=tmp_path / "cache")
    assert list(dotted.apt_files(pin_priority=1001))[1] == "/etc/apt/preferences.d/gpu-cluster-old-1.11.pref"


def test_the_root_gets_a_trusted_file_source_at_the_mount_point(tmp_path, debs):
    repo = apt_repo.build_repo("slurm-23.11", [debs["a1"]], cache=tmp_path / "cache")
    assert repo.bind() == (str(repo.root), "/mnt/gpu-cluster-apt/slurm-23.11")
    assert repo.apt_files() == {
        "/etc/apt/sources.list.d/gpu-cluster-slurm-23.11.list": b"deb [trusted=yes] file:/mnt/gpu-cluster-apt/slurm-23.11 ./\n"
    }


@pytest.mark.parametrize(
    "name,given,said",
    [
        ("bad name", None, "repository name 'bad name'"),
        ("demo", [], "demo: no .deb files given"),
        ("demo", ["/nonexistent.deb"], "demo: not found: /nonexistent.deb"),
    ],
)
def test_bad_input_is_named(tmp_path, name, given, said, debs):
    with pytest.raises(apt_repo.AptRepoError, match=said):
        apt_repo.build_repo(name, given if given is not None else [debs["a1"]], cache=tmp_path / "cache")


def test_the_same_package_version_twice_is_refused(tmp_path, debs):
    copy = tmp_path / "copy.deb"
    copy.write_bytes(debs["a1"].read_bytes())
    with pytest.raises(apt_repo.AptRepoError, match="the same package twice: gcl-alpha_1.0_all"):
        apt_repo.build_repo("demo", [debs["a1"], copy], cache=tmp_path / "cache")


def test_a_file_that_is_not_a_deb_is_named(tmp_path):
    junk = tmp_path / "junk.deb"
    junk.write_text("not a deb")
    with pytest.raises(apt_repo.AptRepoError, match=r"junk.deb: not a readable .deb"):
        apt_repo.build_repo("demo", [junk], cache=tmp_path / "cache")


def test_a_rebuild_with_a_new_version_keeps_the_files_and_apt_upgrades_to_it(tmp_path, debs):
    """What an upgrade test serves: the same files under a newer version (a binNMU-style
    rebuild), which apt then prefers over the installed one."""
    import subprocess

    new = apt_repo.rebuild_with_version(debs["b"], "+gcl1", tmp_path / "rebuilt")
    assert new.name == "gcl-beta_3.4-1+gcl1_amd64.deb"
    old_fields, new_fields = dict(apt_repo.control_fields(debs["b"])), dict(apt_repo.control_fields(new))
    assert new_fields.pop("Version") == "2:3.4-1+gcl1"
    assert old_fields.pop("Version") == "2:3.4-1"
    assert new_fields == old_fields

    def files(deb):
        return subprocess.run(["dpkg-deb", "--contents", str(deb)], capture_output=True, text=True).stdout

    assert [ln.split()[-1] for ln in files(new).splitlines()] == [
        ln.split()[-1] for ln in files(debs["b"]).splitlines()
    ]
    again = apt_repo.rebuild_with_version(debs["b"], "+gcl1", tmp_path / "again")
    assert again.read_bytes() == new.read_bytes()  # byte-stable: the same repository, the same cache entry
    repo = apt_repo.build_repo("upgrade", [new, debs["a1"]], cache=tmp_path / "cache")
    box = _box(tmp_path, repo)
    r = box.run("apt-cache", "policy", "gcl-beta")
    assert "Candidate: 2:3.4-1+gcl1" in r.stdout, r.stdout


@pytest.mark.parametrize(
    ("suffix", "said"), [("", "version suffix ''"), ("~rc1", "is not newer than"), ("+a b", "version suffix")]
)
def test_a_rebuild_refuses_a_version_that_is_not_newer(tmp_path, debs, suffix, said):
    with pytest.raises(apt_repo.AptRepoError, match=said):
        apt_repo.rebuild_with_version(debs["a1"], suffix, tmp_path / "rebuilt")


def test_a_rebuild_moves_exact_pins_on_its_siblings(tmp_path):
    """libnuma-dev pins `libnuma1 (= 2.0.16-1)`: rebuilt together, the pin follows, so apt
    can upgrade both; pins on other packages and other versions stay."""
    out = tmp_path / "debs"
    out.mkdir()
    dev = make_deb(out, "gcl-lib-dev", "2.0-1", depends="gcl-lib1 (= 2.0-1), gcl-other (= 2.0-1), gcl-lib1x (= 2.0-1)")
    new = apt_repo.rebuild_with_version(dev, "+gcl1", tmp_path / "rebuilt", siblings=["gcl-lib1"])
    depends = dict(apt_repo.control_fields(new))["Depends"]
    assert depends == "gcl-lib1 (= 2.0-1+gcl1), gcl-other (= 2.0-1), gcl-lib1x (= 2.0-1)"
