"""The registry's algorithms by name, each with the line `netdp demo --help` shows for it, readable
without importing an engine, a parameter class or numpy: the command line's help reads them here.

The registry (`netdp_node.algorithms.ALGORITHMS`) holds the same names in the same order: building
it checks that (`check_registry`), and each family's hooks take their demo line from `DEMOS`.
Adding an algorithm adds its line here too."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from types import MappingProxyType

from netdp_node.errors import NetdpError

__all__ = ["DEMOS", "NAMES", "check_registry"]

#: every algorithm of the registry, in its order -> what `netdp demo --algorithm NAME` runs
#: (None: no demo; run it with `netdp simulate` or `netdp job submit`)
DEMOS: Mapping[str, str | None] = MappingProxyType(
    {
        "ring-sum": "private sum by a token passed around the ring --rounds times",
        "ring-sum-r": None,
        "ring-histogram": None,
        "walk-sum": "private sum by a token walk on the complete graph",
        "walk-histogram": "private histogram by a token walk (--bins categories)",
        "walk-sgd": "private logistic regression by a token walk on the complete graph",
        "rw-sgd": "private logistic regression by a random walk on --topology",
        "inca": "private mean by IncA's correlated noise (--leave/--miss: dropouts)",
        "muffliato": "private gossip averaging in synchronous rounds (--steps rounds)",
        "muffliato-random": "private gossip averaging by random pairwise exchanges (Poisson clocks)",
        "muffliato-gd": "private logistic regression by gossip gradient descent (--steps steps)",
    }
)
#: the names, in the registry's order
NAMES: tuple[str, ...] = tuple(DEMOS)


def check_registry(records: Iterable[tuple[str, str | None]]) -> None:
    """Raise NetdpError unless `records` ((name, demo line) of every record, in the registry's
    order) are the names and demo lines above."""
    got = list(records)
    want = list(DEMOS.items())
    if got != want:
        raise NetdpError(
            "netdp_node.algorithms.catalog.DEMOS does not match the registry: "
            f"registry {got}, catalog {want}"
        )
