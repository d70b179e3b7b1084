"""The kernel-graph IR: buffers, kernels and the program that orders them. Frozen; stages make new ones.

A kernel reads and writes whole buffers by name; a view of a buffer (permute, slice, expand, reshape of
contiguous data) is not a buffer of its own but an index expression inside the kernel that reads it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Union

import sympy

from . import scalar
from .scalar import Load, Node
from .symbolic import index_var

BUFFER_KINDS = ("input", "weight", "arena", "output")


@dataclass(frozen=True)
class Buffer:
    """Dense row-major memory. `source` is the input's, weight's or output's name for those kinds."""

    name: str
    dtype: str
    shape: tuple[sympy.Expr, ...]
    kind: str
    source: str | None = None


@dataclass(frozen=True)
class StridedView:
    """Elements of `buffer` at offset + sum(index[d] * strides[d])."""

    buffer: str
    offset: sympy.Expr
    strides: tuple[sympy.Expr, ...]

    def offset_at(self, index) -> sympy.Expr:
        """The element offset of the view's element at `index` (expressions, one per dimension)."""
        return sympy.expand(self.offset + sum((i * s for i, s in zip(index, self.strides)), sympy.Integer(0)))


@dataclass(frozen=True)
class GatheredOperand:
    """A matmul operand that is an expression, not memory: element [b, r, c] (batch, row, column) is `value`,
    a scalar expression of the index variables g0, g1, g2 (`operand_vars`). The kernel evaluates it for each
    tile it loads, so the operand is never stored: convolution's columns are gathered from the input this way
    (implicit GEMM), and a transposed, padded or otherwise lazy operand could be too."""

    value: Node

    @property
    def dtype(self) -> str:
        return self.value.dtype

    def buffers(self) -> tuple[str, ...]:
        return _buffers_of(self.value)


@dataclass(frozen=True)
class PanelView:
    """A constant [K, N] matmul operand b laid out in panels of `width` columns, k-major: a
    [ceil(N / width), K, width] tensor in `buffer`, zero-padded to whole panels, so element (k, n) sits at
    (n // width) * width * K + width * k + n % width. A backend's layout pass makes it
    (backends/cpu/prepack.py) where its kernels read b that way; every backend of the package reads it."""

    buffer: str
    width: int
    k: int


Operand = StridedView | GatheredOperand | PanelView


def operand_vars() -> tuple[sympy.Symbol, sympy.Symbol, sympy.Symbol]:
    """The index variables (batch, row, column) of a GatheredOperand's expression."""
    return index_var("g", 0), index_var("g", 1), index_var("g", 2)


def split_gather(operand: GatheredOperand, k_var: sympy.Symbol) -> tuple[Load, sympy.Expr, sympy.Expr] | None:
    """(the load, its offset's part without `k_var`, the part with it) when a gathered operand is one plain
    load whose offset is such a sum, no term mixing k with the other index, as convolution's columns are. A
    kernel then computes the first part once per tile and the second once per step of k, instead of the
    whole offset (divisions included) for every element. None for any other expression."""
    node = operand.value
    if not isinstance(node, Load) or node.indirect:
        return None
    _, g1, g2 = operand_vars()
    other = g2 if k_var == g1 else g1
    terms = sympy.Add.make_args(sympy.expand(node.index))
    with_k = [t for t in terms if k_var in t.free_symbols]
    if any(other in t.free_symbols for t in with_k):
        return None
    return node, sympy.Add(*[t for t in terms if k_var not in t.free_symbols]), sympy.Add(*with_k)


def operand_buffers(operand: Operand) -> tuple[str, ...]:
    return operand.buffers() if isinstance(operand, GatheredOperand) else (operand.buffer,)


@dataclass(frozen=True)
class PointwiseKernel:
    """output[i0, i1, ...] = value, for every index of `shape` (the output's shape)."""

    output: str
    shape: tuple[sympy.Expr, ...]
    value: Node

    family = "pointwise"

    def reads(self) -> tuple[str, ...]:
        return _buffers_of(self.value)


@dataclass(frozen=True)
class ReductionKernel:
    """output[i...] = fold `op` of value over r0, r1, ... in `reduced` (argmax/argmin: the flat r index)."""

    output: str
    shape: tuple[sympy.Expr, ...]
    reduced: tuple[sympy.Expr, ...]
    value: Node
    op: str
    acc_dtype: str
    out_dtype: str

    family = "reduction"

    def reads(self) -> tuple[str, ...]:
        return _buffers_of(self.value)


ROW_RESULT = "@row:"  # the pseudo-buffers a row kernel's later parts read its reductions' results from


def row_result(name: str, dtype: str) -> Load:
    """In a row kernel: the result of its reduction `name` at the row being computed, rounded to `dtype`
    (the reduction's stored dtype), as the unfused program stored it for its readers."""
    return Load(ROW_RESULT + name, sympy.Integer(0), dtype)


