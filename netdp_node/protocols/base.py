"""The sans-IO engine interface shared by every protocol.

An engine is a state machine: it is built from the public job parameters, the node's private data
and a private random generator, and it only ever *returns actions*. It never touches sockets, clocks,
files or global state, which is what lets the same engine run in the gRPC daemon, over the in-memory
transport in tests, and thousands at a time in the simulator.

    engine.start()                    -> [actions]
    engine.on_message(sender, msg)    -> [actions]   (or raises Refused, leaving the state unchanged)
    engine.on_timer(name)             -> [actions]

Actions:
    Send(to, msg)        deliver `msg` to participant `to` (the runtime records it in the ledger first)
    SetTimer(name, s)    call on_timer(name) after s seconds (virtual seconds in the simulator)
    Record(entry)        append a view entry to the node's ledger (noise parameters, never samples)
    Output(result)       the job is finished at this node, with this released result
    Keep(key, payload)   keep a copy (custody of a token) durably until Drop(key); in the same
                         transaction as the step's ledger entries; handed back by restore()
    Drop(key)            the copy is no longer needed
    Flush()              make every step staged so far durable now (see `Engine.defer_receipts`)
    Publish(msg)         put `msg` on the job's public bulletin, once per kind (the runtime records
                         it in the ledger first, then uploads it; see `Engine.on_published`)

Optional hooks, for engines that need them (token walks):
    engine.on_delivered(to, msg)              -> [actions]   the receiver acknowledged `msg`
    engine.on_undeliverable(to, msg, code, why) -> [actions] | None   it refused it or never took
                                                it; None (the default) fails the job at this node
    engine.on_published(kind, published)      -> [actions]   the other participants' messages
                                                of `kind` on the job's bulletin, {participant: msg},
                                                a batch at a time, each participant once
    engine.restore(entries, kept)             -> [actions] | None   resume after a restart from the
                                                node's own ledger entries and kept copies; None
                                                (the default) means the engine cannot resume
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import math
import types
import typing
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from netdp_node.lazy import lazy_module

if TYPE_CHECKING:
    import numpy as np
else:
    np = lazy_module("numpy")  # lazy: start-up cost


class RefusalCode(enum.Enum):
    """Why an engine refused a message; the transport maps each to a gRPC status."""

    PERMISSION_DENIED = (
        "permission_denied"  # the sender may not send this (not the predecessor, ...)
    )
    INVALID_ARGUMENT = "invalid_argument"  # malformed content (shape, NaN, unknown kind)
    FAILED_PRECONDITION = (
        "failed_precondition"  # out of order, stale, or conflicts with stored state
    )
    ALREADY_EXISTS = "already_exists"  # same identity as a stored message but different content


class Refused(Exception):
    """Raised by `on_message` to refuse a message. The engine's state must be unchanged."""

    def __init__(self, code: RefusalCode, reason: str) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = reason


@dataclass(frozen=True)
class Message:
    """One protocol message between participants (the body of a wire Envelope).

    The sender's identity is not a field: it comes from the authenticated channel.
    `walk`/`epoch`/`seq` identify token hops, `round` synchronous rounds. `scalars` holds small public
    protocol fields. `payload` is a read-only float array (or None).
    """

    kind: str
    payload: np.ndarray | None = None
    walk: str = ""
    epoch: int = 0
    seq: int = 0
    round: int = 0
    scalars: Mapping[str, float] = field(default_factory=dict)

    def key(self) -> tuple[str, str, int, int, int]:
        """Identity of the message on its link: an exact re-send has the same key and digest."""
        return (self.kind, self.walk, self.epoch, self.seq, self.round)

    def digest(self) -> str:
        """SHA-256 over the whole content; used to tell an exact duplicate from a conflict.
        Computed once per message (a message is immutable; its payload is not written to)."""
        cached = self.__dict__.get("_digest")
        if cached is not None:
            return cached
        h = hashlib.sha256()
        h.update(repr(self.key()).encode())
        h.update(repr(sorted(self.scalars.items())).encode() if self.scalars else b"[]")
        if self.payload is not None:
            # the shape of np.ascontiguousarray(payload): a 0-d payload counts as (1,)
            h.update(repr(tuple(self.payload.shape) or (1,)).encode())
            h.update(self.payload_bytes())
        d = h.hexdigest()
        object.__setattr__(self, "_digest", d)
        return d

    def payload_bytes(self) -> bytes:
        """The payload as little-endian float64 bytes, in C order (what the digest hashes and what
        the wire carries of a float64 payload). Kept with the message once computed, and given by
        the wire decoder for a received float64 payload (the bytes the array is a view of)."""
        cached: bytes | None = self.__dict__.get("_payload_bytes")
        if cached is None:
            if self.payload is None:
                raise ValueError("the message has no payload")
            cached = np.ascontiguousarray(self.payload, dtype="<f8").tobytes()
            if len(cached) <= PAYLOAD_BYTES_KEPT:
                object.__setattr__(self, "_payload_bytes", cached)
        return cached


