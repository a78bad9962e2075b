"""Instance catalog: the hardware facts every other layer is rendered from.

Pure data, no pulumi import, so the node renderer (userdata/) and the tests use it
directly. Every number carries its source key; `unconfirmed` names the fields that
are derived rather than published, so they can be checked on a real node (the boot
step compares them with `slurmd -C` and fails loudly when they disagree).

Sources (titles and URLs in docs/sources.md):
  [K-IT]      aws/karpenter-provider-aws website/.../reference/instance-types.md
              (generated from EC2 DescribeInstanceTypes: vCPU, memory MiB, GPUs,
              EFA max interfaces, local NVMe GB, network bandwidth)
  [K-FAKE]    aws/karpenter-provider-aws pkg/fake/zz_generated.describe_instance_types.go
              (raw DescribeInstanceTypes record for p5.48xlarge)
  [CNI]       aws/amazon-vpc-cni-k8s pkg/vpc/vpc_ip_resource_limit.go (network cards)
  [EFA-ACC]   docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa-acc-inst-types.html
              (EFA interface layout per card, per-card bandwidth)
  [AWSOME-PC] aws-samples/awsome-distributed-training 2.aws-parallelcluster tips
              (p4d/p4de Slurm node lines: 2 sockets x 24 cores x 2 threads)
  [NV-A100] [NV-H100] [NV-H200] [NV-B200] [NV-L40S]
              NVIDIA's data sheets: each GPU's host link (A100 SXM4 PCIe Gen4,
              H100/H200 SXM5 PCIe Gen5, x16); nvidia-smi's pcie.link.gen.max is the
              lower of the GPU's and the system's generation, so the catalog value is
              the host's where it is lower (B200 supports Gen6, its hosts Gen5)
  [PC-5797]   aws/aws-parallelcluster#5797: `slurmd -C` on p5.48xlarge prints
              CPUs=192 Boards=1 SocketsPerBoard=2 CoresPerSocket=48 ThreadsPerCore=2
              RealMemory=2047961
"""

from __future__ import annotations

from dataclasses import dataclass, field

# The OS sees less memory than EC2's nominal figure (p5: 2047961 MB reported by
# slurmd -C [PC-5797] vs 2097152 MiB nominal, 97.7%). Slurm drains a node whose
# RealMemory exceeds what it finds ("Low RealMemory"), so we configure 95% of the
# nominal value: below the one measured figure with ~2.7% headroom, and the same
# fraction ParallelCluster uses. The boot step re-checks it against slurmd -C.
REAL_MEMORY_FRACTION = 0.95


@dataclass(frozen=True)
class InstanceSpec:
    """Hardware of one EC2 instance type, as Slurm and the EFA layout need it."""

    name: str
    gpu_model: str
    gpus: int
    gpu_memory_mib: int
    vcpus: int
    sockets: int
    cores_per_socket: int
    threads_per_core: int
    memory_mib: int  # EC2 nominal (DescribeInstanceTypes MemoryInfo.SizeInMiB)
    network_cards: int
    efa_count: int  # EFA interfaces we attach (one per network card)
    efa_on_card0: bool  # card 0 carries an efa-only interface at DeviceIndex 1
    local_nvme_gb: int
    efa_gbps: int  # per-node EFA bandwidth, Gbit/s
    # Each GPU's PCIe link, as `nvidia-smi` reports it (pcie.link.gen.max, .width.current);
    # 0: not checked (profiles without GPUs). The health program compares them.
    pcie_gen: int = 0
    pcie_width: int = 0
    sources: dict[str, str] = field(default_factory=dict)
    unconfirmed: tuple[str, ...] = ()

    @property
    def real_memory_mib(self) -> int:
        """Slurm RealMemory: safely below what `slurmd -C` reports."""
        return int(self.memory_mib * REAL_MEMORY_FRACTION)

    @property
    def cpus_per_gpu(self) -> int:
        """vCPUs per GPU: the --cpus-per-task EFA needs per rank (one CPU per rank cuts
        EFA bandwidth to 1/4-1/10: the network stack is short of CPU for packets)."""
        return self.vcpus // self.gpus if self.gpus else self.vcpus

    def __post_init__(self) -> None:
        # A catalog typo would silently produce a node that drains at boot.
        if self.sockets * self.cores_per_socket * self.threads_per_core != self.vcpus:
            raise ValueError(f"{self.name}: sockets x cores x threads != vCPUs")
        if self.efa_count > self.network_cards:
            raise ValueError(f"{self.name}: more EFA interfaces than network cards")


