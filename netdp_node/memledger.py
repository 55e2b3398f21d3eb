"""A node's ledger held in memory, for `netdp simulate`.

`MemoryLedger` is a `Ledger` whose storage is Python objects instead of SQLite: the group commit
(`stage`, `note`, `flush_soon`, deferred receipts, `staged_future`) is the Ledger's own code,
inherited unchanged, and so are its rules: a received message is stored once per identity (a
second one is refused with LedgerError, as the SQLite index refuses it), entries are append-only,
custody copies are kept until dropped. What a step writes is what the SQLite ledger would hold:
entry parameters read back as they do from the SQLite ledger's JSON (so the accountants read the
same values).

With `keep_entries=False` (large simulations that only need the walk) the entries are handed to
`observe` and not kept; the duplicate index, the custody copies and the job rows are kept all the
same (the runtime's checks read them).

Entry parameters are built as JSON reads them back without the JSON text where that is exact
(`_decode`); an immutable tuple recorded by several entries (the public schedules every node of a
simulation records) is decoded once and shared by them, of every node when the simulator hands
the ledgers one `shared_params`.
"""

from __future__ import annotations

import json
import secrets
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from netdp_node.errors import LedgerError
from netdp_node.ledger import Entry, JobRow, Ledger, _identity, _params_json, _Step

#: the most immutable parameter values (tuples) `MemoryLedger` keeps shared (then it starts afresh)
MAX_SHARED_PARAMS = 1 << 16


#: the types JSON gives back equal and of the same type (exactly these, not subclasses)
_SCALARS = frozenset({str, int, float, bool, type(None)})


class _NotPlain(Exception):
    """A value `_decode` does not reproduce exactly (it goes through JSON instead)."""


def _decode_tuple(v: tuple[Any, ...], depth: int) -> tuple[list[Any], bool]:
    """A tuple as JSON reads it back (a list, its tuples lists too), and whether it is deeply
    immutable (str, int, bool, float, None and such tuples only)."""
    out: list[Any] = []
    frozen = True
    for x in v:
        t = type(x)
        if t is str or t is int or t is float or t is bool or x is None:
            out.append(x)
        elif t is tuple:
            d, f = _decode_tuple(x, depth + 1)
            out.append(d)
            frozen = frozen and f
        else:
            out.append(_decode(x, depth + 1, None))
            frozen = False
    return out, frozen


def _decode(v: Any, depth: int, shared: dict[int, tuple[Any, Any]] | None) -> Any:
    """`json.loads(json.dumps(v, sort_keys=True))` without the text, for values made only of str,
    int, bool, float (exactly those types: JSON gives them back equal and of the same type), None,
    lists, tuples (lists once read) and dicts with str keys (keys sorted); _NotPlain otherwise
    (numpy scalars, other keys: those go through JSON). Scalars are returned as they are (str and
    numbers are immutable). A deeply immutable tuple is decoded once: its list is kept in `shared`
    by the tuple's identity (the tuple is held there, so its id is not reused) and shared by
    every entry that records the same tuple object (the public schedules every simulated node
    records); lists and dicts are decoded afresh, as they may change after they were recorded."""
    t = type(v)
    if t is str or t is int or t is float or t is bool or v is None:
        return v
    if depth > 64:
        raise _NotPlain
    if t is dict:
        for k in v:
            if type(k) is not str:
                raise _NotPlain
        return {k: _decode(v[k], depth + 1, shared) for k in sorted(v)}
    if t is list:
        if all(type(x) in _SCALARS for x in v):  # (a list of names: copied as it is)
            return list(v)
        return [_decode(x, depth + 1, shared) for x in v]
    if t is tuple:
        if shared is not None:
            hit = shared.get(id(v))
            if hit is not None and hit[0] is v:
                return hit[1]
        out, frozen = _decode_tuple(v, depth)
        if frozen and shared is not None:
            if len(shared) >= MAX_SHARED_PARAMS:
                shared.clear()
            shared[id(v)] = (v, out)
        return out
    raise _NotPlain