#: Up to this many payload bytes are kept with a message (`Message.payload_bytes`): a small
#: payload's encoding is needed twice (digest, wire), a large one is not kept twice in memory.
PAYLOAD_BYTES_KEPT = 4096


@dataclass(frozen=True)
class Send:
    to: str
    msg: Message


@dataclass(frozen=True)
class SetTimer:
    name: str
    delay: float


@dataclass(frozen=True)
class Record:
    """A view entry for the ledger. `event` names what happened ("contribute", "noise", "decline",
    "observe", ...); `peer` is the other party if any; `params` holds public noise parameters
    (mechanism, sigma, sensitivity, count...). Never raw data, never noise samples."""

    event: str
    peer: str = ""
    params: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Output:
    """The job finished at this node. `value` is the released result (public once released)."""

    value: np.ndarray | None
    info: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Keep:
    """Keep `payload` (with public `meta`) durably under `key` until Drop(key)."""

    key: str
    payload: np.ndarray
    meta: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Drop:
    key: str


@dataclass(frozen=True)
class Flush:
    """Make every step this node has staged durable now, which acknowledges the messages they
    received (for an engine with `defer_receipts`: a receipt it must not keep waiting)."""


@dataclass(frozen=True)
class Publish:
    """Put `msg` on the job's public bulletin (one entry per participant and message kind).

    The bulletin (the bootstrap's, `netdp_node.transport.base.Bulletin`) authenticates the
    publisher by its channel, so nobody can publish for another participant, and serves every
    participant's entry to every participant: n uploads and n downloads instead of n(n - 1)
    messages. Once its publication is durable in its ledger and uploaded, the node reads the
    bulletin's entries of `msg.kind` and hands them to `Engine.on_published`. Which participants
    published is part of what the reader learns: an entry that never comes is not an empty one."""

    msg: Message


Action = Send | SetTimer | Record | Output | Keep | Drop | Flush | Publish


class PublicJob:
    """What every engine of one job derives from the public job context alone (the participant
    tuple, each participant's position, the graph's edges as indices, a protocol's public graph):
    built once per job and shared, read-only, by the engines of every node that holds the same
    context (`JobContext.for_node`), so that n simulated nodes do not hold n copies of it.

    Only values that depend on the public context and not on `me` belong here."""

    __slots__ = ("_values",)

    def __init__(self) -> None:
        self._values: dict[str, Any] = {}

    def get(self, key: str, build: Callable[[], Any]) -> Any:
        """The value under `key`, built by `build()` the first time it is asked for."""
        v = self._values.get(key, _MISSING)
        if v is _MISSING:
            v = self._values[key] = build()
        return v


_MISSING = object()


