"""A netdp node process with one cost removed, for the what-if measurements of profile_hop.py and
bench_muffliato_net.py (how fast would a hop or a round be without it?).

    python benchmarks/node_variant.py --ledger-synchronous NORMAL -- node --certs DIR ...

Everything after `--` is the `netdp` command line the process then runs (`netdp_node.cli.main`).
`--ledger-synchronous MODE` opens every writable ledger of the process with `PRAGMA
synchronous=MODE` instead of FULL: with NORMAL, a WAL commit is not fsync'd, so it survives a
killed process but not a power loss. This is deliberately not an option of netdp itself: a node
must never forget privacy it spent, so the product always commits with synchronous=FULL; the
variant exists only to measure what that durability costs.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import common  # noqa: F401  (fails with the install command when netdp is not installed)

from netdp_node.cli import main as netdp
from netdp_node.ledger import Ledger

MODES = ("FULL", "NORMAL", "OFF")


def ledger_synchronous(mode: str) -> None:
    """Every Ledger opened for writing in this process from now on uses synchronous=`mode`."""
    if mode not in MODES:
        raise ValueError(f"synchronous must be one of {MODES}, not {mode!r}")
    init = Ledger.__init__

    def opened(self: Ledger, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        if not self.readonly:
            self._db.execute(f"PRAGMA synchronous={mode}")

    Ledger.__init__ = opened  # type: ignore[method-assign]


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    cut = argv.index("--") if "--" in argv else len(argv)
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--ledger-synchronous", choices=MODES, help="instead of FULL")
    a = ap.parse_args(argv[:cut])
    if cut == len(argv):
        ap.error("give the netdp command line after --")
    if a.ledger_synchronous:
        ledger_synchronous(a.ledger_synchronous)
    return netdp(argv[cut + 1 :])


if __name__ == "__main__":
    sys.exit(main())