@dataclass(frozen=True)
class RowReduction:
    """One reduction of a row kernel: `op` of value over the row's elements r0, r1, ... (ReductionKernel's
    fields). `name` is the buffer the unfused program stored it in; later parts read it as row_result(name)."""

    name: str
    value: Node
    op: str
    acc_dtype: str
    out_dtype: str


@dataclass(frozen=True)
class RowKernel:
    """Reductions over whole rows and the pointwise expression that consumes them, in one kernel (a persistent
    reduction; ir/row_fusion.py makes it): for each row (i0, i1, ... over `rows`) the reductions run in order,
    each over r0, r1, ... in `reduced`, then output[row, r] = value for every element r of the row, stored
    contiguously (row-major over rows + reduced). A reduction's value and `value` read earlier results as
    `row_result` loads; the results are not stored."""

    output: str
    rows: tuple[sympy.Expr, ...]
    reduced: tuple[sympy.Expr, ...]
    reductions: tuple[RowReduction, ...]
    value: Node

    family = "row"

    def reads(self) -> tuple[str, ...]:
        names = [b for node in (*(r.value for r in self.reductions), self.value) for b in _buffers_of(node)]
        return tuple(dict.fromkeys(b for b in names if not b.startswith(ROW_RESULT)))


@dataclass(frozen=True)
class ScatterKernel:
    """Updates `output` in place, after an earlier step wrote it: for every index (u0, u1, ...) of `shape`, in
    row-major order, output[target] = op(output[target], value); op "assign" just stores value.

    `target` is a Load of the output whose offset and indices taken from data (checked like any indirect read)
    are over u0, u1, ...; so is `value`, already of the output's dtype. Folding updates ("sum", "prod", "max",
    "min"; max/min propagate NaN) run one after another, so repeated targets fold deterministically; which of
    several "assign"s to one target wins is unspecified, as in eager.
    """

    output: str
    shape: tuple[sympy.Expr, ...]
    target: Load
    value: Node
    op: str

    family = "scatter"

    def reads(self) -> tuple[str, ...]:
        nodes = (self.value, *(i.value for i in self.target.indirect))
        return tuple(dict.fromkeys(b for node in nodes for b in _buffers_of(node)))


ACC = "@product"  # the pseudo-buffer a matmul's epilogue reads the product from (`product_value`)


def epilogue_vars() -> tuple[sympy.Symbol, sympy.Symbol, sympy.Symbol]:
    """The index variables (batch, row, column) of a matmul epilogue's expression."""
    return index_var("e", 0), index_var("e", 1), index_var("e", 2)


def product_value(dtype: str) -> Load:
    """In an epilogue: the product's element at (e0, e1, e2), rounded to the product's dtype, as the
    unfused program stored it for the pointwise kernel that read it. In a paired product, column 2 * e2."""
    return Load(ACC, sympy.Integer(0), dtype)


def paired_value(dtype: str) -> Load:
    """In a paired product's epilogue (MatmulKernel.paired): the partner product's element at (e0, e1, e2),
    column 2 * e2 + 1 of the product, rounded to the product's dtype as the partner's kernel stored it."""
    return Load(ACC, sympy.Integer(1), dtype)


ROW_STAT = "@rowstat"  # the pseudo-buffer a product's epilogue reads its rows' statistics from (`row_stat`)
ROW_SUM_GROUP = 16  # columns per group of a product's row sums (MatmulKernel.row_sums)


def row_stat(power: int) -> Load:
    """In the epilogue of a product with `row_stats`: the sum over the row being computed of the values
    (power 1) or of their squares (power 2) that the producer summed, in float32."""
    return Load(ROW_STAT, sympy.Integer(power), "float32")


