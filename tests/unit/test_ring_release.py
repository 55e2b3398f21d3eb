"""Brute force: with the result released, every window any observer sees holds noise from a user
other than the observer (the release correction of `ring_release_adds_noise`)."""

from __future__ import annotations

import pytest

from netdp_node.privacy.ring import (
    ring_adds_noise,
    ring_release_adds_noise,
    ring_release_noise_count,
)


def _windows(n: int, K: int, schedule) -> list[tuple[int, list[tuple[int, bool]]]]:
    """(observer, steps in the window [(user, noisy)]) for every window, release included."""
    steps = [((s - 1) % n + 1, (s - 1) // n + 1) for s in range(1, K * n + 1)]
    out = []
    for v in range(1, n + 1):
        visits = [i for i, (u, _) in enumerate(steps) if u == v]
        # first observation: the steps before v's first visit (empty for v = 1)
        bounds = [-1, *visits, len(steps)]  # the release shows everything after v's last visit
        for a, b in zip(bounds, bounds[1:]):
            window = [(u, schedule(u, k)) for (u, k) in steps[a + 1 : b]]
            if window:
                out.append((v, window))
    return out


@pytest.mark.parametrize("n", range(3, 16))
@pytest.mark.parametrize("K", range(1, 6))
def test_every_released_window_has_foreign_noise(n, K):
    for v, window in _windows(n, K, lambda u, k: ring_release_adds_noise(u, k, n, K)):
        assert any(noisy and u != v for u, noisy in window), (n, K, v, window)
    count = sum(
        ring_release_adds_noise(u, k, n, K) for k in range(1, K + 1) for u in range(1, n + 1)
    )
    assert count == ring_release_noise_count(n, K)


def test_paper_schedule_leaks_on_release():
    """Without the correction, n=5, K=2: observer 4 sees user 5's last input with no foreign noise."""
    bad = [
        (v, w)
        for v, w in _windows(5, 2, lambda u, k: ring_adds_noise(u, k, 5))
        if not any(noisy and u != v for u, noisy in w)
    ]
    assert (4, [(5, False)]) in bad
