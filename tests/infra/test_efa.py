"""EFA interface layout for every catalog type [EFA-ACC]."""

from __future__ import annotations

import dataclasses

import pytest

from infra.efa import EFA_ONLY, ENA, interface_layout
from model.catalog import CATALOG

# type -> (network cards, EFA interfaces, total interfaces)
EXPECTED = {
    "g6e.48xlarge": (4, 4, 5),
    "p4d.24xlarge": (4, 4, 5),
    "p4de.24xlarge": (4, 4, 5),
    "p5.48xlarge": (32, 32, 33),
    "p5e.48xlarge": (32, 32, 33),
    "p5en.48xlarge": (16, 16, 17),
    "p6-b200.48xlarge": (8, 8, 9),
}


def test_every_catalog_type_has_an_expectation():
    assert sorted(EXPECTED) == sorted(CATALOG)


@pytest.mark.parametrize("name", sorted(CATALOG))
def test_layout(name):
    cards, efa, total = EXPECTED[name]
    spec = CATALOG[name]
    assert spec.network_cards == cards and spec.efa_count == efa
    got = [(s.network_card_index, s.device_index, s.interface_type) for s in interface_layout(spec)]
    want = [(0, 0, ENA), (0, 1, EFA_ONLY)] + [(c, 0, EFA_ONLY) for c in range(1, cards)]
    assert got == want
    assert len(got) == total
    assert sum(1 for g in got if g[2] == EFA_ONLY) == efa


def test_p5_has_33_interfaces_one_ena():
    layout = interface_layout(CATALOG["p5.48xlarge"])
    assert len(layout) == 33
    assert [s for s in layout if s.interface_type == ENA] == [layout[0]]
    assert (layout[0].network_card_index, layout[0].device_index) == (0, 0)


def test_card0_without_efa_moves_efa_to_other_cards():
    spec = dataclasses.replace(CATALOG["p6-b200.48xlarge"], efa_on_card0=False, efa_count=7)
    got = [(s.network_card_index, s.device_index, s.interface_type) for s in interface_layout(spec)]
    assert got == [(0, 0, ENA)] + [(c, 0, EFA_ONLY) for c in range(1, 8)]


def test_efa_that_does_not_fit_is_rejected():
    spec = dataclasses.replace(CATALOG["p6-b200.48xlarge"], efa_on_card0=False)  # 8 EFA, cards 1..7
    with pytest.raises(ValueError, match="do not fit"):
        interface_layout(spec)