@dataclass(frozen=True)
class MatmulKernel:
    """out[b, m, n] = sum_k a[b, m, k] * b[b, k, n]; operands are strided views or gathered expressions
    (GatheredOperand, of the operands' dtype), and b may be a constant laid out in panels (PanelView);
    `out` is contiguous.

    With an `epilogue`, out[b, m, n] is that expression of the index variables e0, e1, e2 (b, m, n), in
    which `product_value` stands for the product's element: a bias, activation, residual add or cast fused
    into the kernel that computes the product (ir/epilogue.py), stored in the output buffer's dtype.

    A `paired` product computes two products of one `a` at once (ir/paired_products.py): b's columns 2j and
    2j + 1 are column j of each, and the epilogue combines the two (`product_value` and `paired_value`) into
    column j of out, which has n / 2 columns (`out_columns`).

    With `row_sums` (ir/norm_folding.py) the kernel also writes that float32 buffer, [batch * m, groups, 2],
    groups = out columns / ROW_SUM_GROUP: per group of ROW_SUM_GROUP columns of each row, the sums of the values
    it stores there and of their squares, which over a row's groups add up to the row's sums. The values as
    stored or just before their rounding to out's dtype, a backend's choice (the C++ kernel sums what it stored,
    the Triton kernel the float32 values: see templates/triton/_matmul_store.py.jinja); the difference is below
    the norm's own rounding. With `row_stats` it reads such a buffer, and its epilogue's
    `row_stat(1)` and `row_stat(2)` are the row's sums: what a norm of the row needs, without a kernel of its own.
    """

    output: str
    a: Operand
    b: Operand
    batch: sympy.Expr
    m: sympy.Expr
    n: sympy.Expr
    k: sympy.Expr
    dtype: str
    epilogue: Node | None = None
    paired: bool = False
    row_sums: str | None = None
    row_stats: str | None = None

    family = "matmul"

    @property
    def out_columns(self) -> sympy.Expr:
        """The output's columns: n, or n / 2 for a paired product."""
        return self.n / 2 if self.paired else self.n

    def epilogue_reads(self) -> tuple[str, ...]:
        """The buffers the epilogue reads besides the product itself (and the row statistics, `row_stats`)."""
        if self.epilogue is None:
            return ()
        return tuple(b for b in _buffers_of(self.epilogue) if b not in (ACC, ROW_STAT))

    def reads(self) -> tuple[str, ...]:
        stats = (self.row_stats,) if self.row_stats is not None else ()
        return tuple(dict.fromkeys((*operand_buffers(self.a), *operand_buffers(self.b), *self.epilogue_reads(),
                                    *stats)))


@dataclass(frozen=True)
class AttentionKernel:
    """Scaled dot-product attention in one pass (flash-style: scores never leave the kernel).

    out[b, i, h, :] = sum_j softmax_j(s[b, h, i, j]) * v[b, h // group, j, :], where
    s = scale * q[b, h, i, :] . k[b, h // group, j, :] (+ mask, or -inf where a boolean mask is false, or
    where `causal` and j > i + causal_offset) and group = heads // kv_heads (grouped-query attention). q, k, v are strided
    [batch, heads, rows, dim] views. `mask` is a scalar expression of the index variables i0..i3 (b, h, i, j),
    so a mask computed from inputs (padding, causal, ALiBi) is fused instead of stored. The output is
    contiguous [batch, q_len, heads, value_dim]: the layout models reshape attention's result into.
    A row whose scores are all -inf gets zeros, as torch's CPU flash kernel does.
    """

    output: str
    q: StridedView
    k: StridedView
    v: StridedView
    batch: sympy.Expr
    heads: sympy.Expr
    kv_heads: sympy.Expr
    q_len: sympy.Expr
    kv_len: sympy.Expr
    head_dim: sympy.Expr
    value_dim: sympy.Expr
    scale: float
    causal: bool
    mask: Node | None
    dtype: str
    # The diagonal of causal attention, an expression of the symbols: 0 for is_causal; a mask proved causal
    # (ir/mask_structure.py) may put it elsewhere, e.g. past the cached keys.
    causal_offset: sympy.Expr = sympy.Integer(0)

    family = "attention"

    def reads(self) -> tuple[str, ...]:
        mask_reads = _buffers_of(self.mask) if self.mask is not None else ()
        return tuple(dict.fromkeys((self.q.buffer, self.k.buffer, self.v.buffer, *mask_reads)))


Kernel = Union[PointwiseKernel, ReductionKernel, RowKernel, ScatterKernel, MatmulKernel, AttentionKernel]


def writes(kernel: Kernel) -> tuple[str, ...]:
    """The buffers a kernel writes: its output, and a product's row sums (MatmulKernel.row_sums)."""
    if isinstance(kernel, MatmulKernel) and kernel.row_sums is not None:
        return (kernel.row_sums, kernel.output)
    return (kernel.output,)


def _buffers_of(node: Node) -> tuple[str, ...]:
    return tuple(dict.fromkeys(load.buffer for load in scalar.loads(node)))


@dataclass(frozen=True)
class Symbol:
    name: str
    min: int
    max: int

    @property
    def expr(self) -> sympy.Symbol:
        from .symbolic import size_symbol

        return size_symbol(self.name)


@dataclass(frozen=True)
class Program:
    """What the lowering produces: symbols, buffers, kernels in execution order, the signature's names."""

    symbols: tuple[Symbol, ...]
    buffers: dict[str, Buffer]
    steps: tuple[Kernel, ...]
    inputs: tuple[str, ...]  # buffer names, in signature order
    outputs: tuple[str, ...]
    weights: dict[str, object] = field(default_factory=dict)  # safetensors name -> torch.Tensor


@dataclass(frozen=True)
class MemoryPlan:
    """Byte offset in the session arena and largest size of every arena buffer; sizes of outputs."""

    offsets: dict[str, int]
    max_bytes: dict[str, int]
    arena_bytes: int
