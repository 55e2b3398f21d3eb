"""netdp_node.progress: plain lines when the stream is not a terminal, in-place refresh when it is,
and a count past the expected total shown as a count (the "32/10 steps" bug), never as N/M."""

from __future__ import annotations

import io
import re

from netdp_node.progress import is_tty, live, progress_bar, table


def test_plain_lines_when_not_a_terminal():
    out = io.StringIO()
    assert not is_tty(out)
    with progress_bar("simulating", total=200, stream=out) as bar:
        for i in range(1, 201):
            bar.update(i)
    lines = out.getvalue().splitlines()
    assert "\r" not in out.getvalue() and "\x1b[" not in out.getvalue()
    # one line per 10 % at most (not one per update), ending at the total
    assert 2 <= len(lines) <= 11, lines
    assert lines[-1] == "  simulating: 200/200 steps (100%)"
    done = [int(re.search(r"(\d+)/200", x).group(1)) for x in lines]
    assert done == sorted(done)


def test_a_count_past_the_total_is_not_shown_as_a_fraction():
    out = io.StringIO()
    with progress_bar("simulating", total=10, stream=out) as bar:
        for i in (4, 10, 20, 32):  # an engine that takes more steps than the caller expected
            bar.update(i)
    text = out.getvalue()
    assert "32/10" not in text and "20/10" not in text
    assert text.splitlines()[-1] == "  simulating: 32 steps", text


def test_refreshes_in_place_on_a_terminal():
    out = io.StringIO()
    with progress_bar("simulating", total=50, stream=out, tty=True) as bar:
        for i in range(1, 51):
            bar.update(i)
    text = out.getvalue()
    assert "\x1b[" in text or "\r" in text  # cursor control: the bar is redrawn, not appended
    assert "50/50" in text


def test_disabled_prints_nothing():
    out = io.StringIO()
    with progress_bar("x", total=3, stream=out, enabled=False) as bar:
        bar.update(3)
    assert out.getvalue() == ""


def test_live_plain_prints_each_view_and_tables_render_as_text():
    out = io.StringIO()
    with live(out) as show:
        show("a")
        show("b")
    assert out.getvalue() == "a\nb\n"
    t = table(("node", "epsilon"), [("n1", "0.5"), ("n22", "1.25")], right=("epsilon",))
    rows = t.splitlines()
    assert rows[0].split() == ["node", "epsilon"]
    assert rows[-1].split() == ["n22", "1.25"] and rows[-1].startswith("  ")
    assert rows[-2].index("0.5") + 3 == rows[-1].index("1.25") + 4  # numbers right-aligned
