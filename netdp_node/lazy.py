"""Heavy third-party modules, imported on first use instead of at start-up.

A node daemon, the bootstrap and ``netdp --help`` import the privacy accountants and the topology
code, but only some jobs need scipy or networkx, which cost about a second of CPU and tens of MB
to import (benchmarks/bench_import.py). A module that uses one of them at many call sites binds it
once at the top, by name, with `lazy_module`::

    sp = lazy_module("scipy.sparse")  # lazy: start-up cost

and the first attribute access (``sp.csr_array``) imports it. A module that uses one at a single
call site imports it there instead, marked ``# lazy: start-up cost``.

A process that is a node or the bootstrap imports what it runs on inside `long_lived_imports`.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
from collections.abc import Iterator
from types import ModuleType
from typing import Any


class LazyModule:
    """Stands for the module `name` until an attribute is read; then imports it (once). Each
    attribute read is kept on the instance, so the next read of it (``np.asarray`` in a loop) is
    an ordinary attribute lookup, as on the module itself."""

    __slots__ = ("_name", "_module", "__dict__")

    def __init__(self, name: str) -> None:
        self._name = name
        self._module: ModuleType | None = None

    def __getattr__(self, attr: str) -> Any:  # only for attributes not read before
        module = self._module
        if module is None:
            module = self._module = importlib.import_module(self._name)
        value = getattr(module, attr)
        self.__dict__[attr] = value
        return value

    def __repr__(self) -> str:
        state = "imported" if self._module is not None else "not imported yet"
        return f"<lazy module {self._name!r} ({state})>"


def lazy_module(name: str) -> Any:
    """`name` (e.g. "scipy.sparse"), imported at its first use. Typed Any: use it as the module."""
    return LazyModule(name)


@contextlib.contextmanager
def long_lived_imports() -> Iterator[None]:
    """For the imports a node or the bootstrap starts with (asyncio, gRPC, X.509, protobuf, its own
    modules): the cyclic garbage collector is off while they run, and what they made is frozen
    afterwards (`gc.freeze`). Those objects (modules, classes, functions, descriptors: some 30,000
    the collector tracks) live as long as the process, so every pass over them is wasted: some 60
    collections during the imports, and each full collection after (the interpreter's at exit
    too) would walk them all. The collector is then on again if it was before."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if enabled:
            gc.enable()
