"""Tensors during lowering: a shape and a function from an index to the scalar expression of that element.

This is how fusion happens without a separate pass: an elementwise op does not compute anything, it
returns a new loader that wraps its inputs' loaders, and a view returns a loader that rewrites the index.
Only when a value must exist in memory (a matmul operand, a value used twice, a graph output) is the
chain rendered as one pointwise kernel writing one buffer.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import sympy
from torch.utils._sympy.functions import FloorDiv, ModularIndexing

from .ir import StridedView
from .scalar import Const, Load, Node, cast
from .symbolic import Expr, contiguous_strides

Index = tuple[Expr, ...]
Loader = Callable[[Index], Node]


@dataclass(frozen=True)
class TensorValue:
    dtype: str
    shape: tuple[Expr, ...]
    loader: Loader
    view: StridedView | None = None  # set when the value is exactly a strided view of a buffer

    @property
    def rank(self) -> int:
        return len(self.shape)


def from_view(view: StridedView, dtype: str, shape: Sequence[Expr]) -> TensorValue:
    def load(index: Index) -> Node:
        offset = view.offset + sum((i * s for i, s in zip(index, view.strides)), sympy.Integer(0))
        return Load(view.buffer, sympy.expand(offset), dtype)

    return TensorValue(dtype, tuple(shape), load, view)


def from_buffer(name: str, dtype: str, shape: Sequence[Expr]) -> TensorValue:
    return from_view(StridedView(name, sympy.Integer(0), contiguous_strides(shape)), dtype, shape)


def is_contiguous(value: TensorValue) -> bool:
    if value.view is None:
        return False
    expected = contiguous_strides(value.shape)
    return all(size == 1 or sympy.expand(s - e) == 0 for s, e, size in zip(value.view.strides, expected, value.shape))


def _with_view(value: TensorValue, shape: Sequence[Expr], loader: Loader, view: StridedView | None) -> TensorValue:
    if view is not None:
        return from_view(view, value.dtype, shape)
    return TensorValue(value.dtype, tuple(shape), loader)


def permute(value: TensorValue, dims: Sequence[int]) -> TensorValue:
    dims = [d % value.rank for d in dims]
    inverse = [dims.index(i) for i in range(len(dims))]
    shape = [value.shape[d] for d in dims]
    view = None
    if value.view is not None:
        view = StridedView(value.view.buffer, value.view.offset, tuple(value.view.strides[d] for d in dims))
    return _with_view(value, shape, lambda idx: value.loader(tuple(idx[inverse[i]] for i in range(len(idx)))), view)


def expand(value: TensorValue, shape: Sequence[Expr]) -> TensorValue:
    """Broadcast to `shape` (leading new dims, size-1 dims stretched): strides 0, no copy."""
    lead = len(shape) - value.rank
    shape = [value.shape[d - lead] if (d >= lead and s == -1) else s for d, s in enumerate(shape)]
    stretched = [d >= lead and value.shape[d - lead] == 1 and shape[d] != 1 for d in range(len(shape))]

    def load(idx: Index) -> Node:
        return value.loader(tuple(sympy.Integer(0) if stretched[d] else idx[d] for d in range(lead, len(idx))))

    view = None
    if value.view is not None:
        strides = [sympy.Integer(0)] * lead + [
            sympy.Integer(0) if stretched[d + lead] else s for d, s in enumerate(value.view.strides)
        ]
        view = StridedView(value.view.buffer, value.view.offset, tuple(strides))
    return _with_view(value, shape, load, view)


def broadcast_to(value: TensorValue, shape: Sequence[Expr]) -> TensorValue:
    if tuple(value.shape) == tuple(shape):
        return value
    return expand(value, shape)


def slice_(value: TensorValue, dim: int, start: Expr, size: Expr, step: int) -> TensorValue:
    dim %= value.rank
    shape = list(value.shape)
    shape[dim] = size

    def load(idx: Index) -> Node:
        idx = list(idx)
        idx[dim] = start + idx[dim] * step
        return value.loader(tuple(idx))

    view = None
    if value.view is not None:
        strides = list(value.view.strides)
        offset = value.view.offset + start * strides[dim]
        strides[dim] = strides[dim] * step
        view = StridedView(value.view.buffer, sympy.expand(offset), tuple(strides))
    return _with_view(value, shape, load, view)


def select(value: TensorValue, dim: int, index: Expr) -> TensorValue:
    dim %= value.rank
    sliced = slice_(value, dim, index, sympy.Integer(1), 1)
    return squeeze(sliced, [dim])


def unsqueeze(value: TensorValue, dim: int) -> TensorValue:
    dim %= value.rank + 1
    shape = list(value.shape)
    shape.insert(dim, sympy.Integer(1))

    def load(idx: Index) -> Node:
        return value.loader(tuple(idx[:dim]) + tuple(idx[dim + 1 :]))

    view = None
    if value.view is not None:
        strides = list(value.view.strides)
        strides.insert(dim, sympy.Integer(0))
        view = StridedView(value.view.buffer, value.view.offset, tuple(strides))
    return _with_view(value, shape, load, view)


def squeeze(value: TensorValue, dims: Sequence[int]) -> TensorValue:
    """Drops the given dims, which must have size 1."""
    dims = sorted({d % value.rank for d in dims if value.shape[d % value.rank] == 1})
    keep = [d for d in range(value.rank) if d not in dims]
    shape = [value.shape[d] for d in keep]

    def load(idx: Index) -> Node:
        full = [sympy.Integer(0)] * value.rank
        for pos, d in enumerate(keep):
            full[d] = idx[pos]
        return value.loader(tuple(full))

    view = None
    if value.view is not None:
        view = StridedView(value.view.buffer, value.view.offset, tuple(value.view.strides[d] for d in keep))
    return _with_view(value, shape, load, view)


def reshape(value: TensorValue, shape: Sequence[Expr]) -> TensorValue:
    """A free view when the data is contiguous; otherwise the index goes through the flat position."""
    shape = tuple(shape)
    if is_contiguous(value):
        view = StridedView(value.view.buffer, value.view.offset, contiguous_strides(shape))
        return from_view(view, value.dtype, shape)
    if any(s == 0 for s in (*shape, *value.shape)):  # no elements, nothing is ever read (and strides are 0)
        return TensorValue(value.dtype, shape, lambda idx: cast(Const(0, "int64"), value.dtype))
    new_strides = contiguous_strides(shape)
    old_strides = contiguous_strides(value.shape)

    def load(idx: Index) -> Node:
        flat = sum((i * s for i, s in zip(idx, new_strides)), sympy.Integer(0))
        old = []
        for d, (size, stride) in enumerate(zip(value.shape, old_strides)):
            if size == 1:
                old.append(sympy.Integer(0))
            elif d == 0:  # the outermost dim needs no modulo: flat < numel
                old.append(FloorDiv(flat, stride))
            else:
                old.append(ModularIndexing(flat, stride, size))
        return value.loader(tuple(old))

    return TensorValue(value.dtype, shape, load)
