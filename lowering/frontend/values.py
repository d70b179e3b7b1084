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

from ..ir.kernels import StridedView
from ..ir.scalar import Const, Load, Node, cast
from ..ir.symbolic import Expr, affine_parts, contiguous_strides, fold_div_mod, index_var

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
        return Load(view.buffer, view.offset_at(index), dtype)

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


def affine_view(value: TensorValue) -> StridedView | None:
    """The strided view a lazy value already is, when each element is one plain load of a buffer at an offset
    affine in the element's index once reshape round trips are folded (`fold_div_mod`): a transpose and
    reshape that went through the flat position and came back to strides. None for anything else."""
    index = tuple(index_var("i", d) for d in range(value.rank))
    node = value.loader(index)
    if not isinstance(node, Load) or node.indirect or node.dtype != value.dtype:
        return None
    parts = affine_parts(fold_div_mod(node.index), index)
    return StridedView(node.buffer, *parts) if parts is not None else None


def reshape(value: TensorValue, shape: Sequence[Expr]) -> TensorValue:
    """A free view when the data is contiguous; otherwise the index goes through the flat position."""
    shape = tuple(shape)
    if is_contiguous(value):
        view = StridedView(value.view.buffer, value.view.offset, contiguous_strides(shape))
        return from_view(view, value.dtype, shape)
    if any(s == 0 for s in (*shape, *value.shape)):  # no elements, nothing is ever read (and strides are 0)
        return TensorValue(value.dtype, shape, lambda idx: cast(Const(0, "int64"), value.dtype))
    groups = _reshape_groups(value.shape, shape)
    if groups is None:  # no dim-by-dim correspondence: go through the flat position of the whole tensor
        groups = [(tuple(range(value.rank)), tuple(range(len(shape))))]

    def load(idx: Index) -> Node:
        old: list[Expr] = [sympy.Integer(0)] * value.rank
        for old_dims, new_dims in groups:
            new_sizes = [shape[d] for d in new_dims]
            flat = sum((idx[d] * s for d, s in zip(new_dims, contiguous_strides(new_sizes))), sympy.Integer(0))
            old_sizes = [value.shape[d] for d in old_dims]
            for pos, (d, stride) in enumerate(zip(old_dims, contiguous_strides(old_sizes))):
                if value.shape[d] == 1:
                    old[d] = sympy.Integer(0)
                elif pos == 0:  # the group's outermost dim needs no modulo: flat < the group's size
                    old[d] = FloorDiv(flat, stride) if stride != 1 else flat
                else:
                    old[d] = ModularIndexing(flat, stride, value.shape[d]) if stride != 1 else sympy.Mod(flat, value.shape[d])
        return value.loader(tuple(old))

    return TensorValue(value.dtype, shape, load)


def _reshape_groups(old: Sequence[Expr], new: Sequence[Expr]) -> list[tuple[tuple[int, ...], tuple[int, ...]]] | None:
    """Runs of old and new dims with equal products ([B*S, D] -> [B, S, D]: ((0,), (0, 1)), ((1,), (2,))),
    so that a reshape only does index arithmetic inside each run; a merge of dims then needs none at all.
    Size-1 dims join the run before them. None when the sizes do not line up run by run."""
    groups: list[tuple[tuple[int, ...], tuple[int, ...]]] = []
    i = j = 0
    while i < len(old) or j < len(new):
        o, n = [], []
        p_old, p_new = sympy.Integer(1), sympy.Integer(1)
        while True:
            if sympy.expand(p_old - p_new) == 0 and (o or n) and (i == len(old) or old[i] != 1) \
                    and (j == len(new) or new[j] != 1):
                break
            if i < len(old) and (not o or _divides(p_old * old[i], p_new) or j == len(new)
                                 or not _divides(p_new * new[j], p_old)):
                p_old, o = p_old * old[i], o + [i]
                i += 1
            elif j < len(new):
                p_new, n = p_new * new[j], n + [j]
                j += 1
            else:
                return None
            if i == len(old) and j == len(new) and sympy.expand(p_old - p_new) != 0:
                return None
        groups.append((tuple(o), tuple(n)))
    return groups


def _divides(a: Expr, b: Expr) -> bool:
    """Whether a divides b as polynomials in the symbols (so a run of dims can still grow to match b)."""
    quotient = sympy.cancel(sympy.sympify(b) / sympy.sympify(a))
    return sympy.fraction(quotient)[1] == 1
