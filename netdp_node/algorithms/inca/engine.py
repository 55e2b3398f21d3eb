"""IncA (Sabater, Ben Mokhtar, Ramon 2025): dropout-robust private mean estimation, over a real
network: the paper's Algorithm 1, its noise schemes (Definitions 3.3, 3.4) and Algorithm 2
(dropouts), with the rules a networked runtime needs. The pure parts (schemes, public schedule,
effective weights, reference simulation, audit) are `netdp_node.privacy.inca_audit`; this module
is the sans-IO engine that runs them between nodes.

Job (public): T iterations, k out-neighbours per party per iteration drawn from the job's public
seed (`inca_audit.out_neighbours`), even column weights 1/(k+1), noise scheme `inc` (Example 3.2,
default) or `early` (Example 3.1), σ_η, σ_Δ, box domain [lo, hi]^dim (values are clipped into it;
L2 sensitivity Δ_x = (hi − lo)·√dim), the iteration deadline `round_s` and the dissemination window
`gossip_s`.

Initialisation (Alg. 1 lines 1-5, Alg. 2 lines 1-2): the node draws η ~ N(0, σ_η² I) and
Δ_{1..T} ~ N(0, σ_Δ² I) from its private generator, u = clip(x) + η, y^(0) = z_0 = α_0 u + U_0 Δ,
ω^(0) = α_0. Noise samples live in the engine's memory only (the ledger records σ's, never samples;
tests read the in-memory `trace_*` attributes, the test-only trace).

Iteration t (Alg. 2 lines 3-16), at every party, in three steps:
1. send MIX_t = (y^(t-1), ω^(t-1), its public history so far) to the k planned out-neighbours of
   iteration t;
2. close the send side: a MIX counts for the sender iff the receiver's acknowledgement (the
   runtime's `on_delivered`, i.e. the receiver accepted it and wrote it to its ledger) arrived
   before the sender closed, which happens when all k outcomes are known or at `round_s`/2. The
   sender then tells each receiver in a CLOSE_t message whether it counted its MIX (1) or not (0);
3. mix: the receiver uses a MIX only if the sender's CLOSE_t said 1 and arrived before the receiver
   mixed ("reconcile before mixing"); it mixes when every planned in-neighbour's CLOSE_t is in (and
   its own send side is closed), or at the deadline `round_s`. y^(t) = W̃_ii y^(t-1) +
   Σ_{counted in} y_j^(t-1)/(k+1) + z_t, ω likewise with α^(i)_t, where W̃_ii = 1/(k+1) plus the
   weight of every MIX of its own that did not count (line 13: the column stays stochastic).

The delivery rule and its residual. No protocol over a lossy link can make two
ends agree by acknowledgements alone; this one makes the only possible disagreement one-sided: a
receiver never counts a MIX its sender did not count (CLOSE(1) is sent only after the ack, and
per-link order puts the MIX before its CLOSE). The residual is a CLOSE(1) that reaches the receiver
after it mixed: the receiver refuses it as late, the sender learns it (`on_undeliverable`) and
records the message as `lost`: that share of the sender's y^(t-1) and ω^(t-1) left the sender and
entered nobody (mass is lost, never duplicated). Privacy effect: none against the parties' values:
the lost message is still counted as sent (an eavesdropper may have seen it; the audit assumes the
planned receiver of every online sender saw it, `IncaExecution.out_nbrs`), and losing mass only
removes terms from later messages. Utility effect: the lost share of x and of the Δ terms is not in
the result, exactly as for a dropout; ω is lost with it, so Σy/Σω stays a weighted mean. A receiver
waits for the CLOSE of every MIX it holds up to `round_s` after that MIX arrived, so the residual
needs the receiver to drop out (or the CLOSE to be delayed that long) between its acknowledgement
and the CLOSE. The public execution the nodes rebuild (`execution_from_records`) keeps a lost
message as such (that column of W̃ sums to less than 1), so the reference simulation and the audit
are exact for it, and the result lists lost messages.

A party with no counted exchange in iteration t < T (no MIX of its own counted, no MIX counted in)
is offline for t (it missed the deadline, or was down): it keeps y and ω and injects nothing (line
17; α^(i)_t = 0, U^(i)_t = 0 by `inca_audit.party_scheme`). At T a party that is still running is
online even if none of its exchanges counted: it cancels its outstanding terms and releases its
final value (its column of W̃^T is e_i either way); a party that is down at T never sends a record.
Rejoin after a temporary dropout: the node's iteration timers keep running while it is unreachable
(each missed iteration ends at its deadline, offline), so it comes back at the iteration its clock
has reached with its stored y, ω and skips the missed shares (no catch-up injection). Nodes that are
ahead refuse its messages of iterations they have mixed (late: not counted at either end) and their
own messages of later iterations wait in its buffer, so it catches up at network speed, without
skipping anything it has acknowledged (a receiver that acknowledged a MIX counts it if the sender's
CLOSE says so, whenever it reaches that iteration). Messages of an iteration the receiver has
already mixed are refused as late, of an iteration outside 1..T as foreign, from a party that is not
a planned in-neighbour of that iteration as not permitted; duplicates are refused (the runtime
acknowledges exact re-sends without applying them).

Dissemination (Algorithm 1's final step): epidemic broadcast of records with de-duplication
(anti-entropy, Demers et al. 1987), not push-sum. Messages move records in batches, so the number
of messages is O(n · fanout · rounds), not one per record and party: in each round, from the end
of iteration T, a party sends `fanout` random peers a DIGEST of the records it holds (a bitmap of n
bits); each answers with one RECORDS message carrying the records the digest lacks and naming those
it lacks itself, which the first party sends back in one more (a batch over the message limit is
split). Rounds come every gossip_s / GOSSIP_ROUNDS, sooner (QUICK_ROUND of that) after one that
brought a new record, so a fault-free dissemination takes a few round trips, and ever later (up to
2**IDLE_DOUBLINGS round periods) after rounds that brought nothing new. Records are identified by
their origin, so a record that arrives again costs a comparison (a copy that differs from the one
held is refused, ALREADY_EXISTS). A party that holds every record, or has released its result,
starts no more rounds but still answers (and takes a late record, recorded as such). Push-pull
rounds reach everyone in O(log n) rounds (about 7 at n = 2048), and a party that was unreachable
for a while is served by the next peer that asks it or that it asks. A node does not ask a peer a
message gave up on (until it hears from it) nor a party that left during the mixing as far as it
knows: either asks others itself if it is there. A record holds (y^(T), ω^(T)) if the party was
online at T (a party offline at T releases no value: its y was never sent), and always its public
history: its online iterations, which of its MIX messages counted (out) and which it counted
(in). The schedule is public, so a history travels as its exceptions to the expected one (online
in every iteration, every planned message counted): the offline iterations, the (t, slot) of its
MIX that did not count, the (t, sender) of the planned MIX it did not count (`History`,
`encode_history`); a record costs O(dim + deviations), not O(T·n), and a malformed one is refused
(INVALID_ARGUMENT, naming the fault) with its whole batch.
A party that leaves never sends its record, so every MIX also carries its sender's history so far,
and from a quarter of the window (PROXY_AFTER) a party gossips, as PROXY items of the same digests
and batches, the latest history the MIX messages of a party whose record has not arrived brought
it (the freshest one wins): the rebuilt execution is then exact for everything the leaver's
messages carried (`execution_from_records`). Each batch that brings something new is recorded in
the node's ledger ("inca-records": the records and proxies it took, from whom). After `gossip_s`
(or as soon as all n records are in; up to twice longer while a party that the records show online
at T has not been heard of) the node outputs x̂ = Σ_{final} y^(T) / Σ_{final} ω^(T) over the
records it has (summed in the parties' order); the result names the parties it contains (`final`),
those whose record never arrived (`missing`) and the public execution, as exceptions too:
`offline` ([t, party]) and `uncounted` ([t, sender, receiver]: planned messages of online senders
that did not count; `inca_audit.outcome_from_info` expands it, and reads the dense `online` /
`counted` form of earlier ledgers as well).
A node whose budget the job would exceed declines it (the runtime decides with the accountant's
`prospective`): it takes part with x = 0, so the others keep their masks; the result lists it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from netdp_node.algorithms.inca.params import IncaParams
from netdp_node.limits import ENVELOPE_ALLOWANCE, MAX_MESSAGE_BYTES
from netdp_node.privacy import inca_audit
from netdp_node.privacy.discrete_gaussian import job_grid, noise_on_grid, on_grid
from netdp_node.privacy.inca_audit import build_execution
from netdp_node.protocols.base import (
    ANY_LENGTH,
    Action,
    Engine,
    JobContext,
    Message,
    Output,
    Record,
    RefusalCode,
    Refused,
    Send,
    SetTimer,
)

MIX = "mix"
CLOSE = "close"
DIGEST = "digest"
RECORDS = "records"
#: dissemination rounds per `gossip_s` while nothing new comes (`Inca._round`): one every
#: gossip_s / GOSSIP_ROUNDS; a round that brought something new is followed by the next one after
#: a eighth of that (QUICK_ROUND), so a fault-free dissemination takes a few round trips
GOSSIP_ROUNDS = 16
QUICK_ROUND = 1 / 8
#: decoded histories kept per job and process, at most HISTORY_CACHE · n · (T + 1)
#: (`Inca._decoded_history`)
HISTORY_CACHE = 4
#: after a round that brought nothing new, the next comes twice as late, up to 2**IDLE_DOUBLINGS
#: times (a party that comes back with news is answered at once: news makes rounds quick)
IDLE_DOUBLINGS = 3
#: the part of `gossip_s` after which a node gossips the histories of parties whose record has not
#: arrived (proxies)
PROXY_AFTER = 1 / 4
#: the most numbers of one RECORDS payload (a batch over it is split): the message limit less the
#: envelope's allowance, 8 bytes a number
BATCH_NUMBERS = (MAX_MESSAGE_BYTES - ENVELOPE_ALLOWANCE) // 8


# -- the dissemination record: exceptions to the expected history ---------------------------------
# A party's public history is what happened in its iterations: whether it was online, which of its
# k MIX messages counted (out) and which MIX of its planned in-neighbours it counted (in). The
# expected history is "online in every iteration, every planned message counted" (the schedule is
# public: `inca_audit.out_neighbours`, `in_neighbours`), so a history is sent as its exceptions
# only: the iterations it was offline, the (t, slot) of its MIX that did not count, the (t, sender)
# of the planned MIX it did not count. The common case costs O(deviations), not O(T·n).
#
#   history = [n_off, n_out, n_in, t..., (t − 1)·k + slot..., (t − 1)·n + sender...]
#   record  = [y^(T) (dim), ω^(T), has_final, data, history...]
# (each list strictly ascending, so a history has one wire form).
HEAD = 3  # n_off, n_out, n_in


class History:
    """A decoded history (exceptions up to iteration `upto`): iterations offline, (t, slot) of its
    own MIX not counted, (t, sender) of planned MIX it did not count (t from 1)."""

    __slots__ = ("off", "out_miss", "in_miss")

    def __init__(
        self,
        off: frozenset[int] = frozenset(),
        out_miss: frozenset[tuple[int, int]] = frozenset(),
        in_miss: frozenset[tuple[int, int]] = frozenset(),
    ) -> None:
        self.off, self.out_miss, self.in_miss = off, out_miss, in_miss

    def __eq__(self, other: object) -> bool:
        return isinstance(other, History) and (self.off, self.out_miss, self.in_miss) == (
            other.off,
            other.out_miss,
            other.in_miss,
        )

    def __repr__(self) -> str:
        return f"History(off={sorted(self.off)}, out={sorted(self.out_miss)}, in={sorted(self.in_miss)})"


#: the history of a party with no exception (shared), and its wire form
EXPECTED = History()
NO_EXCEPTION = np.zeros(HEAD)
NO_EXCEPTION.setflags(write=False)


def encode_history(
    off: Sequence[int],
    out_miss: Sequence[tuple[int, int]],
    in_miss: Sequence[tuple[int, int]],
    n: int,
    k: int,
) -> np.ndarray:
    """The wire form of a history's exceptions (each list in (t, ·) order, as `decode_history`
    wants)."""
    flat: list[int] = [len(off), len(out_miss), len(in_miss), *off]
    flat += [(t - 1) * k + slot for t, slot in out_miss]
    flat += [(t - 1) * n + s for t, s in in_miss]
    return np.asarray(flat, dtype=float)


def history_length(n: int, k: int, T: int) -> int:
    """The most numbers a history can take (every iteration offline, every message uncounted; a
    party has at most n − 1 planned in-neighbours per iteration)."""
    return HEAD + T + T * k + T * (n - 1)


def record_length(dim: int, n: int, k: int, T: int) -> int:
    """The most numbers a dissemination record can take: [y, ω, has_final, data, history]."""
    return dim + 3 + history_length(n, k, T)


def _ints(vals: Sequence[float], what: str) -> list[int]:
    out = []
    for v in vals:
        if not (math.isfinite(v) and v == int(v)):
            raise ValueError(f"{what} must be integers, got {v!r}")
        out.append(int(v))
    return out


def decode_history(
    h: np.ndarray | Sequence[float],
    origin: int,
    upto: int,
    k: int,
    ins: Sequence[Sequence[Sequence[int]]],
) -> History:
    """The history of party `origin` over iterations 1..`upto` from its wire form; `ins` is the
    public schedule's inverse (`in_neighbours`). Raises ValueError naming what is malformed: a
    count that does not match the length, a number that is not an integer, an iteration outside
    1..upto, a sender that is not a planned in-neighbour of `origin` in that iteration, a list that
    is not strictly ascending (so a history has one wire form)."""
    v = h.tolist() if isinstance(h, np.ndarray) else list(h)
    if len(v) < HEAD:
        raise ValueError(f"a history has at least {HEAD} numbers, got {len(v)}")
    n_off, n_out, n_in = _ints(v[:HEAD], "history counts")
    if min(n_off, n_out, n_in) < 0 or len(v) != HEAD + n_off + n_out + n_in:
        raise ValueError(
            f"history of {len(v)} numbers does not match its counts "
            f"({n_off} offline, {n_out} out, {n_in} in)"
        )
    if not n_off and not n_out and not n_in:
        return EXPECTED
    body = _ints(v[HEAD:], "history entries")
    n = len(ins[0]) if ins else 0
    off, out_codes, in_codes = (
        body[:n_off],
        body[n_off : n_off + n_out],
        body[n_off + n_out :],
    )
    for name, seq in (
        ("offline iterations", off),
        ("out exceptions", out_codes),
        ("in exceptions", in_codes),
    ):
        if any(b <= a for a, b in zip(seq, seq[1:])) or (seq and seq[0] < 0):
            raise ValueError(f"history {name} must be non-negative and strictly ascending")
    for t in off:
        if not 1 <= t <= upto:
            raise ValueError(f"history offline iteration {t} outside 1..{upto}")
    outs = [(c // k + 1, c % k) for c in out_codes]
    inns = [(c // n + 1, c % n) for c in in_codes]
    for t, _ in outs:
        if t > upto:
            raise ValueError(f"history out exception of iteration {t} outside 1..{upto}")
    for t, s in inns:
        if not 1 <= t <= upto:
            raise ValueError(f"history in exception of iteration {t} outside 1..{upto}")
        if s not in ins[t - 1][origin]:
            raise ValueError(
                f"history in exception names party {s}, not a planned in-neighbour of {origin} "
                f"in iteration {t}"
            )
    return History(frozenset(off), frozenset(outs), frozenset(inns))


def decode_record(
    v: np.ndarray, dim: int, origin: int, k: int, T: int, ins: Sequence[Sequence[Sequence[int]]]
) -> dict[str, Any]:
    """A dissemination record: {"y", "omega", "has_final", "data", "history"}; raises ValueError on
    a malformed record."""
    v = np.asarray(v)
    if v.ndim != 1 or v.shape[0] < dim + 3 + HEAD:
        raise ValueError(f"record has shape {v.shape}, expected (≥ {dim + 3 + HEAD},)")
    head = v[: dim + 3].tolist()
    if not all(math.isfinite(x) for x in head):
        raise ValueError("record y, ω must be finite")
    if head[dim + 1] not in (0.0, 1.0) or head[dim + 2] not in (0.0, 1.0):
        raise ValueError("record flags must be 0 or 1")
    rec: dict[str, Any] = {
        "y": v[:dim],
        "omega": float(head[dim]),
        "has_final": bool(head[dim + 1]),
        "data": bool(head[dim + 2]),
        "history": decode_history(v[dim + 3 :], origin, T, k, ins),
    }
    if not rec["has_final"] and (any(head[:dim]) or rec["omega"]):
        raise ValueError("a record without a final value must carry y = 0, ω = 0")
    if rec["has_final"] and T in rec["history"].off:
        raise ValueError("only a party online at T has a final value")
    return rec


# -- the dissemination's two messages: a digest of what a node holds, a batch of records -----------
# A DIGEST says which records its sender holds (a bitmap of n bits, 32 to a number) and which
# parties it holds only a history of (a PROXY: the latest history that party's MIX messages
# carried, for a party whose record it has not got):
#
#   digest = [words, bitmap (words), p, proxy origins (p, ascending), their t (p)]
#
# A RECORDS message carries a batch of records and proxies, and the origins its sender wants from
# the receiver (`wants`); the heads of the records side by side, then their histories:
#
#   batch = [m, p, w, origins (m), history lengths (m), proxy origins (p), their t (p),
#            proxy history lengths (p), wants (w), heads (m × (dim + 3)), histories,
#            proxy histories]
#
# (each origin list strictly ascending, so a batch has one wire form; a record's head is
# [y (dim), ω, has_final, data] and its history its exceptions, `encode_history`).
BITS = 32  # bits of the digest's bitmap per number (exact in a float64)
BATCH_HEAD = 3  # m, p, w


def digest_length(n: int) -> int:
    """The most numbers a digest can take (every other party as a proxy)."""
    return 2 + -(-n // BITS) + 2 * n


def batch_length(dim: int, n: int, k: int, T: int) -> int:
    """The most numbers a batch of one record or one proxy takes (a batch of more is split to
    stay under the message limit, `Inca.batch_numbers`)."""
    return BATCH_HEAD + 2 + record_length(dim, n, k, T)


def encode_digest(
    held: np.ndarray, origins: Sequence[int] | np.ndarray, ts: Sequence[int] | np.ndarray
) -> np.ndarray:
    """The wire form of a digest: the records held (bool, n) and the proxies (origins ascending,
    the t of each)."""
    n = held.shape[0]
    words = -(-n // BITS)
    packed = np.zeros(words * (BITS // 8), dtype=np.uint8)
    packed[: -(-n // 8)] = np.packbits(held, bitorder="little")
    p = len(origins)
    out = np.empty(2 + words + 2 * p)
    out[0] = words
    out[1 : 1 + words] = packed.view("<u4")
    out[1 + words] = p
    out[2 + words : 2 + words + p] = origins
    out[2 + words + p :] = ts
    return out


def _int_array(v: np.ndarray, what: str) -> np.ndarray:
    """`v` (finite) as integers; ValueError naming `what` if one is not an integer."""
    out = v.astype(np.int64)
    if (out != v).any():
        raise ValueError(f"{what} must be integers")
    return out


def _within(v: np.ndarray, what: str, lo: int, hi: int) -> None:
    if v.size and (v.min() < lo or v.max() > hi):
        raise ValueError(f"{what} must be in {lo}..{hi}")


def _ascending(v: np.ndarray, what: str) -> None:
    if v.size > 1 and (v[1:] <= v[:-1]).any():
        raise ValueError(f"{what} must be strictly ascending")


def decode_digest(
    v: np.ndarray | None, n: int, T: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(records held (bool, n), proxy origins, their t) of a digest; raises ValueError naming
    what is malformed: a bitmap of another size, a bit beyond n, a number that is not a finite
    integer in range, proxy origins not strictly ascending, a proxy of a party whose record is
    held, a t outside 1..T."""
    if v is None:
        raise ValueError("a digest needs a payload")
    v = np.asarray(v, dtype=float)
    words = -(-n // BITS)
    if v.ndim != 1 or v.shape[0] < 2 + words:
        raise ValueError(f"a digest of {n} parties has at least {2 + words} numbers")
    if not np.isfinite(v).all():
        raise ValueError("a digest must be finite")
    iv = _int_array(v, "digest numbers")
    if iv[0] != words:
        raise ValueError(f"a digest of {n} parties has a bitmap of {words} numbers, not {iv[0]}")
    packed = iv[1 : 1 + words]
    _within(packed, "digest bitmap words", 0, (1 << BITS) - 1)
    bits = np.unpackbits(packed.astype("<u4").view(np.uint8), bitorder="little")
    if bits[n:].any():
        raise ValueError(f"digest bitmap names a party beyond the {n} participants")
    p = int(iv[1 + words])
    if p < 0 or v.shape[0] != 2 + words + 2 * p:
        raise ValueError(f"digest of {v.shape[0]} numbers does not match its {p} proxies")
    origins, ts = iv[2 + words : 2 + words + p], iv[2 + words + p :]
    _within(origins, "digest proxy origins", 0, n - 1)
    _ascending(origins, "digest proxy origins")
    _within(ts, "digest proxy iterations", 1, T)
    held = bits[:n].astype(bool)
    if held[origins].any():
        raise ValueError("a digest names a proxy of a party whose record it holds")
    return held, origins, ts


@dataclass(frozen=True, slots=True)
class Batch:
    """A decoded RECORDS batch (`decode_batch`): the records (origins, heads (m × (dim + 3)), the
    offset and length of each history in `body`, and `plain`: the history has no exception), the
    proxies (origins, t, offset and length of each history in `body`) and the origins the sender
    wants."""

    origins: np.ndarray
    heads: np.ndarray
    h_at: np.ndarray
    h_len: np.ndarray
    plain: np.ndarray
    p_origins: np.ndarray
    p_t: np.ndarray
    p_at: np.ndarray
    p_len: np.ndarray
    wants: np.ndarray
    body: np.ndarray

    def history(self, i: int) -> np.ndarray:
        return self.body[self.h_at[i] : self.h_at[i] + self.h_len[i]]

    def proxy_history(self, i: int) -> np.ndarray:
        return self.body[self.p_at[i] : self.p_at[i] + self.p_len[i]]


def encode_batch(
    origins: Sequence[int] | np.ndarray,
    heads: np.ndarray,
    h_len: Sequence[int] | np.ndarray,
    histories: Sequence[np.ndarray],
    p_origins: Sequence[int],
    p_t: Sequence[int],
    p_histories: Sequence[np.ndarray],
    wants: Sequence[int] | np.ndarray,
) -> np.ndarray:
    """The wire form of a batch (each origin list ascending, as `decode_batch` wants): the
    records' histories have lengths `h_len` and are `histories` one after the other (one array
    per record, or fewer holding several)."""
    m, p, w = len(origins), len(p_origins), len(wants)
    p_len = [h.shape[0] for h in p_histories]
    at = BATCH_HEAD + 2 * m + 3 * p + w
    size = at + heads.size + sum(h.shape[0] for h in histories) + sum(p_len)
    out = np.empty(size)
    out[:BATCH_HEAD] = (m, p, w)
    head = out[BATCH_HEAD:at]
    head[:m] = origins
    head[m : 2 * m] = h_len
    head[2 * m : 2 * m + p] = p_origins
    head[2 * m + p : 2 * m + 2 * p] = p_t
    head[2 * m + 2 * p : 2 * m + 3 * p] = p_len
    head[2 * m + 3 * p :] = wants
    out[at : at + heads.size] = heads.reshape(-1)
    at += heads.size
    for h in (*histories, *p_histories):
        out[at : at + h.shape[0]] = h
        at += h.shape[0]
    return out


def decode_batch(v: np.ndarray | None, dim: int, n: int, T: int) -> Batch:
    """The structure of a batch (its records' and proxies' contents are checked by the receiver:
    `Inca._check_batch`); raises ValueError naming what is malformed: counts or lengths that do
    not match the size, numbers that are not integers in range, origin lists not strictly
    ascending, a party with both a record and a proxy, a non-finite number."""
    if v is None:
        raise ValueError("a batch needs a payload")
    v = np.asarray(v, dtype=float)
    size = v.shape[0] if v.ndim == 1 else 0
    if size < BATCH_HEAD:
        raise ValueError(f"a batch has at least {BATCH_HEAD} numbers")
    if not np.isfinite(v).all():
        raise ValueError("a batch must be finite")
    m, p, w = (int(x) if x == int(x) and 0 <= x <= size else -1 for x in v[:BATCH_HEAD].tolist())
    if min(m, p, w) < 0:
        raise ValueError(f"batch counts must be integers in 0..{size}")
    width = dim + 3
    index = BATCH_HEAD + 2 * m + 3 * p + w
    if size < index + m * width:
        raise ValueError(
            f"batch of {size} numbers is too short for its counts ({m} records, {p} "
            f"proxies, {w} wanted)"
        )
    iv = _int_array(v[BATCH_HEAD:index], "batch origins, lengths and iterations")
    origins, h_len = iv[:m], iv[m : 2 * m]
    p_origins, p_t = iv[2 * m : 2 * m + p], iv[2 * m + p : 2 * m + 2 * p]
    p_len = iv[2 * m + 2 * p : 2 * m + 3 * p]
    wants = iv[2 * m + 3 * p :]
    for what, arr in (
        ("record origins", origins),
        ("proxy origins", p_origins),
        ("wanted origins", wants),
    ):
        _within(arr, what, 0, n - 1)
        _ascending(arr, what)
    _within(h_len, "history lengths", HEAD, size)
    _within(p_len, "proxy history lengths", HEAD, size)
    _within(p_t, "proxy iterations", 1, T)
    if p and m and np.isin(p_origins, origins).any():
        raise ValueError("a batch carries a record and a proxy of the same party")
    body_at = index + m * width
    ends = np.cumsum(np.concatenate([h_len, p_len]))
    if size != body_at + (int(ends[-1]) if ends.size else 0):
        raise ValueError(
            f"batch of {size} numbers does not match its lengths "
            f"({body_at + (int(ends[-1]) if ends.size else 0)} expected)"
        )
    starts = body_at + ends - np.concatenate([h_len, p_len])
    h_at = starts[:m]
    # a history of HEAD (3) zeros: no exception (the usual case, not decoded)
    plain = h_len == HEAD
    if plain.any():
        at = h_at[plain]
        plain[plain] = (v[at] == 0) & (v[at + 1] == 0) & (v[at + 2] == 0)
    return Batch(
        origins=origins,
        heads=v[index:body_at].reshape(m, width),
        h_at=h_at,
        h_len=h_len,
        plain=plain,
        p_origins=p_origins,
        p_t=p_t,
        p_at=starts[m:],
        p_len=p_len,
        wants=wants,
        body=v,
    )


def outcome_from_records(
    n: int,
    k: int,
    T: int,
    seed: int,
    records: Mapping[int, History],
    final_flags: Mapping[int, bool] | None = None,
    nbrs: np.ndarray | None = None,
    proxies: Mapping[int, tuple[int, History]] | None = None,
    ins: Sequence[Sequence[Sequence[int]]] | None = None,
) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
    """The public outcome of a finished job from the dissemination records' histories (`records`:
    origin -> History; `final_flags`: origin -> has_final, True if not given) (in the paper's
    threat model the schedule, the online sets and the weights are public): the online sets
    (T+1, n), the parties whose final value is in the result (n,), and the counted and lost
    messages; `execution_from_records` turns it into the IncaExecution (its weight matrices).

    A party whose record is missing (it left) is known up to the iteration before its last MIX
    that reached a party whose record arrived: every MIX carries its sender's history so far, and
    those parties disseminate the longest one they saw (`proxies`: origin -> (t, history up to
    t − 1)). That covers everything the leaver's messages carried; what it did after its last
    message is never observed and never in the result. Beyond its known history it is taken as
    online at t iff another record shows an exchange with it in t that counted. A message
    (i → j, t) counts iff i and j are online at t, j is among i's planned out-neighbours and the
    receiver's history says it counted it (the sender's, if the receiver's is unknown; if both are
    unknown, the message is taken as counted, the usual outcome: a guess about two leavers'
    exchange that none of their later messages reported). A message the sender counted but the
    receiver did not is `lost` (see the module docstring).

    The work is O(n + T·(parties without a record) + exceptions·k): only messages that an
    exception can touch are examined, every other planned message of an online sender counts.
    Returns (online, final, {"lost": [(t, i, j)], "missing": [i],
    "uncounted": [(t, i, j)] (planned messages of online senders that did not count, lost ones
    included, ascending)}); a message (i → j, t) counted iff i is online at t and it is not in
    "uncounted"."""
    nb = inca_audit.out_neighbours(n, k, T, seed) if nbrs is None else nbrs
    inn = in_neighbours(nb) if ins is None else ins
    hist: dict[int, History] = dict(records)
    known = np.zeros(n, dtype=np.int64)  # the last iteration whose history is known, per party
    known[list(records)] = T
    for i, (t, h) in (proxies or {}).items():
        if i not in records:
            hist[i], known[i] = h, t - 1
    online = np.zeros((T + 1, n), dtype=bool)
    online[0] = True
    online[1:] = np.arange(1, T + 1)[:, None] <= known[None, :]
    for i, h in hist.items():
        for t in h.off:
            if t <= known[i]:
                online[t, i] = False
    missing = [i for i in range(n) if i not in records]
    blank = EXPECTED

    def by_receiver(t: int, i: int, j: int) -> bool | None:
        """j's word on i's MIX of iteration t (i is a planned in-neighbour of j)."""
        return (t, i) not in hist.get(j, blank).in_miss if known[j] >= t else None

    def by_sender(t: int, i: int, slot: int) -> bool | None:
        return (t, slot) not in hist.get(i, blank).out_miss if known[i] >= t else None

    for i in np.flatnonzero(known < T).tolist():  # beyond a party's known history
        for t in range(int(known[i]) + 1, T + 1):
            row = nb[t - 1, i].tolist()
            if any(by_receiver(t, i, j) for j in row if known[j] >= t) or any(
                by_sender(t, j, nb[t - 1, j].tolist().index(i))
                for j in inn[t - 1][i]
                if known[j] >= t
            ):
                online[t, i] = True
    # Privacy-safe reading for a party that is not online at T: in the iteration after its last
    # online one it may have sent y^(s) before missing the deadline (its MIX was seen though
    # nothing counted), so it is taken as online there with no message counted. That adds the
    # message to what the audit lets an adversary see and changes nothing else: its column stays
    # e_i and its later value is never sent nor released.
    last = T - np.argmax(online[::-1], axis=0)  # the last iteration online, per party
    for i in np.flatnonzero(last < T).tolist():
        online[last[i] + 1, i] = True
    # the messages an exception can touch: to an offline receiver, or named by a history
    cand: set[tuple[int, int, int]] = set()  # (t, sender, slot)
    for t, j in zip(*np.nonzero(~online[1:])):
        t, j = int(t) + 1, int(j)
        for i in inn[t - 1][j]:
            cand.add((t, i, nb[t - 1, i].tolist().index(j)))
    for x, h in hist.items():
        for t, i in h.in_miss:
            if t <= known[x]:
                cand.add((t, i, nb[t - 1, i].tolist().index(x)))
        for t, slot in h.out_miss:
            if t <= known[x]:
                cand.add((t, x, slot))
    lost: list[tuple[int, int, int]] = []
    uncounted: list[tuple[int, int, int]] = []
    for t, i, slot in sorted(cand):
        if not online[t, i]:
            continue
        j = int(nb[t - 1, i, slot])
        s, r = by_sender(t, i, slot), by_receiver(t, i, j)
        if s and r is not None and not r:
            lost.append((t, i, j))
            uncounted.append((t, i, j))
        elif not (online[t, j] and (r if r is not None else s if s is not None else True)):
            uncounted.append((t, i, j))
    uncounted.sort()
    final = np.zeros(n, dtype=bool)
    for i in records:
        has = True if final_flags is None else bool(final_flags[i])
        final[i] = has and bool(online[T, i])
    return online, final, {"lost": lost, "missing": missing, "uncounted": uncounted}


def execution_from_records(
    n: int,
    k: int,
    T: int,
    seed: int,
    scheme: str,
    records: Mapping[int, History],
    final_flags: Mapping[int, bool] | None = None,
    nbrs: np.ndarray | None = None,
    proxies: Mapping[int, tuple[int, History]] | None = None,
) -> tuple[inca_audit.IncaExecution, dict[str, Any]]:
    """The public IncaExecution of a finished job from the dissemination records
    (`outcome_from_records`, then the effective weights: T dense n×n matrices).
    Returns (execution, {"lost": [(t, i, j)], "missing": [i], "uncounted": [(t, i, j)]})."""
    nb = inca_audit.out_neighbours(n, k, T, seed) if nbrs is None else nbrs
    online, final, info = outcome_from_records(n, k, T, seed, records, final_flags, nb, proxies)
    counted = inca_audit.counted_from_exceptions(nb, online, info["uncounted"])
    ex = build_execution(n, k, T, seed, scheme, online, counted, info["lost"], final)
    return ex, info


def in_neighbours(nbrs: np.ndarray) -> list[list[list[int]]]:
    """[t][j] -> the parties that planned j as an out-neighbour in iteration t + 1, ascending
    (the inverse of the (T, n, k) schedule `inca_audit.out_neighbours`, in O(T·n·k))."""
    T, n, k = nbrs.shape
    out: list[list[list[int]]] = []
    for t in range(T):
        senders = np.repeat(np.arange(n), k)
        receivers = nbrs[t].reshape(-1)
        order = np.lexsort((senders, receivers))
        bounds = np.searchsorted(receivers[order], np.arange(n + 1))
        s = senders[order].tolist()
        out.append([s[bounds[j] : bounds[j + 1]] for j in range(n)])
    return out


def schedule(ctx: JobContext, T: int, k: int) -> tuple[np.ndarray, list[list[list[int]]]]:
    """The job's public schedule (T, n, k) and its inverse (`in_neighbours`)."""
    nbrs = inca_audit.out_neighbours(len(ctx.participants), k, T, int(ctx.public_seed))
    nbrs.setflags(write=False)  # shared by every engine of the job: read-only
    return nbrs, in_neighbours(nbrs)


class Inca(Engine):
    algorithm = "inca"
    # a party that released its result still answers digests (records and proxies)
    closing_kinds = frozenset({DIGEST, RECORDS})

    def __init__(
        self,
        ctx: JobContext,
        data: np.ndarray | None,
        rng: np.random.Generator,
        contribute: bool = True,
    ) -> None:
        super().__init__(ctx, data, rng, contribute)
        # parsed once per job, shared by the engines of every node holding the same context
        p: IncaParams = ctx.shared.get("params", lambda: IncaParams.from_wire(ctx.params))
        self.params = p
        self.me = self.position[ctx.me]
        self.T, self.k, self.dim = p.T, p.k, p.dim
        self.scheme = p.scheme
        self.sigma_eta, self.sigma_delta = p.sigma_eta, p.sigma_delta
        # η and x on σ_η's grid, the Δ terms on σ_Δ's (powers of two: U's ±1 rows cancel exactly)
        self.grid_eta = job_grid(self.sigma_eta)
        self.grid_delta = job_grid(self.sigma_delta)
        self.lo, self.hi = p.lo, p.hi
        self.round_s, self.gossip_s = p.round_s, p.gossip_s
        self.fanout = max(1, p.fanout)  # (a spec prepared before fanout >= 1: 0 read as 1)
        #: the most numbers of one RECORDS payload (`BATCH_NUMBERS`; a test may lower it)
        self.batch_numbers = BATCH_NUMBERS
        self.w = 1.0 / (self.k + 1)
        self.alpha, self.U = inca_audit.noise_scheme(self.scheme, self.T)
        # the public schedule and its inverse, built once per job (shared by the job's engines)
        self.nbrs, ins = ctx.shared.get("inca-schedule", lambda: schedule(ctx, self.T, self.k))
        self.ins = ins
        self.out = [[int(j) for j in self.nbrs[t, self.me]] for t in range(self.T)]
        self.inn = [ins[t][self.me] for t in range(self.T)]
        x = np.zeros(self.dim)
        self.has_data = bool(contribute and data is not None)
        if self.has_data:
            x = np.asarray(data, dtype=np.float64).reshape(-1)
            if x.shape != (self.dim,):
                raise ValueError(f"data has shape {x.shape}, the job expects ({self.dim},)")
            x = np.clip(x, self.lo, self.hi)
        # Private state. trace_* is the test-only trace: in memory, never in the ledger.
        self.trace_x = on_grid(x, self.grid_eta)
        self.trace_eta = np.zeros(self.dim)
        self.trace_delta = np.zeros((self.T, self.dim))
        self.trace_z = np.zeros(self.dim)  # Σ_t z_t injected so far
        self.trace_y: list[np.ndarray] = []  # y^(0..t)
        self.y = np.zeros(self.dim)
        self.omega = 0.0
        self.online = np.zeros(self.T + 1, dtype=bool)
        self.online[0] = True
        self.cur = 0  # iteration in progress (its MIX sent, not mixed yet); 0 before start
        self.mixed = 0  # last iteration mixed
        self.closed: set[int] = set()
        self.acked: dict[int, set[int]] = {}
        self.refused: dict[int, set[int]] = {}
        self.held: dict[int, dict[int, np.ndarray]] = {}
        self.flags: dict[int, dict[int, int]] = {}
        self.deadline: set[int] = set()  # iterations whose mix deadline passed
        self.patience: set[tuple[int, int]] = set()  # held MIX whose CLOSE wait expired
        self.counted_out = np.zeros((self.T, self.k), dtype=bool)
        # its own public history as exceptions to the expected one (`History`), in order
        self.h_off: list[int] = []
        self.h_out: list[tuple[int, int]] = []
        self.h_in: list[tuple[int, int]] = []
        self.lost: list[tuple[int, str]] = []
        # the records held, validated on receipt: which (have), their heads [y, ω, has_final,
        # data] side by side (n × (dim + 3)), and the histories of the few with an exception
        # (decoded again only at the output); `record(origin)` is a record's wire form
        self.have = np.zeros(self.n, dtype=bool)
        self.heads = np.zeros((self.n, self.dim + 3))
        self.histories: dict[int, np.ndarray] = {}
        self.exceptional = np.zeros(self.n, dtype=bool)
        self.n_records = 0
        # the latest history each party's MIX carried (t, its wire form up to t − 1), its own or
        # a proxy received; `active`: those it gossips (`_round`, PROXY_ROUND)
        self.seen: dict[int, tuple[int, np.ndarray]] = {}
        self.seen_t = np.zeros(self.n, dtype=np.int64)  # the t of `seen`, 0: none
        # the t of the proxies it gossips (`_activate`: no record of that party held), 0: none
        self.gossip_t = np.zeros(self.n, dtype=np.int64)
        # decoded histories, shared by the job's engines in this process (`_history`)
        self.decoded: dict[tuple[int, int, bytes], tuple[History, np.ndarray]] = ctx.shared.get(
            "inca-histories", dict
        )
        self.batches_to: dict[int, int] = {}  # peer -> RECORDS messages sent to it (their seq)
        self.round = 0  # the last dissemination round started
        self.quick = False  # the next round comes soon (the last one brought something new)
        self.learned = False  # a batch brought something new since the last round started
        self.idle = 0  # rounds in a row that brought nothing new (the next ones come later)
        self.unreachable: set[int] = set()  # peers a message gave up on (until they are heard)

    # -- helpers -------------------------------------------------------------------------------
    def expected_steps(self) -> int:
        return self.T + 1

    def progress(self) -> int:
        return self.mixed + (1 if self.done else 0)

    def payload_shape(self, kind: str) -> tuple[int, ...] | None:
        # the history is variable-length (its exceptions): checked by `decode_history`
        if kind in (MIX, DIGEST, RECORDS):
            return (ANY_LENGTH,)
        return None

    def _z(self, t: int, u: np.ndarray) -> tuple[np.ndarray, float]:
        """z_t and α^(i)_t of the scheme adapted to this party's history so far (Algorithm 2). The
        public coefficients (α^(i)_t, U^(i)_t) are kept for the ledger (`self.coef`)."""
        a, Ui = inca_audit.party_scheme(self.alpha, self.U, self.online)
        z = a[t] * u + Ui[t] @ self.trace_delta
        self.trace_z = self.trace_z + z
        self.coef = {"alpha": float(a[t]), "u_row": [float(v) for v in Ui[t]]}
        return z, float(a[t])

    def _history(self) -> np.ndarray:
        return encode_history(self.h_off, self.h_out, self.h_in, self.n, self.k)

    def _index(self, sender: str) -> int:
        return self.position[sender]

    # -- entry points --------------------------------------------------------------------------
    def start(self) -> list[Action]:
        self.trace_eta = noise_on_grid(self.rng, self.sigma_eta, self.grid_eta, self.dim)
        self.trace_delta = noise_on_grid(
            self.rng, self.sigma_delta, self.grid_delta, (self.T, self.dim)
        )
        self._u = self.trace_x + self.trace_eta
        self.y, self.omega = self._z(0, self._u)
        self.y = np.asarray(self.y, float)
        self.trace_y.append(self.y.copy())
        event = "contribute" if self.has_data else "noise-only"
        actions: list[Action] = [
            Record(
                event,
                params={
                    "mechanism": "gaussian",
                    "sigma_eta": self.sigma_eta,
                    "sigma_delta": self.sigma_delta,
                    "sensitivity": (self.hi - self.lo) * math.sqrt(self.dim),
                    "scheme": self.scheme,
                    "T": self.T,
                    "k": self.k,
                    "data": self.has_data,
                    "t": 0,
                    "omega": self.omega,
                    **self.coef,
                },
            )
        ]
        return actions + self._begin(1)

    def _begin(self, t: int) -> list[Action]:
        self.cur = t
        self.acked.setdefault(t, set())
        self.refused.setdefault(t, set())
        payload = np.concatenate([self.y, [self.omega], self._history()])
        acts: list[Action] = [
            Send(self.ids[j], Message(MIX, payload=payload, round=t)) for j in self.out[t - 1]
        ]
        acts += [SetTimer(f"close:{t}", self.round_s / 2), SetTimer(f"mix:{t}", self.round_s)]
        return acts

    def _check_iteration(self, sender: str, msg: Message) -> tuple[int, int]:
        t = msg.round
        if not 1 <= t <= self.T:
            raise Refused(
                RefusalCode.FAILED_PRECONDITION,
                f"{msg.kind} of foreign iteration {t} (the job has iterations 1..{self.T})",
            )
        s = self._index(sender)
        if self.me not in self.nbrs[t - 1, s]:
            raise Refused(
                RefusalCode.PERMISSION_DENIED,
                f"{sender} is not an in-neighbour of {self.ctx.me} in iteration {t} "
                f"(public schedule)",
            )
        if t <= self.mixed or self.cur > self.T:
            raise Refused(
                RefusalCode.FAILED_PRECONDITION,
                f"late {msg.kind} of iteration {t}: {self.ctx.me} has mixed iteration {self.mixed}",
            )
        return t, s

    def on_message(self, sender: str, msg: Message) -> list[Action]:
        acts = self._on_message(sender, msg)
        if self.unreachable:  # (taken: it is there)
            self.unreachable.discard(self._index(sender))
        return acts

    def _on_message(self, sender: str, msg: Message) -> list[Action]:
        if msg.kind == DIGEST:
            return self._on_digest(sender, msg)
        if msg.kind == RECORDS:
            return self._on_records(sender, msg)
        if msg.kind not in (MIX, CLOSE):
            raise Refused(RefusalCode.INVALID_ARGUMENT, f"unknown message kind {msg.kind!r}")
        t, s = self._check_iteration(sender, msg)
        if msg.kind == MIX:
            if s in self.held.get(t, {}):
                raise Refused(
                    RefusalCode.FAILED_PRECONDITION, f"duplicate MIX of iteration {t} from {sender}"
                )
            if (
                msg.payload is None
                or msg.payload.ndim != 1
                or msg.payload.shape[0] < self.dim + 1 + HEAD
                or not np.all(np.isfinite(msg.payload[: self.dim + 1]))
            ):
                raise Refused(
                    RefusalCode.INVALID_ARGUMENT,
                    f"MIX payload must be (y ({self.dim}), ω, history), finite",
                )
            hist = msg.payload[self.dim + 1 :]
            try:
                decode_history(hist, s, t - 1, self.k, self.ins)
            except ValueError as e:
                raise Refused(RefusalCode.INVALID_ARGUMENT, f"MIX of iteration {t}: {e}") from None
            self.held.setdefault(t, {})[s] = np.asarray(msg.payload[: self.dim + 1], float).copy()
            self._see(s, t, hist)
            wait = [SetTimer(f"hold:{t}:{s}", self.round_s)]
        else:
            flag = msg.scalars.get("counted")
            if flag not in (0.0, 1.0):
                raise Refused(RefusalCode.INVALID_ARGUMENT, "CLOSE needs scalar counted = 0 or 1")
            if s in self.flags.get(t, {}):
                raise Refused(
                    RefusalCode.FAILED_PRECONDITION,
                    f"duplicate CLOSE of iteration {t} from {sender}",
                )
            if flag == 1.0 and s not in self.held.get(t, {}):
                raise Refused(
                    RefusalCode.FAILED_PRECONDITION,
                    f"CLOSE(counted) of iteration {t} from {sender} without its MIX",
                )
            self.flags.setdefault(t, {})[s] = int(flag)
            wait = []
        return wait + self._try_mix(t)

    def on_timer(self, name: str) -> list[Action]:
        what, _, arg = name.partition(":")
        if what == "end":
            if self.done:
                return []
            if int(arg or 0) < 2 and any(not self.have[i] for i in self._expected_records()):
                # a party the records show online at T has not been heard of yet: wait longer
                return [SetTimer(f"end:{int(arg or 0) + 1}", self.gossip_s)]
            return self._output()
        if what == "gossip":
            return self._round(int(arg))
        if what == "proxies":  # the histories of parties whose record has not arrived: gossiped
            for o in self.seen:
                self._activate(o)
            return []
        if what == "hold":
            held, _, s = arg.partition(":")
            self.patience.add((int(held), int(s)))
            return self._try_mix(int(held))
        t = int(arg)
        if t != self.cur or t <= self.mixed:
            return []  # that step already happened early (or was skipped)
        if what == "close":
            return self._close(t) if t not in self.closed else []
        self.deadline.add(t)
        acts = self._close(t, mix=False) if t not in self.closed else []
        return acts + self._try_mix(t)

    def on_delivered(self, to: str, msg: Message) -> list[Action]:
        if msg.kind != MIX or msg.round in self.closed:
            return []  # an ack after the close does not count (the CLOSE said 0)
        self.acked.setdefault(msg.round, set()).add(self._index(to))
        return self._try_close(msg.round)

    def on_undeliverable(
        self, to: str, msg: Message, code: str, detail: str
    ) -> list[Action] | None:
        t = msg.round
        if msg.kind == MIX and t not in self.closed:
            self.refused.setdefault(t, set()).add(self._index(to))
            return self._try_close(t)
        if msg.kind == CLOSE and msg.scalars.get("counted") == 1.0:
            # The receiver mixed before our CLOSE(1) arrived: the one-sided residual (docstring).
            self.lost.append((t, to))
            return [Record("lost", peer=to, params={"t": t, "code": code})]
        if msg.kind in (DIGEST, RECORDS) and code == "UNAVAILABLE":
            self.unreachable.add(self._index(to))  # not asked again until it is heard from
        return []  # undelivered CLOSE(0), DIGEST, RECORDS: nothing depends on them

    # -- the three steps of an iteration -------------------------------------------------------
    def _try_close(self, t: int) -> list[Action]:
        if t != self.cur or t in self.closed:
            return []
        if set(self.out[t - 1]) <= self.acked[t] | self.refused[t]:
            return self._close(t)
        return []

    def _close(self, t: int, mix: bool = True) -> list[Action]:
        self.closed.add(t)
        acts: list[Action] = []
        for slot, j in enumerate(self.out[t - 1]):
            counted = j in self.acked[t]
            self.counted_out[t - 1, slot] = counted
            if not counted:
                self.h_out.append((t, slot))
            if counted or j not in self.refused[t]:
                acts.append(
                    Send(self.ids[j], Message(CLOSE, round=t, scalars={"counted": float(counted)}))
                )
        return acts + (self._try_mix(t) if mix else [])

    def _try_mix(self, t: int) -> list[Action]:
        if t != self.cur or t not in self.closed or t <= self.mixed:
            return []
        flags = self.flags.get(t, {})
        if all(i in flags for i in self.inn[t - 1]):
            return self._mix(t)
        # At the deadline, still wait for the CLOSE of every MIX it holds, up to round_s after that
        # MIX arrived (its sender closes within round_s/2 of sending it): a CLOSE(1) that comes
        # after the mix is the lost-message residual, which this patience makes rare.
        if t in self.deadline and all(
            i in flags or (t, i) in self.patience for i in self.held.get(t, {})
        ):
            return self._mix(t)
        return []

    def _mix(self, t: int, advance: bool = True) -> list[Action]:
        held, flags = self.held.pop(t, {}), self.flags.pop(t, {})
        ins = sorted(i for i, f in flags.items() if f == 1 and i in held)
        self.h_in += [(t, i) for i in self.inn[t - 1] if i not in ins]
        outs = int(self.counted_out[t - 1].sum())
        # at T a running party is online even if isolated: it cancels its outstanding terms and
        # releases its final value (its column is e_i either way)
        on = bool(ins) or outs > 0 or t == self.T
        self.online[t] = on
        if not on:
            self.h_off.append(t)
        self.coef = {"alpha": 0.0, "u_row": [0.0] * self.T}
        if on:
            keep = 1.0 - outs * self.w  # 1/(k+1) plus every uncounted share (line 13)
            z, a = self._z(t, self._u)
            self.y = (
                keep * self.y + sum((held[i][:-1] for i in ins), np.zeros(self.dim)) * self.w + z
            )
            self.omega = keep * self.omega + sum(float(held[i][-1]) for i in ins) * self.w + a
        self.mixed = t
        self.trace_y.append(self.y.copy())
        acts: list[Action] = [
            Record(
                "inca-iteration",
                params={
                    "t": t,
                    "online": on,
                    "counted_out": [
                        self.ids[j]
                        for s, j in enumerate(self.out[t - 1])
                        if self.counted_out[t - 1, s]
                    ],
                    "counted_in": [self.ids[i] for i in ins],
                    "omega": self.omega,
                    **self.coef,
                },
            )
        ]
        if not advance:
            return acts
        if t < self.T:
            return acts + self._begin(t + 1)
        return acts + self._disseminate()

    # -- dissemination -----------------------------------------------------------------------------
    def _own_record(self) -> np.ndarray:
        final = bool(self.online[self.T])
        head = np.concatenate(
            [
                np.asarray(self.y if final else np.zeros(self.dim), float),
                [self.omega if final else 0.0, float(final), float(self.has_data)],
            ]
        )
        return np.concatenate([head, self._history()])

    def record(self, origin: int) -> np.ndarray | None:
        """The wire form of `origin`'s record as held ([y, ω, has_final, data, history]), or
        None."""
        if not self.have[origin]:
            return None
        return np.concatenate([self.heads[origin], self.histories.get(origin, NO_EXCEPTION)])

    @property
    def raw_records(self) -> list[np.ndarray | None]:
        """The records held, by origin, in their wire form (None: not held)."""
        return [self.record(o) for o in range(self.n)]

    def _take(
        self, origins: np.ndarray, heads: np.ndarray, histories: Mapping[int, np.ndarray]
    ) -> None:
        """Hold the records of `origins` (validated, none held yet): their heads in the table of
        heads; `histories`: the histories of those with an exception (the others have none), read-
        only (`_decoded_history`'s). A record supersedes the proxy of its party (no longer gossiped)."""
        self.heads[origins] = heads
        self.have[origins] = True
        self.gossip_t[origins] = 0
        self.n_records += int(origins.shape[0])
        for o, h in histories.items():
            self.histories[o] = h
            self.exceptional[o] = True

    def _disseminate(self) -> list[Action]:
        self.cur = self.T + 1
        rec = self._own_record()
        h = rec[self.dim + 3 :]
        exc = (
            {self.me: self._decoded_history(self.me, self.T, h)[1]}
            if h.shape[0] != HEAD or h.any()
            else {}
        )
        self._take(np.asarray([self.me]), rec[None, : self.dim + 3], exc)
        acts: list[Action] = [
            SetTimer("end", self.gossip_s),
            SetTimer("proxies", self.gossip_s * PROXY_AFTER),
        ]
        return acts + self._round(1) + self._maybe_output()

    def _round(self, r: int) -> list[Action]:
        """Dissemination round r, the first at the end of iteration T: `fanout` random peers get
        this node's digest (each answers with the records and proxies it holds that the digest
        lacks, and asks for those it lacks itself). The next round comes gossip_s / GOSSIP_ROUNDS
        later, a QUICK_ROUND of that after a batch brought a new record (`_on_records`), and twice
        as late after each round that brought nothing new (up to 2**IDLE_DOUBLINGS times); a
        timer of a round that has happened already is passed over. A node that holds every record, or
        has released its result, starts no more rounds (it still answers)."""
        if r != self.round + 1 or self.done or self.n_records == self.n:
            return []
        self.idle = 0 if r == 1 or self.learned else self.idle + 1
        self.round, self.quick, self.learned = r, False, False
        digest = Message(DIGEST, payload=self._digest(), round=r)
        acts: list[Action] = [Send(self.ids[j], digest) for j in self._peers()]
        wait = self.gossip_s / GOSSIP_ROUNDS * 2 ** min(self.idle, IDLE_DOUBLINGS)
        return acts + [SetTimer(f"gossip:{r + 1}", wait)]

    def _peers(self) -> list[int]:
        """min(fanout, m) distinct peers drawn uniformly from the m others worth asking, by
        rejection (O(fanout) draws when fanout is much smaller than m, then from the list of
        them). Not worth asking: a peer a message gave up on since it was last heard from, and a
        party that left during the mixing as far as this node knows (it holds the party's proxy,
        no record, and the last MIX of it anyone reported is of an iteration before T). Neither
        loses anything: a party that is there asks others itself, and any peer it asks answers
        with everything it lacks."""
        shunned = self.unreachable | set(np.flatnonzero(self._left()).tolist())

        def ok(j: int) -> bool:
            return j != self.me and j not in shunned and j not in pick

        pick: list[int] = []
        want = min(self.fanout, self.n - 1 - len(shunned - {self.me}))
        for _ in range(4 * want + 8):
            if len(pick) >= want:
                return pick
            j = int(self.rng.integers(self.n))
            if ok(j):
                pick.append(j)
        rest = [j for j in range(self.n) if ok(j)]
        more = self.rng.choice(len(rest), size=min(want - len(pick), len(rest)), replace=False)
        return pick + [rest[int(p)] for p in more]

    def _left(self) -> np.ndarray:
        """(n,) the parties whose proxy this node gossips (no record of theirs held) and whose
        last reported MIX is of an iteration before T: they left during the mixing, as far as it
        knows."""
        return (self.gossip_t > 0) & (self.gossip_t < self.T)

    def _see(self, o: int, t: int, history: np.ndarray) -> None:
        """The latest history of party o so far (its MIX of iteration t, or a proxy): kept if
        fresher than the one held, and gossiped in its place if that one is."""
        if self.seen_t[o] >= t:
            return
        self.seen[o] = (t, history)
        self.seen_t[o] = t
        if self.gossip_t[o]:
            self.gossip_t[o] = t

    def _activate(self, o: int) -> None:
        """Gossip the history of party o held, if no record of it is."""
        if self.seen_t[o] and not self.have[o]:
            self.gossip_t[o] = self.seen_t[o]

    def _decoded_history(self, o: int, upto: int, wire: np.ndarray) -> tuple[History, np.ndarray]:
        """The history of party o over 1..upto from its wire form (`decode_history`, ValueError
        if malformed) and a read-only copy of the wire form: decoded once per distinct history
        and shared by the job's engines in this process (the n engines of a simulation receive
        the same records), up to HISTORY_CACHE·n·(T + 1) of them."""
        key = (o, upto, wire.tobytes())
        hit = self.decoded.get(key)
        if hit is None:
            arr = np.array(wire, dtype=float)
            arr.setflags(write=False)
            hit = (decode_history(arr, o, upto, self.k, self.ins), arr)
            if len(self.decoded) < HISTORY_CACHE * self.n * (self.T + 1):
                self.decoded[key] = hit
        return hit

    def _digest(self) -> np.ndarray:
        prox = np.flatnonzero(self.gossip_t)
        out = encode_digest(self.have, prox, self.gossip_t[prox])
        out.setflags(write=False)
        return out

    def _on_digest(self, sender: str, msg: Message) -> list[Action]:
        s = self._index(sender)
        try:
            theirs, p_origins, p_t = decode_digest(msg.payload, self.n, self.T)
        except ValueError as e:
            raise Refused(RefusalCode.INVALID_ARGUMENT, f"DIGEST of {sender}: {e}") from None
        # what it lacks: records this node holds, and fresher proxies of parties it has neither
        give = self.have & ~theirs
        give[s] = False
        their_t = np.zeros(self.n, dtype=np.int64)
        their_t[p_origins] = p_t
        p_give = (self.gossip_t > their_t) & ~theirs
        p_give[s] = False
        # a party someone gossips a proxy of: this node gossips its own history of it too
        for o in p_origins[self.gossip_t[p_origins] == 0].tolist():
            self._activate(o)
        # what it has that this node lacks (after the result too: a late record is recorded)
        lack = (theirs | (their_t > self.seen_t)) & ~self.have
        lack[self.me] = False
        return self._send_batch(
            s, np.flatnonzero(give), np.flatnonzero(p_give).tolist(), np.flatnonzero(lack)
        )

    def _send_batch(
        self, j: int, origins: np.ndarray, p_origins: Sequence[int], wants: np.ndarray
    ) -> list[Action]:
        """RECORDS messages to peer j carrying the records of `origins`, the proxies of
        `p_origins` and the wanted origins (each ascending): as few as the message limit allows
        (`batch_numbers`), none if there is nothing to say."""
        m, p, w = origins.shape[0], len(p_origins), wants.shape[0]
        if not (m or p or w):
            return []
        width = self.dim + 3
        exceptional = bool(m) and bool(self.exceptional[origins].any())
        if exceptional:
            h_len = np.asarray(
                [self.histories.get(int(o), NO_EXCEPTION).shape[0] for o in origins], np.int64
            )
        else:
            h_len = np.full(m, HEAD, dtype=np.int64)
        p_hist = [self.seen[o][1] for o in p_origins]
        p_cost = [3 + h.shape[0] for h in p_hist]
        total = w + m * (2 + width) + int(h_len.sum()) + sum(p_cost)
        room = self.batch_numbers - BATCH_HEAD
        if total <= room:
            runs = [(0, w + m + p)]
        else:
            cost = np.concatenate([np.ones(w, np.int64), 2 + width + h_len, p_cost]).astype(
                np.int64
            )
            runs = _chunks(cost, room)
        acts: list[Action] = []
        for a, b in runs:
            wa, wb = min(a, w), min(b, w)
            ra, rb = min(max(a - w, 0), m), min(max(b - w, 0), m)
            pa, pb = max(a - w - m, 0), max(b - w - m, 0)
            sel = origins[ra:rb]
            if exceptional:
                hists = [self.histories.get(int(o), NO_EXCEPTION) for o in sel.tolist()]
            else:  # every history: HEAD zeros
                hists = [np.zeros(HEAD * (rb - ra))]
            payload = encode_batch(
                sel,
                self.heads[sel],
                h_len[ra:rb],
                hists,
                p_origins[pa:pb],
                [self.seen[o][0] for o in p_origins[pa:pb]],
                p_hist[pa:pb],
                wants[wa:wb],
            )
            payload.setflags(write=False)
            self.batches_to[j] = seq = self.batches_to.get(j, 0) + 1
            acts.append(Send(self.ids[j], Message(RECORDS, payload=payload, seq=seq)))
        return acts

    def _check_batch(
        self, sender: str, b: Batch
    ) -> tuple[np.ndarray, dict[int, np.ndarray], list[tuple[int, int, np.ndarray]]]:
        """After checking every item of `b`: the records this node does not hold (indices into
        `b`), the histories with an exception among them (origin -> history) and the proxies
        fresher than its own ((origin, t, history)). Refuses (INVALID_ARGUMENT) a record or proxy
        of this node itself, a malformed record or history, and (ALREADY_EXISTS) a record that
        conflicts with the one held."""
        dim, me = self.dim, self.me
        if (b.origins == me).any() or (b.p_origins == me).any():
            raise Refused(
                RefusalCode.INVALID_ARGUMENT,
                f"RECORDS of {sender} carries a record or proxy of {self.ctx.me} itself",
            )
        new = ~self.have[b.origins]
        dup = np.flatnonzero(~new)
        if dup.size:  # held already: the same record, or a conflict
            held_o = b.origins[dup]
            same = (self.heads[held_o] == b.heads[dup]).all(axis=1)
            both_plain = b.plain[dup] & ~self.exceptional[held_o]
            for i in dup[~both_plain].tolist():  # (a history with an exception: compared)
                held = self.histories.get(int(b.origins[i]), NO_EXCEPTION)
                h = b.history(i)
                if h.shape != held.shape or not np.array_equal(h, held):
                    same[np.searchsorted(dup, i)] = False
            if not same.all():
                bad = int(held_o[np.flatnonzero(~same)[0]])
                raise Refused(
                    RefusalCode.ALREADY_EXISTS,
                    f"record of {self.ids[bad]} from {sender} conflicts with the one already held",
                )
        fresh = np.flatnonzero(new)
        heads = b.heads[fresh]
        flags = heads[:, dim + 1 : dim + 3]
        if ((flags != 0.0) & (flags != 1.0)).any():
            raise Refused(
                RefusalCode.INVALID_ARGUMENT, f"RECORDS of {sender}: flags must be 0 or 1"
            )
        if heads[heads[:, dim + 1] == 0.0, : dim + 1].any():
            raise Refused(
                RefusalCode.INVALID_ARGUMENT,
                f"RECORDS of {sender}: a record without a final value must carry y = 0, ω = 0",
            )
        exceptions: dict[int, np.ndarray] = {}
        for i in fresh[~b.plain[fresh]].tolist():
            o = int(b.origins[i])
            try:
                hist, wire = self._decoded_history(o, self.T, b.history(i))
            except ValueError as e:
                raise Refused(
                    RefusalCode.INVALID_ARGUMENT, f"record of {self.ids[o]} from {sender}: {e}"
                ) from None
            if b.heads[i, dim + 1] and self.T in hist.off:
                raise Refused(
                    RefusalCode.INVALID_ARGUMENT,
                    f"record of {self.ids[o]} from {sender}: only a party online at T has a "
                    "final value",
                )
            exceptions[o] = wire
        fresher: list[tuple[int, int, np.ndarray]] = []
        for i in range(b.p_origins.shape[0]):
            o, t = int(b.p_origins[i]), int(b.p_t[i])
            try:
                _, wire = self._decoded_history(o, t - 1, b.proxy_history(i))
            except ValueError as e:
                raise Refused(
                    RefusalCode.INVALID_ARGUMENT, f"proxy of {self.ids[o]} from {sender}: {e}"
                ) from None
            if self.seen_t[o] < t:
                fresher.append((o, t, wire))
        return fresh, exceptions, fresher

    def _on_records(self, sender: str, msg: Message) -> list[Action]:
        try:
            b = decode_batch(msg.payload, self.dim, self.n, self.T)
        except ValueError as e:
            raise Refused(RefusalCode.INVALID_ARGUMENT, f"RECORDS of {sender}: {e}") from None
        fresh, exceptions, fresher = self._check_batch(sender, b)
        # (nothing is changed before every item is checked: a refusal leaves the state as it was)
        ids = self.ids
        got = b.origins[fresh]
        self._take(got, b.heads[fresh], exceptions)
        proxies = []
        for o, t, wire in fresher:
            self._see(o, t, wire)
            self._activate(o)
            proxies.append([ids[o], t])
        acts: list[Action] = []
        names = [ids[o] for o in got.tolist()]
        if names or proxies:
            # the node's view: which records (and proxies) it took from whom
            acts.append(
                Record("inca-records", peer=sender, params={"records": names, "proxies": proxies})
            )
        if b.wants.size:
            s = self._index(sender)
            want = b.wants[b.wants != s]
            acts += self._send_batch(
                s,
                want[self.have[want]],
                [o for o in want[~self.have[want]].tolist() if self.seen_t[o]],
                np.zeros(0, dtype=np.int64),
            )
        if self.done:
            return acts + [Record("late-final", peer=name) for name in names]
        if names or proxies:
            self.learned = True
        # new records (not only fresher histories of leavers): the next round soon
        if names and self.round and not self.quick and self.n_records < self.n:
            self.quick = True  # something new: the next round soon
            acts.append(
                SetTimer(f"gossip:{self.round + 1}", self.gossip_s / GOSSIP_ROUNDS * QUICK_ROUND)
            )
        return acts + self._maybe_output()

    def _histories(self) -> tuple[dict[int, History], dict[int, bool]]:
        """The histories of the records held (EXPECTED for a record without exceptions, the
        common case: not decoded) and their has_final flags."""
        held = np.flatnonzero(self.have).tolist()
        finals = dict(zip(held, (self.heads[self.have, self.dim + 1] != 0).tolist()))
        hists: dict[int, History] = dict.fromkeys(held, EXPECTED)
        for i, h in self.histories.items():  # (held, with an exception)
            hists[i] = self._decoded_history(i, self.T, h)[0]
        return hists, finals

    def _expected_records(self) -> set[int]:
        """Parties that some record shows online at T (an exchange of iteration T counted): they
        will disseminate a final record."""
        out: set[int] = set()
        hists, _ = self._histories()
        T = self.T
        for j, h in hists.items():
            out.update(i for i in self.ins[T - 1][j] if (T, i) not in h.in_miss)
            out.update(
                int(self.nbrs[T - 1, j, s]) for s in range(self.k) if (T, s) not in h.out_miss
            )
        return out

    def _maybe_output(self) -> list[Action]:
        if self.cur > self.T and self.n_records == self.n and not self.done:
            return self._output()
        return []

    def _output(self) -> list[Action]:
        self.done = True
        # the public outcome only, as exceptions to the expected one (offline iterations, planned
        # messages of online senders that did not count): the weight matrices (T dense n×n) are
        # for the accountant's audit, which rebuilds them from the result
        # (`inca_audit.execution_from_info`)
        hists, finals = self._histories()
        proxies = {
            i: (t, self._decoded_history(i, t - 1, raw)[0])
            for i, (t, raw) in self.seen.items()
            if i not in hists
        }
        online, final, info = outcome_from_records(
            self.n,
            self.k,
            self.T,
            int(self.ctx.public_seed),
            hists,
            finals,
            self.nbrs,
            proxies,
            self.ins,
        )
        dim = self.dim
        fin = np.flatnonzero(final & self.have)  # (a final party's record is held)
        # Σ in the parties' order, one after the other from 0 (cumsum adds in sequence)
        rows = np.concatenate([np.zeros((1, dim + 1)), self.heads[fin, : dim + 1]])
        total = np.cumsum(rows, axis=0)[-1]
        sum_y, sum_w = total[:dim], float(total[dim])
        est = sum_y / sum_w if sum_w > 0 else np.full(dim, np.nan)
        value = None if sum_w <= 0 else est
        ids = self.ids
        names = [ids[i] for i in fin.tolist()]
        return [
            Output(
                value=value,
                info={
                    "estimate": est.tolist() if sum_w > 0 else None,
                    "sum_y": sum_y.tolist(),
                    "sum_omega": sum_w,
                    "final": names,
                    "missing": [ids[i] for i in info["missing"]],
                    "declined": [
                        ids[i]
                        for i in np.flatnonzero(self.have & (self.heads[:, dim + 2] == 0)).tolist()
                    ],
                    "lost": [[t, ids[i], ids[j]] for t, i, j in info["lost"]],
                    "omega_final": dict(zip(names, self.heads[fin, dim].tolist())),
                    # the execution as exceptions to "everyone online, every planned message
                    # counted" (`inca_audit.outcome_from_info` expands it)
                    "offline": [
                        [int(t) + 1, ids[int(i)]] for t, i in zip(*np.nonzero(~online[1:]))
                    ],
                    "uncounted": [[t, ids[i], ids[j]] for t, i, j in info["uncounted"]],
                    "scheme": self.scheme,
                    "T": self.T,
                    "k": self.k,
                },
            )
        ]


def _chunks(cost: np.ndarray, room: int) -> list[tuple[int, int]]:
    """Consecutive runs [a, b) of items whose costs add up to at most `room` each (an item alone
    always makes a run: the job's parameters were checked to make every item fit)."""
    out: list[tuple[int, int]] = []
    cum = np.concatenate([[0], np.cumsum(cost)])
    a = 0
    while a < cost.shape[0]:
        b = int(np.searchsorted(cum, cum[a] + room, side="right")) - 1
        b = max(b, a + 1)
        out.append((a, b))
        a = b
    return out


def central_dp_std(epsilon: float, delta: float, sensitivity: float, n: int) -> float:
    """Std of the central-DP mean at (ε, δ): a trusted curator adds N(0, c²Δ_x²/(ε² n²)) to x̄
    (the paper's central baseline, §5; c² = 2 ln(1.25/δ))."""
    return math.sqrt(2 * math.log(1.25 / delta)) * sensitivity / (epsilon * n)
