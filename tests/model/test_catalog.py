"""The catalog is what every node line, EFA layout and threshold is rendered from."""

import pytest

from model.catalog import CATALOG, REAL_MEMORY_FRACTION, SUPPORTED_INSTANCE_TYPES, InstanceSpec

# (type, gpus, vcpus, sockets, cores/socket, threads, EFA, network cards, EFA Gbit/s)
EXPECTED = [
    ("g6e.48xlarge", 8, 192, 2, 48, 2, 4, 4, 400),
    ("p4d.24xlarge", 8, 96, 2, 24, 2, 4, 4, 400),
    ("p4de.24xlarge", 8, 96, 2, 24, 2, 4, 4, 400),
    ("p5.48xlarge", 8, 192, 2, 48, 2, 32, 32, 3200),
    ("p5e.48xlarge", 8, 192, 2, 48, 2, 32, 32, 3200),
    ("p5en.48xlarge", 8, 192, 2, 48, 2, 16, 16, 3200),
    ("p6-b200.48xlarge", 8, 192, 2, 48, 2, 8, 8, 3200),
]


def test_catalog_holds_exactly_the_supported_types():
    assert tuple(sorted(t[0] for t in EXPECTED)) == SUPPORTED_INSTANCE_TYPES


@pytest.mark.parametrize("name,gpus,vcpus,sockets,cores,threads,efa,cards,gbps", EXPECTED)
def test_figures(name, gpus, vcpus, sockets, cores, threads, efa, cards, gbps):
    s = CATALOG[name]
    assert (s.gpus, s.vcpus, s.sockets, s.cores_per_socket, s.threads_per_core) == (
        gpus,
        vcpus,
        sockets,
        cores,
        threads,
    )
    assert (s.efa_count, s.network_cards, s.efa_gbps) == (efa, cards, gbps)
    assert s.cpus_per_gpu == vcpus // gpus
    assert s.sources, f"{name} cites no source"


def test_p5_real_memory_is_below_what_slurmd_reports():
    # aws/aws-parallelcluster#5797: slurmd -C on p5.48xlarge prints RealMemory=2047961.
    assert CATALOG["p5.48xlarge"].real_memory_mib == int(2097152 * REAL_MEMORY_FRACTION)
    assert CATALOG["p5.48xlarge"].real_memory_mib < 2047961


def test_derived_topology_is_marked_unconfirmed():
    # Only p4d/p4de (AWSOME-PC) and p5 (PC-5797) have a published slurmd -C topology.
    for name in ("g6e.48xlarge", "p5e.48xlarge", "p5en.48xlarge", "p6-b200.48xlarge"):
        assert {"sockets", "cores_per_socket"} <= set(CATALOG[name].unconfirmed)
    assert CATALOG["p5.48xlarge"].unconfirmed == ()


def test_inconsistent_topology_is_rejected():
    with pytest.raises(ValueError, match="sockets x cores x threads"):
        InstanceSpec(
            name="bad",
            gpu_model="x",
            gpus=8,
            gpu_memory_mib=1,
            vcpus=100,
            sockets=2,
            cores_per_socket=48,
            threads_per_core=2,
            memory_mib=1,
            network_cards=1,
            efa_count=1,
            efa_on_card0=True,
            local_nvme_gb=0,
            efa_gbps=1,
        )


def test_smoke_type_is_the_cheap_efa_type_karpenter_and_aws_describe():
    # [K-IT] g6e.48xlarge: 8 L40S of 45776 MiB, 1572864 MiB, 7600 GB NVMe, 400000 Mbit/s,
    # vpc.amazonaws.com/efa 4; [EFA-ACC]: G6e has up to four network cards.
    s = CATALOG["g6e.48xlarge"]
    assert (s.gpu_model, s.gpu_memory_mib, s.memory_mib, s.local_nvme_gb) == ("L40S", 45776, 1572864, 7600)
    assert (s.pcie_gen, s.pcie_width, s.efa_on_card0) == (4, 16, True)