@dataclass(frozen=True)
class JobContext:
    """Public job parameters, identical at every participant and at the accountant."""

    job_id: str
    algorithm: str
    me: str
    participants: Sequence[str]  # ordered (the ring order for a ring)
    params: Mapping[str, Any]
    public_seed: int
    edges: Sequence[tuple[str, str]] = ()
    #: derived public values, shared by the contexts made with `for_node` (not part of equality)
    shared: PublicJob = field(default_factory=PublicJob, compare=False, repr=False)

    def for_node(self, me: str) -> JobContext:
        """The same job at participant `me`, sharing every public value derived from it."""
        return dataclasses.replace(self, me=me)

    @property
    def ids(self) -> tuple[str, ...]:
        """The participants, in order, as a tuple (built once per job)."""
        return self.shared.get("ids", lambda: tuple(self.participants))

    @property
    def position(self) -> Mapping[str, int]:
        """Participant -> its index (built once per job)."""
        return self.shared.get("position", lambda: {v: i for i, v in enumerate(self.ids)})

    def edge_indices(self) -> list[tuple[int, int]]:
        """The job's edges as pairs of participant indices (edges naming others are left out)."""

        def build() -> list[tuple[int, int]]:
            index = self.position
            return [(index[a], index[b]) for a, b in self.edges if a in index and b in index]

        return self.shared.get("edge_indices", build)


_P = TypeVar("_P", bound="Params")

#: Keys of a job's parameters that the runtime reads for every algorithm (the job's deadline),
#: whether or not the algorithm's parameters name them: `Params.from_wire` passes over them.
RUNTIME_KEYS = frozenset({"deadline_s"})


class Params:
    """Base of an algorithm's typed job parameters; each subclass is a frozen dataclass (fields
    typed, defaults in the class).

    The life of a job's parameters:
    - `prepare(raw, n)` at submission (the bootstrap's SubmitJob, `netdp demo`, `netdp simulate`):
      refuses names it does not know (`inputs`, `derived`), fills defaults, checks every value with
      a ValueError naming the field, calibrates the noise;
    - `to_wire()` the JSON object the job spec carries to every node (the wire format);
    - `from_wire(spec_params)` at each node and accountant: reads a prepared object back, with no
      calibration, no randomness and no checks of the values (the submission checked them), each
      value converted to its field's type; unknown keys are refused. An engine gets its job's
      parameters with `of_job(ctx)`: read once per job, shared by the job's engines.
    """

    #: the algorithm these parameters belong to (named in error messages)
    algorithm: ClassVar[str] = ""
    #: the names a submission may give (`prepare`)
    inputs: ClassVar[frozenset[str]] = frozenset()
    #: derived names a submission may carry (a prepared spec submitted again): computed afresh
    derived: ClassVar[frozenset[str]] = frozenset()

    @classmethod
    def prepare(cls: type[_P], raw: Mapping[str, Any], n: int) -> _P:
        raise NotImplementedError

    @classmethod
    def check_known(cls, raw: Mapping[str, Any]) -> None:
        """Refuse the names of `raw` that are neither `inputs` nor `derived`."""
        unknown_names(cls.algorithm, set(raw) - cls.inputs - cls.derived, cls.inputs)

    @classmethod
    def default(cls, name: str) -> Any:
        """The class's default of field `name`."""
        f = {f.name: f for f in dataclasses.fields(cls)}[name]  # type: ignore[arg-type]
        if f.default is dataclasses.MISSING:
            raise KeyError(f"{cls.__name__}.{name} has no default")
        return f.default

    @classmethod
    def integer_inputs(cls) -> frozenset[str]:
        """The `inputs` whose field is an integer (a submission's 2.7 is refused, not truncated)."""
        return frozenset(k for k, conv in _converters(cls).items() if conv is int) & cls.inputs

    @classmethod
    def from_wire(cls: type[_P], wire: Mapping[str, Any]) -> _P:
        """The prepared parameters of a job spec. Keys the class does not know are refused (but
        `RUNTIME_KEYS`); a missing field without a default is an error naming it."""
        conv = _converters(cls)
        unknown_names(cls.algorithm, set(wire) - conv.keys() - RUNTIME_KEYS, conv.keys())
        missing = sorted(
            f.name
            for f in dataclasses.fields(cls)  # type: ignore[arg-type]
            if f.name not in wire
            and f.default is dataclasses.MISSING
            and f.default_factory is dataclasses.MISSING
        )
        if missing:
            also = f" (so are {', '.join(missing[1:])})" if missing[1:] else ""
            raise ValueError(f"{missing[0]} is missing from the {cls.algorithm} parameters{also}")
        values = {}
        for k, v in wire.items():
            if k in conv:
                try:
                    values[k] = conv[k](v)
                except (TypeError, ValueError, OverflowError):
                    raise invalid(k, _KIND_OF.get(cls, {}).get(k, "valid"), v) from None
        return cls(**values)

    @classmethod
    def of_job(cls: type[_P], ctx: JobContext) -> _P:
        """The job's parameters, read from `ctx.params` once per job and shared by the engines of
        every node holding the same context (`JobContext.for_node`)."""
        p = ctx.shared.get("params", lambda: cls.from_wire(ctx.params))
        # a context used for another algorithm's engine (tests) reads its own
        return p if type(p) is cls else cls.from_wire(ctx.params)

    def to_wire(self) -> dict[str, Any]:
        """The JSON object of the job spec (fields left at None are omitted; tuples as lists)."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            v = getattr(self, f.name)
            if v is not None:
                out[f.name] = _json(v)
        return out


# -- the checks of a submission's values: every error names the one field at fault, first --------
def shown(v: Any) -> str:
    """A value as an error message shows it (its repr, cut at 40 characters)."""
    r = repr(v)
    return r if len(r) <= 40 else r[:37] + "..."


def invalid(field: str, rule: str, got: Any, note: str = "") -> ValueError:
    """The error of a parameter's value, in the one form of every parameter check:
    `<field> must be <rule>, got <value>` (then `note`: the reason, or the other field of a rule
    on two). The field named is the one to change first."""
    return ValueError(f"{field} must be {rule}, got {shown(got)}" + (f" ({note})" if note else ""))


def unknown_names(algorithm: str, unknown: Iterable[str], known: Iterable[str]) -> None:
    """Refuse names an algorithm's parameters do not have: the first one named first."""
    names = sorted(unknown)
    if names:
        also = f" (so are {', '.join(names[1:])})" if names[1:] else ""
        raise ValueError(
            f"{names[0]} is not a {algorithm} parameter{also}; known: {', '.join(sorted(known))}"
        )