class _NoParams(dict):
    """The parameters of an entry recorded without any: an empty dict that refuses to change, so
    that every such entry can share one (they are most entries: every message is recorded
    three times, sent, received and acknowledged; 64 bytes each otherwise, 0.8 GB in
    muffliato-gd at n = 2048). It reads, compares and encodes as `{}`."""

    __slots__ = ()

    def _refuse(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError("a ledger entry's parameters are read-only")

    __setitem__ = __delitem__ = __ior__ = _refuse
    update = setdefault = pop = popitem = clear = _refuse


#: the one `_NoParams` the entries without parameters share
NO_PARAMS: dict[str, Any] = _NoParams()


def _stored(e: Entry, id: int, ts: float, params: dict[str, Any]) -> Entry:
    """`dataclasses.replace(e, id=id, ts=ts, params=params)` without its per-call introspection
    (a tenth of a large simulation's time went there): a copy of the frozen entry's fields with
    these three set. Entry has no __post_init__ and no slots, so this is the same object."""
    c = object.__new__(Entry)
    c.__dict__.update(e.__dict__)
    c.__dict__.update(id=id, ts=ts, params=params)
    return c


class MemoryLedger(Ledger):
    """A ledger in memory (see the module docstring). `clock` gives the entries' timestamps
    (the simulator's virtual clock); `shared_specs` maps job ids to a spec kept once for every
    node (the public job spec, with its participant list: not n copies of it)."""

    def __init__(
        self,
        node_id: str,
        *,
        clock: Callable[[], float] = lambda: 0.0,
        keep_entries: bool = True,
        observe: Callable[[Entry], None] | None = None,
        shared_specs: dict[str, dict[str, Any]] | None = None,
        shared_params: dict[int, tuple[Any, Any]] | None = None,
    ) -> None:
        # no super().__init__: there is no file; the group-commit state is the Ledger's
        self.directory = None  # type: ignore[assignment]
        self.path = f"memory:{node_id}"  # type: ignore[assignment]
        self.readonly = False
        self.node_id = node_id
        self.clock = clock
        self.keep_entries = keep_entries
        self.observe = observe
        self.shared_specs = shared_specs if shared_specs is not None else {}
        self.shared_params = shared_params if shared_params is not None else {}
        self._received = {}
        self._staged = []
        self._staged_received = {}
        self._flush_scheduled = False
        self._deferred = None
        self.executor = None  # on the loop, always: the simulator runs no threads
        self._lock = threading.Lock()
        self._inflight = None
        self._flush_pending = False
        self._entries: list[Entry] = []
        self._jobs: dict[str, JobRow] = {}
        self._custody: dict[str, dict[str, tuple[np.ndarray, dict[str, Any]]]] = {}
        self._next_id = 1
        self._ledger_id = secrets.token_hex(16)
        self._meta_values: dict[str, str] = {}

    # -- identity -------------------------------------------------------------------------------
    @property
    def ledger_id(self) -> str:
        return self._ledger_id

    @property
    def created(self) -> float:
        return 0.0

    @property
    def acks_from(self) -> int | None:
        return 1

    def join_after(self, store_id: str, job_seq: int) -> tuple[int, bool]:
        key = f"join_after:{store_id}"
        if key in self._meta_values:
            return int(self._meta_values[key]), False
        self._meta_values[key] = str(int(job_seq))
        return int(job_seq), True

    def close(self) -> None:
        self.flush()

    # -- writing ----------------------------------------------------------------------------------
    def _append(self, entries: Iterable[Entry], now: float) -> None:
        for e in entries:
            self._next_id += 1
            if self.keep_entries:  # as the SQLite ledger reads it back: id, time, JSON params
                e = _stored(
                    e,
                    self._next_id - 1,
                    e.ts or now,
                    self._params(e.params) if e.params else NO_PARAMS,
                )
                self._entries.append(e)
            if self.observe is not None:
                self.observe(e)

    def _params(self, params: dict[str, Any]) -> dict[str, Any]:
        """An entry's parameters as the SQLite ledger reads them back (through JSON), built
        without the JSON text where `_decode` can; the immutable tuples among them are decoded
        once and shared, by the ledgers of a simulation when it hands them one `shared_params`.
        Entries are immutable: their parameters are read, never changed."""
        try:
            got: dict[str, Any] = _decode(params, 0, self.shared_params)
        except _NotPlain:
            return json.loads(_params_json(params))
        return got

    def _write(self, steps: Sequence[_Step]) -> None:
        """As `Ledger._write`: all of `steps` or nothing (a received message stored twice is
        refused, as the SQLite index refuses it)."""
        seen: set[tuple[str, str, str, str, int, int, int]] = set()
        for step in steps:
            for e in step.entries:
                if e.direction != "received":
                    continue
                ident = (e.job_id, *_identity(e))
                if ident in seen or _identity(e) in self._received.get(e.job_id, {}):
                    raise LedgerError(
                        "ledger refused the entries: UNIQUE constraint failed: "
                        "a received message is stored once"
                    )
                seen.add(ident)
        now = self.clock()
        for step in steps:
            self._append(step.entries, now)
            for e in step.entries:
                if e.direction == "received":
                    self._received.setdefault(e.job_id, {})[_identity(e)] = e.digest
            if step.job_update:
                self._update(**step.job_update)
            for job_id, key in step.drop:
                self._custody.get(job_id, {}).pop(key, None)
            for job_id, key, arr, meta in step.keep:
                self._custody.setdefault(job_id, {})[key] = (
                    np.array(arr, dtype="<f8"),
                    json.loads(json.dumps(meta, sort_keys=True)),
                )

    def begin_job(
        self,
        job_id: str,
        algorithm: str,
        spec: dict[str, Any],
        contributed: bool,
        entries: Iterable[Entry] = (),
        *,
        state: str = "running",
        detail: str = "",
    ) -> bool:
        self.flush()
        if job_id in self._jobs:
            return False
        now = self.clock()
        spec = self.shared_specs.get(job_id) or json.loads(json.dumps(spec, sort_keys=True))
        self._jobs[job_id] = JobRow(
            job_id=job_id,
            algorithm=algorithm,
            spec=spec,
            state=state,
            contributed=contributed,
            started=now,
            finished=now if state in ("done", "failed") else None,
            result=None,
            detail=detail,
        )
        self._append(entries, now)
        return True

    def set_job_state(
        self, job_id: str, state: str, *, result: dict[str, Any] | None = None, detail: str = ""
    ) -> None:
        self.flush()
        self._update(job_id=job_id, state=state, result=result, detail=detail)

    def _update(
        self, *, job_id: str, state: str, result: dict[str, Any] | None = None, detail: str = ""
    ) -> None:
        row = self._jobs.get(job_id)
        if row is None:
            return  # (as SQL's UPDATE of no row)
        finished = self.clock() if state in ("done", "failed") else row.finished
        self._jobs[job_id] = replace(
            row,
            state=state,
            finished=finished,
            detail=detail,
            result=json.loads(json.dumps(result)) if result is not None else row.result,
        )

    # -- reading ----------------------------------------------------------------------------------
    def received_digest(
        self, job_id: str, peer: str, key: tuple[str, str, int, int, int]
    ) -> str | None:
        staged = self._staged_received.get((job_id, peer, *key))
        if staged is not None:
            return staged[0]
        return self._received.get(job_id, {}).get((peer, *key))

    def kept(self, job_id: str) -> dict[str, tuple[np.ndarray, dict[str, Any]]]:
        self.flush()
        return {k: (a.copy(), dict(m)) for k, (a, m) in self._custody.get(job_id, {}).items()}

    def entries(
        self, job_id: str | None = None, *, events: Sequence[str] | None = None
    ) -> list[Entry]:
        self.flush()
        return [
            e
            for e in self._entries
            if (job_id is None or e.job_id == job_id) and (events is None or e.event in events)
        ]

    def jobs(self) -> list[JobRow]:
        self.flush()
        return sorted(self._jobs.values(), key=lambda r: r.started)

    def job(self, job_id: str) -> JobRow | None:
        self.flush()
        return self._jobs.get(job_id)
