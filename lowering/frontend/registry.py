"""Which ATen ops aotpack lowers, and how: one function per op (or family of overloads).

Op modules register themselves here with `@lowers(aten.exp.default, ...)`; `lowering_for` finds them.
Registering an OpOverloadPacket (`aten.add`) covers all its overloads.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Lowering = Callable[..., Any]

_LOWERINGS: dict[Any, Lowering] = {}


class OptionalOps:
    """An op namespace whose missing ops are None: op sets differ between torch releases."""

    def __init__(self, namespace: Any) -> None:
        self._namespace = namespace

    def __getattr__(self, name: str) -> Any:
        try:
            return getattr(self._namespace, name)
        except (AttributeError, RuntimeError):
            return _MISSING


class _Missing:
    """A missing op: its overloads are missing too, and `lowers` skips it."""

    def __getattr__(self, name: str) -> Any:
        return self


_MISSING = _Missing()


def lowers(*ops: Any) -> Callable[[Lowering], Lowering]:
    """Registers fn for each op; None entries (ops this torch release lacks) are skipped."""

    def register(fn: Lowering) -> Lowering:
        for op in ops:
            if op is not None and op is not _MISSING:
                _LOWERINGS[op] = fn
        return fn

    return register


def lowering_for(target: Any) -> Lowering | None:
    fn = _LOWERINGS.get(target)
    if fn is None:
        packet = getattr(target, "overloadpacket", None)
        fn = _LOWERINGS.get(packet) if packet is not None else None
    return fn


def op_name(target: Any) -> str:
    name = getattr(target, "__name__", None) or str(target)
    return str(target) if hasattr(target, "overloadpacket") else name