def given_first(raw: Mapping[str, Any], *fields: str) -> tuple[str, str]:
    """Of a rule on several fields, the one to name first (the first of `fields` the submission
    gave, else the first of `fields`) and the others, for the message."""
    first = next((f for f in fields if f in raw), fields[0])
    return first, " and ".join(f for f in fields if f != first)


def beyond_reach(raw: Mapping[str, Any], e: Exception, *fields: str) -> ValueError:
    """A calibration that cannot be computed for the values given (`e`: it found no noise, or
    a float overflowed): the error names the first of `fields` (the parameters it depends on,
    the one to change first leading) that the submission gave."""
    first, _ = given_first(raw, *fields)
    return invalid(first, "within what the calibration can meet", raw.get(first), str(e) or repr(e))


def number(raw: Mapping[str, Any], field: str, default: Any) -> float:
    """The finite number `raw[field]` (`default` when absent): a ValueError naming the field."""
    v = raw.get(field, default)
    try:
        x = float(v)
    except (TypeError, ValueError, OverflowError):
        raise invalid(field, "a number", v) from None
    if not math.isfinite(x):
        raise invalid(field, "a finite number", v)
    return x


def integer(raw: Mapping[str, Any], field: str, default: Any) -> int:
    """The integer `raw[field]` (`default` when absent; 2.0 and "2" are 2, 2.5 is refused, not
    truncated): a ValueError naming the field."""
    v = raw.get(field, default)
    if isinstance(v, bool):
        raise invalid(field, "an integer", v)
    if isinstance(v, int):
        return v
    if isinstance(v, float) and v.is_integer():
        return int(v)
    if isinstance(v, str):
        try:
            return int(v.strip())
        except ValueError:
            pass
    raise invalid(field, "an integer", v)


