"""Which ATen ops aotpack lowers, and how: one function per op (or family of overloads).

Op modules register themselves here with `@lowers(aten.exp.default, ...)`; `lowering_for` finds them.
Registering an OpOverloadPacket (`aten.add`) covers all its overloads.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Lowering = Callable[..., Any]

_LOWERINGS: dict[Any, Lowering] = {}


def lowers(*ops: Any) -> Callable[[Lowering], Lowering]:
    def register(fn: Lowering) -> Lowering:
        for op in ops:
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
