"""EFA network-interface layout per instance type: pure data, no pulumi import.

Current AWS guidance for accelerated instances ([EFA-ACC]; ParallelCluster's
`add_network_interfaces` emits the same layout):
  - NCI 0 / DI 0: `interface` (ENA). The primary interface must be on card 0 and may not
    be `efa-only`; it carries the node's single private IPv4.
  - NCI 0 / DI 1: `efa-only`, when card 0 supports EFA.
  - NCI n / DI 0: `efa-only` on every other card, until the type's EFA count is reached.
`efa-only` interfaces get no IP address, so a p5.48xlarge uses one private IPv4 for
33 interfaces, and nodes never hit "hostname resolves to another NIC's address" (with
several IP interfaces the hostname can resolve to the wrong one, and Slurm and MPI bind
to it [EFA-ACC]). Multi-interface instances cannot be given an auto-assigned public IP
([BOTO-EC2] AssociatePublicIpAddress), which is why the nodes live in a private subnet.
"""

from __future__ import annotations

from dataclasses import dataclass

from model.catalog import InstanceSpec

ENA = "interface"
EFA_ONLY = "efa-only"


@dataclass(frozen=True)
class NetworkInterfaceSlot:
    """One launch-template network interface: where it sits and what kind it is."""

    network_card_index: int
    device_index: int
    interface_type: str


def interface_layout(spec: InstanceSpec) -> tuple[NetworkInterfaceSlot, ...]:
    """The interfaces to declare for `spec`, ordered by (card, device index).

    Exactly `spec.efa_count` EFA devices; one ENA primary. Raises ValueError when the
    catalog entry cannot be laid out (more EFA than cards allow).
    """
    slots = [NetworkInterfaceSlot(0, 0, ENA)]
    remaining = spec.efa_count
    if remaining and spec.efa_on_card0:
        slots.append(NetworkInterfaceSlot(0, 1, EFA_ONLY))
        remaining -= 1
    card = 1
    while remaining:
        if card >= spec.network_cards:
            raise ValueError(
                f"{spec.name}: {spec.efa_count} EFA interfaces do not fit on {spec.network_cards} network cards"
            )
        slots.append(NetworkInterfaceSlot(card, 0, EFA_ONLY))
        remaining -= 1
        card += 1
    return tuple(slots)