def word(raw: Mapping[str, Any], field: str, default: str, choices: Iterable[str]) -> str:
    """The string `raw[field]` (`default` when absent), one of `choices`."""
    v = raw.get(field, default)
    allowed = list(choices)
    if not isinstance(v, str) or v not in allowed:
        raise invalid(field, "one of " + ", ".join(repr(c) for c in allowed), v)
    return v


def boolean(raw: Mapping[str, Any], field: str, default: bool) -> bool:
    """The boolean `raw[field]` (`default` when absent; 0 and 1 are taken for false and true)."""
    v = raw.get(field, default)
    if isinstance(v, bool):
        return v
    if isinstance(v, (int, float)) and v in (0, 1):
        return bool(v)
    raise invalid(field, "true or false", v)


def _json(v: Any) -> Any:
    return [_json(x) for x in v] if isinstance(v, tuple) else v


def _tuples(v: Any) -> Any:
    return tuple(_tuples(x) for x in v) if isinstance(v, (list, tuple)) else v


def _optional(conv: Callable[[Any], Any]) -> Callable[[Any], Any]:
    return lambda v: None if v is None else conv(v)


def _converter(hint: Any) -> Callable[[Any], Any]:
    if hint in (int, float, str, bool):
        return typing.cast(Callable[[Any], Any], hint)
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        rest = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(rest) == 1 and len(rest) < len(typing.get_args(hint)):
            return _optional(_converter(rest[0]))
        return lambda v: v
    if typing.get_origin(hint) is tuple:
        return _tuples
    return lambda v: v


_CONVERTERS: dict[type, dict[str, Callable[[Any], Any]]] = {}
#: field name -> what its wire value must be, for the error of `from_wire`
_KIND_OF: dict[type, dict[str, str]] = {}
_KINDS = {int: "an integer", float: "a number", str: "a string", bool: "a boolean"}


def _converters(cls: type) -> dict[str, Callable[[Any], Any]]:
    """Field name -> the conversion of a wire value to the field's type (int(), float(), ...)."""
    conv = _CONVERTERS.get(cls)
    if conv is None:
        hints = typing.get_type_hints(cls)
        fields = dataclasses.fields(cls)
        conv = _CONVERTERS[cls] = {f.name: _converter(hints[f.name]) for f in fields}
        _KIND_OF[cls] = {f.name: _kind(hints[f.name]) for f in fields}
    return conv


def _kind(hint: Any) -> str:
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        rest = [a for a in typing.get_args(hint) if a is not type(None)]
        return f"{_kind(rest[0])} or null" if len(rest) == 1 else "valid"
    return _KINDS.get(hint, "a list" if typing.get_origin(hint) is tuple else "valid")


