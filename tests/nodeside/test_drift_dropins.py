"""The needrestart and unattended-upgrades drop-ins step 20 installs, read by the tools' own parsers.

needrestart's configuration is Perl: the drop-in is compiled (`perl -c`) and evaluated the
way needrestart's `needrestart.conf` evaluates `conf.d/*.conf` (`eval do { local(@ARGV, $/)
= $fn; <> }`), and the resulting `override_rc` is applied with needrestart's own selection
rule (the first matching key decides). The unattended-upgrades list is read by apt's own
configuration parser (`apt-config dump`), after a `50unattended-upgrades` with an empty list as
Ubuntu ships it, and matched with `re.match` as unattended-upgrade's `is_pkgname_in_blacklist`.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

CONF = Path(__file__).resolve().parents[2] / "nodeside" / "conf"
NEEDRESTART = CONF / "needrestart.conf"
UNATTENDED = CONF / "unattended-upgrades.conf"
OURS = ("munge.service", "slurmd.service", "slurmctld.service", "gpu-cluster-munge-responder.service")
OTHERS = ("cron.service", "ssh.service", "systemd-journald.service", "mungeproxy.service", "slurmdbd.service")

# needrestart's defaults for the keys involved (needrestart.conf ships `qr(^dbus) => 0` and
# other display-manager entries), then the drop-in, then needrestart's selection loop.
PERL = r"""
use strict; use warnings;
our %nrconf = (defno => 0, override_rc => { qr(^dbus) => 0, qr(^gdm) => 0 });
my $fn = shift;
eval do { local(@ARGV, $/) = $fn; <> };
die "Error parsing $fn: $@" if ($@);
foreach my $rc (@ARGV) {
    my $restart = !$nrconf{defno};
    foreach my $re (keys %{$nrconf{override_rc}}) {
        next unless ($rc =~ /$re/);
        $restart = $nrconf{override_rc}->{$re};
        last;
    }
    print "$rc ", ($restart ? "restart" : "skip"), "\n";
}
"""

needs_perl = pytest.mark.skipif(shutil.which("perl") is None, reason="perl not installed")


@needs_perl
def test_needrestart_dropin_compiles_as_perl():
    r = subprocess.run(["perl", "-c", str(NEEDRESTART)], capture_output=True, text=True)
    assert r.returncode == 0 and "syntax OK" in r.stderr, r.stderr


@needs_perl
def test_needrestart_never_restarts_munge_or_slurm_and_leaves_other_units_alone():
    r = subprocess.run(["perl", "-e", PERL, str(NEEDRESTART), *OURS, *OTHERS], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [f"{u} skip" for u in OURS] + [f"{u} restart" for u in OTHERS]


BLOCKED = (
    "linux-image-6.8.0-1015-aws",
    "linux-modules-6.8.0-1015-aws",
    "linux-headers-aws",
    "linux-aws",
    "lustre-client-modules-6.8.0-1015-aws",
    "lustre-client-modules-aws",
    "lustre-client-utils",
    "slurm-wlm",
    "slurm-wlm-basic-plugins",
    "slurmd",
    "slurmctld",
    "slurm-client",
    "libslurm40",
    "libpmix2",
    "libpmix-dev",
    "munge",
    "libmunge2",
)
ALLOWED = ("libc6", "openssl", "libssl3", "systemd", "curl", "cloud-init", "python3")


@pytest.fixture
def blacklist(tmp_path) -> list[str]:
    if shutil.which("apt-config") is None:
        pytest.skip("apt-config not installed")
    parts = tmp_path / "apt.conf.d"
    parts.mkdir()
    # Ubuntu's 50unattended-upgrades declares the list (empty by default)
    (parts / "50unattended-upgrades").write_text("Unattended-Upgrade::Package-Blacklist {\n};\n")
    shutil.copy(UNATTENDED, parts / "51gpu-cluster-unattended-upgrades")
    main = tmp_path / "apt.conf"
    main.write_text(f'Dir::Etc::main "/dev/null";\nDir::Etc::parts "{parts}/";\n')
    r = subprocess.run(
        ["apt-config", "dump", "Unattended-Upgrade::Package-Blacklist"],
        env={"APT_CONFIG": str(main), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr
    return re.findall(r'^Unattended-Upgrade::Package-Blacklist:: "(.*)";$', r.stdout, re.M)


def test_apt_reads_the_unattended_upgrades_blacklist(blacklist):
    assert blacklist == ["linux-", "lustre-", "slurm", "libslurm", "libpmix", "munge$", "libmunge"]


@pytest.mark.parametrize("pkg", BLOCKED)
def test_unattended_upgrades_skips_kernel_lustre_slurm_and_munge(blacklist, pkg):
    assert any(re.match(rx, pkg) for rx in blacklist)


@pytest.mark.parametrize("pkg", ALLOWED)
def test_unattended_upgrades_still_patches_everything_else(blacklist, pkg):
    assert not any(re.match(rx, pkg) for rx in blacklist)