def _p4_family(name: str, gpu_memory_mib: int) -> InstanceSpec:
    # p4d and p4de differ only in GPU memory (A100 40 GB vs 80 GB) [K-IT].
    return InstanceSpec(
        name=name,
        gpu_model="A100",
        gpus=8,
        gpu_memory_mib=gpu_memory_mib,
        vcpus=96,
        sockets=2,
        cores_per_socket=24,
        threads_per_core=2,
        memory_mib=1179648,
        network_cards=4,
        efa_count=4,
        efa_on_card0=True,
        local_nvme_gb=8000,
        efa_gbps=400,
        pcie_gen=4,
        pcie_width=16,
        sources={
            "gpus,vcpus,memory,nvme,bandwidth": "K-IT",
            "pcie": "NV-A100",
            "cards": "CNI",
            "topology": "AWSOME-PC",
            "layout": "EFA-ACC pattern",
        },
        # The GPUs sit behind PCIe switches: the reported generation is not measured yet.
        unconfirmed=("efa_on_card0", "pcie_gen"),
    )


def _p5_family(
    name: str, gpu_model: str, gpu_memory_mib: int, *, cards: int, sources: dict[str, str], unconfirmed: tuple[str, ...]
) -> InstanceSpec:
    # Every p5/p6 GPU in the catalog links to its host at PCIe Gen5 x16 (NV-H100, NV-H200;
    # B200 supports Gen6 on a Gen5 host, NV-B200), named in `sources` per type.
    return InstanceSpec(
        name=name,
        gpu_model=gpu_model,
        gpus=8,
        gpu_memory_mib=gpu_memory_mib,
        vcpus=192,
        sockets=2,
        cores_per_socket=48,
        threads_per_core=2,
        memory_mib=2097152,
        network_cards=cards,
        efa_count=cards,
        efa_on_card0=True,
        local_nvme_gb=30400,
        efa_gbps=3200,
        pcie_gen=5,
        pcie_width=16,
        sources=sources,
        unconfirmed=unconfirmed,
    )


# The smoke-test type: EFA-capable and on demand at tens of dollars an hour, so the real
# path (pulumi up -> GO -> destroy) can be tried for an hour without buying a block. Its
# L40S GPUs have no NVLink (intra-node traffic crosses PCIe), so its gate floors test the
# EFA fabric, not a training-class node.
G6E_48XLARGE = InstanceSpec(
    name="g6e.48xlarge",
    gpu_model="L40S",
    gpus=8,
    gpu_memory_mib=45776,
    vcpus=192,
    sockets=2,
    cores_per_socket=48,
    threads_per_core=2,
    memory_mib=1572864,
    network_cards=4,
    efa_count=4,
    efa_on_card0=True,
    local_nvme_gb=7600,
    efa_gbps=400,
    pcie_gen=4,
    pcie_width=16,
    sources={
        "gpus,gpu_memory,vcpus,memory,nvme,efa,bandwidth": "K-IT",
        "cards,layout": "EFA-ACC",
        "pcie": "NV-L40S",
    },
    # Published: 192 vCPUs on AMD; the split into sockets and cores is not, and card 0's
    # efa-only interface follows EFA-ACC's general pattern (step 50 compares slurmd -C).
    unconfirmed=("sockets", "cores_per_socket", "efa_on_card0"),
)

CATALOG: dict[str, InstanceSpec] = {
    spec.name: spec
    for spec in (
        G6E_48XLARGE,
        _p4_family("p4d.24xlarge", 40960),
        _p4_family("p4de.24xlarge", 81920),
        _p5_family(
            "p5.48xlarge",
            "H100",
            81920,
            cards=32,
            sources={
                "gpus,vcpus,memory,nvme,efa": "K-FAKE",
                "cards": "CNI",
                "topology": "PC-5797",
                "layout,bandwidth": "EFA-ACC",
                "pcie": "NV-H100",
            },
            unconfirmed=(),
        ),
        _p5_family(
            "p5e.48xlarge",
            "H200",
            144384,
            cards=32,
            sources={
                "gpus,vcpus,memory,nvme,efa,bandwidth": "K-IT",
                "cards": "CNI",
                "layout": "EFA-ACC",
                "pcie": "NV-H200",
            },
            unconfirmed=("sockets", "cores_per_socket"),
        ),
        _p5_family(
            "p5en.48xlarge",
            "H200",
            144384,
            cards=16,
            sources={
                "gpus,vcpus,memory,nvme,efa,bandwidth": "K-IT",
                "cards": "CNI",
                "layout": "EFA-ACC (16-card layout derived)",
                "pcie": "NV-H200",
            },
            unconfirmed=("sockets", "cores_per_socket"),
        ),
        _p5_family(
            "p6-b200.48xlarge",
            "B200",
            183359,
            cards=8,
            sources={
                "gpus,vcpus,memory,nvme,efa": "K-IT",
                "cards": "CNI",
                "layout,bandwidth": "EFA-ACC",
                "pcie": "NV-B200",
            },
            unconfirmed=("sockets", "cores_per_socket", "pcie_gen"),
        ),
    )
}

SUPPORTED_INSTANCE_TYPES: tuple[str, ...] = tuple(sorted(CATALOG))