class Engine:
    """Base class of protocol engines. Subclasses implement the three entry points."""

    algorithm: str = ""
    #: Deferred receipts. False (the default): every received message is made durable, and then
    #: acknowledged, in its own step's commit. True: a received message whose step only records
    #: (no Send, Output, SetTimer, Keep, Drop or Flush) may wait, staged, for a later commit of this
    #: node (shared, one fsync) before it is acknowledged: its next step that acts, an explicit
    #: Flush, or the runtime's bound (`Ledger.DEFER_MAX_S`). Nothing it received is acknowledged
    #: before it is durable. An engine that sets it must Flush wherever its peers may be waiting for
    #: those acknowledgements (Muffliato: when a round's window closes).
    defer_receipts: bool = False
    #: Message kinds this engine still takes once it has finished at this node: the protocol's
    #: close-down traffic, which adds nothing to the job (walk: the handoff or fence of a copy it
    #: forwarded; Muffliato: the peers' public schedules; IncA: late records and proxies). The
    #: runtime refuses every other new message for a job that is over (a second release, a token,
    #: a round value); an exact re-send of a stored message is still acknowledged.
    closing_kinds: frozenset[str] = frozenset()
    #: the class of this engine's job parameters; None: the engine reads none
    params_class: ClassVar[type[Params] | None] = None
    #: the job's parameters (`params_class.of_job`: one object per job, shared and frozen);
    #: each engine narrows the type
    params: Any

    def __init__(
        self,
        ctx: JobContext,
        data: np.ndarray | None,
        rng: np.random.Generator,
        contribute: bool = True,
    ) -> None:
        self.ctx = ctx
        # ordered (the ring order for a ring); shared with the job's other engines: read-only
        self.ids: tuple[str, ...] = ctx.ids
        self.n = len(self.ids)
        self.position: Mapping[str, int] = ctx.position  # participant -> its index (shared)
        if ctx.me not in self.position:
            raise ValueError(f"{ctx.me} is not a participant of job {ctx.job_id}")
        self.data = data
        self.rng = rng
        # False when the node declined the job (budget): it still takes part, adds the noise the
        # protocol assigns it, but contributes no data.
        self.contribute = contribute
        self.done = False
        self.params = None if self.params_class is None else self.params_class.of_job(ctx)

    # -- entry points -------------------------------------------------------------------------
    def start(self) -> list[Action]:
        raise NotImplementedError

    def on_message(self, sender: str, msg: Message) -> list[Action]:
        raise NotImplementedError

    def on_timer(self, name: str) -> list[Action]:
        return []

    def on_delivered(self, to: str, msg: Message) -> list[Action]:
        return []

    def on_undeliverable(
        self, to: str, msg: Message, code: str, detail: str
    ) -> list[Action] | None:
        return None

    def on_duplicate(self, sender: str, msg: Message) -> None:
        """An exact re-send of a message this node stored already (its acknowledgement was lost):
        the runtime acknowledges it without applying it again, unless this raises `Refused`. An
        engine whose acknowledgement stands for a decision taken later (Muffliato: the edge of a
        round is realised here) refuses a re-send that arrives after it decided otherwise, so that
        the sender learns the decision, not only that the bytes were stored."""
        return None

    def on_published(self, kind: str, published: Mapping[str, Message]) -> list[Action]:
        """Entries of the job's bulletin: {participant: its published message of `kind`}, other
        participants only, each at most once per job, authenticated by the bulletin (the
        publisher's own channel). An engine records what it takes (and may record why it does not
        take a malformed one); it is called only after this node published `kind` itself. A record
        names the participant whose entry it takes as its `peer`, or, for several at once, in its
        params' "peers" list: a restart hands the engine only the entries no record names."""
        return []

    def restore(
        self, entries: Sequence[Any], kept: Mapping[str, tuple[np.ndarray, Mapping[str, Any]]]
    ) -> list[Action] | None:
        return None

    # -- what the runtime and accountant may ask ----------------------------------------------
    def expected_steps(self) -> int:
        """How many protocol steps this node takes part in (for progress), 0 if unknown."""
        return 0

    def progress(self) -> int:
        return 0

    def payload_shape(self, kind: str) -> tuple[int, ...] | None:
        """The shape every payload of this message kind must have (None: no payload); a dimension
        `ANY_LENGTH` takes any length (the engine checks the payload itself)."""
        return None


#: a dimension of `Engine.payload_shape` that takes any length
ANY_LENGTH = -1


def shape_fits(got: tuple[int, ...] | None, want: tuple[int, ...] | None) -> bool:
    """Whether a payload of shape `got` (None: no payload) fits `Engine.payload_shape`'s `want`."""
    if got is None or want is None:
        return got == want
    return len(got) == len(want) and all(w in (g, ANY_LENGTH) for g, w in zip(got, want))


def replace_payload(msg: Message, payload: np.ndarray) -> Message:
    return dataclasses.replace(msg, payload=payload)
