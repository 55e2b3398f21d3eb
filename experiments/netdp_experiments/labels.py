"""Which implementation produced a figure, written in its title: the figures import this, and
`engine_runs` (which runs them on the engines) does too, so neither imports the other for it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def label(fig: Any, res: Mapping[str, Any]) -> None:
    """Put the implementation (and the engine's smaller configuration) in the figure's title
    (before the figure's tight_layout, which makes room for it)."""
    impl = res.get("implementation")
    if not impl:
        return
    text = f"[{impl}]"
    cfg = res.get("engine_config")
    if cfg and cfg.get("note"):
        text += f" {cfg['note']}"
    old = getattr(fig, "_suptitle", None)
    title = old.get_text() if old is not None else ""
    fig.suptitle(f"{title}\n{text}" if title else text, fontsize=9)
