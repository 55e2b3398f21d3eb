"""Progress bars, live views and tables for the command line, with rich.

On a terminal a bar or a live view refreshes in place; on anything else (a pipe, a file, a CI log)
the same calls print plain lines, at most one per `PLAIN_EVERY` of progress, with no escape codes.
Tables render to text either way (no colours when the stream is not a terminal).

    with progress_bar("simulating", total=n * T, unit="steps") as bar:
        bar.update(done)
"""

from __future__ import annotations

import io
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import IO, Any

#: plain (non-terminal) mode prints a new line only after this fraction of progress, or
PLAIN_EVERY = 0.1
#: ... after this many seconds when the total is unknown
PLAIN_SECONDS = 5.0
#: the width text renders at when the stream is not a terminal
PLAIN_WIDTH = 100


def is_tty(stream: IO[str] | None = None) -> bool:
    """Whether `stream` (default stderr) is an interactive terminal."""
    s = sys.stderr if stream is None else stream
    try:
        return bool(s.isatty())
    except (AttributeError, ValueError):  # closed, or not a real file
        return False


def console(stream: IO[str] | None = None, *, tty: bool | None = None) -> Any:
    """A rich Console on `stream` (default stderr): live and coloured on a terminal, plain text
    (no escape codes, width PLAIN_WIDTH) otherwise."""
    from rich.console import Console  # lazy: start-up cost

    s = sys.stderr if stream is None else stream
    t = is_tty(s) if tty is None else tty
    if t:
        return Console(file=s, force_terminal=True, highlight=False)
    return Console(
        file=s,
        force_terminal=False,
        no_color=True,
        highlight=False,
        width=PLAIN_WIDTH,
        soft_wrap=False,
    )


def render(*renderables: Any, width: int = PLAIN_WIDTH) -> str:
    """Renderables (tables, text) as plain text, lines without trailing blanks."""
    c = console(io.StringIO(), tty=False)
    c.width = width
    with c.capture() as cap:
        for r in renderables:
            c.print(r)
    return "\n".join(line.rstrip() for line in cap.get().splitlines())


def table(
    columns: Sequence[str],
    rows: Sequence[Sequence[Any]],
    *,
    title: str | None = None,
    right: Sequence[str] = (),
    indent: int = 2,
) -> str:
    """A simple table as text: `columns` headers, `rows` of cells (str()), the columns named in
    `right` right-aligned (numbers); every line indented by `indent` spaces."""
    from rich import box  # lazy: start-up cost
    from rich.padding import Padding  # lazy: start-up cost
    from rich.table import Table  # lazy: start-up cost

    t = Table(
        title=title, box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, title_justify="left"
    )
    for c in columns:
        t.add_column(c, justify="right" if c in right else "left", no_wrap=True)
    for r in rows:
        t.add_row(*(str(x) for x in r))
    # as wide as the cells need: a long label is never cut (rich truncates no_wrap cells to fit)
    return render(Padding(t, (0, 0, 0, indent), expand=False), width=10_000)


class _Bar:
    """What `progress_bar` yields: `update(done, total=None)`, `note(text)`."""

    def __init__(self, label: str, total: int, unit: str, stream: IO[str], tty: bool) -> None:
        self.label, self.total, self.unit, self.stream, self.tty = label, total, unit, stream, tty
        self.done = 0
        self._last_frac = -1.0
        self._last_t = 0.0
        self._printed = -1  # the count of the last plain line
        self._rich: Any = None
        self._task: Any = None

    def _start(self) -> None:
        if not self.tty:
            return
        # lazy: start-up cost
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
        )

        self._rich = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn(self.unit),
            TimeElapsedColumn(),
            console=console(self.stream, tty=True),
            transient=False,
        )
        self._rich.start()
        self._task = self._rich.add_task(self.label, total=self.total or None)

    def update(self, done: int, total: int | None = None) -> None:
        """`done` steps of `total` (or of the total given at the start). A count over the total
        is shown as a count (the total was an estimate), never as "32/10"."""
        if total is not None:
            self.total = total
        self.done = done
        shown_total = self.total if self.total and done <= self.total else None
        if self._rich is not None:
            self._rich.update(self._task, completed=done, total=shown_total)
            return
        now = time.monotonic()
        frac = done / shown_total if shown_total else None
        if frac is not None:
            if frac - self._last_frac < PLAIN_EVERY and frac < 1.0:
                return
            if frac >= 1.0 and self._last_frac >= 1.0:
                return
            self._last_frac = frac
            self.stream.write(
                f"  {self.label}: {done}/{shown_total} {self.unit} ({100 * frac:.0f}%)\n"
            )
        else:
            if now - self._last_t < PLAIN_SECONDS:
                return
            self.stream.write(f"  {self.label}: {done} {self.unit} so far\n")
        self._printed = done
        self._last_t = now
        self.stream.flush()

    def note(self, text: str) -> None:
        """A line printed above the bar (or plainly)."""
        if self._rich is not None:
            self._rich.console.print(text, highlight=False)
        else:
            self.stream.write(text + "\n")
            self.stream.flush()

    def _stop(self) -> None:
        if self._rich is not None:
            self._rich.stop()
        elif self.done and self.done != self._printed:
            # plain mode: always end with the final count
            self.stream.write(
                f"  {self.label}: {self.done}"
                + (f"/{self.total}" if self.total and self.done <= self.total else "")
                + f" {self.unit}\n"
            )
            self.stream.flush()


@contextmanager
def progress_bar(
    label: str,
    total: int = 0,
    *,
    unit: str = "steps",
    stream: IO[str] | None = None,
    tty: bool | None = None,
    enabled: bool = True,
) -> Iterator[_Bar]:
    """A progress bar on `stream` (default stderr): refreshing in place on a terminal, plain lines
    otherwise (see the module docstring); `total` 0 means unknown. `enabled=False` (--quiet,
    --json) prints nothing."""
    s = sys.stderr if stream is None else stream
    if not enabled:
        s = io.StringIO()
    bar = _Bar(label, total, unit, s, is_tty(s) if tty is None else tty)
    bar._start()
    try:
        yield bar
    finally:
        bar._stop()


@contextmanager
def live(
    stream: IO[str] | None = None, *, tty: bool | None = None, refresh_per_second: float = 4.0
) -> Iterator[Any]:
    """A view redrawn in place: yields `show(renderable)`. On a terminal it replaces what was on
    screen; otherwise each call prints the renderable's text (the caller shows only changes)."""
    s = sys.stderr if stream is None else stream
    t = is_tty(s) if tty is None else tty
    if not t:

        def plain(r: Any) -> None:
            s.write((r if isinstance(r, str) else render(r)) + "\n")
            s.flush()

        yield plain
        return
    from rich.live import Live  # lazy: start-up cost

    with Live(
        console=console(s, tty=True), refresh_per_second=refresh_per_second, transient=False
    ) as lv:
        yield lambda r: lv.update(r, refresh=True)
