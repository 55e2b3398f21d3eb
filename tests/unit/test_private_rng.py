"""The node's private generator is ChaCha20 keyed with the full 256-bit secret (netdp issue 13,
defect 7): the secret is the cipher key itself, not a seed squeezed through a 128-bit pool."""

from __future__ import annotations

import secrets

import numpy as np
import pytest

from netdp_node import runtime


def chacha_key(rng: np.random.Generator) -> int:
    """The 256-bit key of a randomgen ChaCha generator, read from its state (8 words, low first)."""
    state = rng.bit_generator.state
    assert state["bit_generator"].endswith("ChaCha")
    words = state["state"]["keysetup"]
    assert len(words) == 8
    return sum(int(w) << (32 * i) for i, w in enumerate(words))


def test_the_key_is_the_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    drawn: list[int] = []
    real = secrets.randbits

    def spy(k: int) -> int:
        v = real(k)
        drawn.append(v)
        return v

    monkeypatch.setattr(runtime.secrets, "randbits", spy)
    rng = runtime.private_rng()
    assert len(drawn) == 1 and drawn[0].bit_length() <= 256
    assert chacha_key(rng) == drawn[0]
    state = rng.bit_generator.state["state"]
    assert state["rounds"] == 20
    assert [int(c) for c in state["ctr"]] == [0, 0]


def test_an_explicit_key_is_used_as_is() -> None:
    key = (1 << 255) | (0xDEADBEEF << 100) | 12345  # high bits set: beyond any 128-bit pool
    assert chacha_key(runtime.private_rng(key)) == key
    a = runtime.private_rng(key).integers(1 << 62, size=8)
    b = runtime.private_rng(key).integers(1 << 62, size=8)
    assert np.array_equal(a, b)  # the key alone fixes the stream
    with pytest.raises(ValueError, match="key"):
        runtime.private_rng(1 << 256)


def test_two_nodes_never_share_a_key() -> None:
    keys = {chacha_key(runtime.private_rng()) for _ in range(64)}
    assert len(keys) == 64
    assert max(keys).bit_length() > 128  # 256-bit keys, not 128-bit ones
