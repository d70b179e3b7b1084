"""Norms folded into the products that read them: a pre-norm model's layer and RMS norms stop being kernels.

GPT-2 normalises the residual stream before each attention and MLP block, and the normalised rows are read by
one product only (the qkv or the MLP's up projection). Run as a row kernel, the norm is a launch and a pass
over the rows, which at a few rows costs about as much as the product itself. But a norm is affine in the
row's elements once its row statistics are known:

    y[m, k] = alpha[m] * x[m, k] * g[k] + sum_j beta_j[m] * h_j[k]

(layer norm: alpha = rstd, g = gamma, beta_1 = -mean * rstd with h_1 = gamma, beta_2 = 1 with h_2 = the
bias; RMS norm: alpha = rstd, g = the weight), so the product of y with a constant W is

    (y @ W)[m, n] = alpha[m] * (x @ W')[m, n] + sum_j beta_j[m] * u_j[n],  W' = diag(g) W,  u_j = h_j @ W,

with W', u_j computed here, at export. The product reads x itself (its fast path: a plain strided operand),
and alpha, beta_j are functions of the row's sums of x and of x squared, which the product accumulates from
the tiles of x its k loop loads anyway (MatmulKernel.a_row_sum). The norm's row kernel is gone.

A row kernel R writing Y is folded into its readers when:
- Y is an intermediate read only by matrix products, each as its `a` (rows of Y in order, batch 1 or
  contiguous batches), with a constant `b` (a weight of static layout no other step reads) of depth K, the
  row length, and a floating product dtype;
- R's value and reductions are sums, products and quotients of: one buffer x read at R's own element (of
  Y's dtype), weights read at the row's element index plus a constant (g, h_j), R's reduction results, and
  functions of those results only (rsqrt(var + eps)); the value is of degree 1 in x, with the x term a row
  factor times a column factor, and every reduction a sum of degree at most 2 in x with no column factor;
- no step between R and a reader writes x.
Roundings between float types inside R are not kept: the folded product computes the norm's algebra in
float32 from x, without rounding y to Y's dtype first (an error at most that rounding's, which the export's
verification bounds like any other). The variance becomes sum(x^2) - mean * sum(x) in float32; its relative
error is about 2^-24 * (1 + mean^2 / variance), negligible unless a row's mean is thousands of times its
spread.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import sympy
import torch

from . import scalar
from .epilogue import FLOAT_PRODUCTS
from .kernels import (
    ROW_RESULT,
    Buffer,
    MatmulKernel,
    Program,
    RowKernel,
    StridedView,
    a_row_sum,
    epilogue_vars,
    product_value,
)
from .scalar import Const, Load, Node, Op
from .symbolic import flat_offset, index_var, product

FLOATS = ("float32", "float16", "bfloat16")
X = sympy.Symbol("X")  # the row's element x[m, k]
S1, S2 = sympy.Symbol("S1"), sympy.Symbol("S2")  # its row's sums of x and of x squared


class _NotFoldable(Exception):
    pass


@dataclass(frozen=True)
class _Norm:
    """A row kernel as the algebra above: x's buffer, y = alpha * X * g + sum_j beta_j * h_j, and the nodes
    of its reductions' results in terms of the row sums."""

    x: str
    alpha: sympy.Expr  # row factor
    g: sympy.Expr  # column factor (of the column symbols)
    terms: tuple[tuple[sympy.Expr, sympy.Expr], ...]  # (beta_j, h_j)
    columns: dict[sympy.Symbol, Load]  # column symbol -> the weight load at the row's element index r0 + c
    row_nodes: dict[sympy.Symbol, Node]  # result and function symbols -> nodes over the row sums


def fold_norms(program: Program) -> Program:
    t = 0
    while t < len(program.steps):
        folded = _fold(program, t)
        if folded is None:
            t += 1
        else:
            program = folded  # step t is gone: the step now at t is the next one
    return program


def _fold(program: Program, t: int) -> Program | None:
    step = program.steps[t]
    if not isinstance(step, RowKernel) or program.buffers[step.output].kind != "arena":
        return None
    y = step.output
    y_dtype = program.buffers[y].dtype
    if y_dtype not in FLOATS or len(step.reduced) != 1 or not sympy.sympify(step.reduced[0]).is_Integer:
        return None
    k = int(step.reduced[0])
    readers = [u for u in range(t + 1, len(program.steps)) if y in program.steps[u].reads()]
    products = [program.steps[u] for u in readers]
    if not readers or not all(_reads_rows_of(program, p, y, step, k) for p in products):
        return None
    try:
        norm = _analyse(program, step, k)
    except _NotFoldable:
        return None
    if program.buffers[norm.x].dtype != y_dtype:
        return None
    if any(s.output == norm.x for s in program.steps[t + 1:readers[-1]]):
        return None
    weights = dict(program.weights)
    buffers = dict(program.buffers)
    steps = list(program.steps)
    columns = {sym: _column_values(program, load, k) for sym, load in norm.columns.items()}
    for u, p in zip(readers, products):
        steps[u] = _folded_product(p, norm, columns, buffers, weights, program, u)
    del steps[t]
    del buffers[y]
    # The norm's weights and the products' original weights, where nothing reads them any more.
    read = {b for s in steps for b in s.reads()}
    for name in {*step.reads(), *(p.b.buffer for p in products)} - read:
        if buffers[name].kind == "weight":
            weights.pop(buffers.pop(name).source, None)
    return replace(program, steps=tuple(steps), buffers=buffers, weights=weights)


def _reads_rows_of(program: Program, p, y: str, row: RowKernel, k: int) -> bool:
    """Whether product p reads y only as its `a`, row by row as the row kernel wrote it, against a constant
    b that only p reads."""
    if not isinstance(p, MatmulKernel) or p.dtype not in FLOAT_PRODUCTS:
        return False
    if not isinstance(p.a, StridedView) or p.a.buffer != y or not isinstance(p.b, StridedView):
        return False
    if p.b.buffer == y or (p.epilogue is not None and y in {load.buffer for load in scalar.loads(p.epilogue)}):
        return False
    if not (sympy.sympify(p.k).is_Integer and int(p.k) == k):
        return False
    if sympy.expand(p.batch * p.m - product(row.rows)) != 0:
        return False
    rows_stride = sympy.expand(p.m * k) if p.batch != 1 else p.a.strides[0]
    if (sympy.expand(p.a.offset) != 0 or sympy.expand(p.a.strides[1] - k) != 0 or p.a.strides[2] != 1
            or sympy.expand(p.a.strides[0] - rows_stride) != 0):
        return False
    weight = program.buffers[p.b.buffer]
    static = all(sympy.sympify(e).is_Integer for e in (p.n, p.b.offset, *p.b.strides))
    if weight.kind != "weight" or not static or (p.batch != 1 and p.b.strides[0] != 0):
        return False
    return sum(p.b.buffer in s.reads() for s in program.steps) == 1  # tied weights would be stored twice


# --- the row kernel's algebra --------------------------------------------------------------------------------


class _Algebra:
    """Scalar trees -> sympy: x as X, weight loads by the row's element as column symbols, reduction results
    and functions of them only as row symbols."""

    def __init__(self, program: Program, row: RowKernel, k: int) -> None:
        self.program = program
        self.element = sympy.expand(flat_offset("i", row.rows) * k + index_var("r", 0))
        self.x: str | None = None
        self.columns: dict[sympy.Symbol, Load] = {}
        self.results: dict[str, sympy.Symbol] = {}  # row_result buffer -> symbol
        self.functions: dict[Node, sympy.Symbol] = {}  # a function of results only -> symbol

    def convert(self, node: Node) -> sympy.Expr:
        if isinstance(node, Load):
            return self._load(node)
        if isinstance(node, Const):
            if isinstance(node.value, bool) or not sympy.Float(node.value).is_finite:
                raise _NotFoldable
            return sympy.Rational(node.value)
        if not isinstance(node, Op):
            raise _NotFoldable  # an index value: the norm would depend on the element's position
        if node.name == "cast":
            if node.dtype not in FLOATS or node.args[0].dtype not in FLOATS:
                raise _NotFoldable
            return self.convert(node.args[0])
        if node.name in ("add", "sub", "mul", "div"):
            a, b = (self.convert(arg) for arg in node.args)
            if node.name == "div" and X in b.free_symbols:
                raise _NotFoldable
            return {"add": a + b, "sub": a - b, "mul": a * b, "div": a / b}[node.name]
        if node.name == "neg":
            return -self.convert(node.args[0])
        exponent = node.args[1] if node.name == "pow" else None
        if isinstance(exponent, Const) and float(exponent.value) in (1.0, 2.0, 3.0):
            return self.convert(node.args[0]) ** int(exponent.value)
        return self._function(node)

    def _load(self, load: Load) -> sympy.Expr:
        if load.buffer.startswith(ROW_RESULT):
            return self.results.setdefault(load.buffer, sympy.Symbol(f"R{len(self.results)}"))
        if load.indirect:
            raise _NotFoldable
        index = sympy.expand(load.index)
        buffer = self.program.buffers[load.buffer]
        if sympy.expand(index - self.element) == 0 and buffer.kind != "weight":
            if self.x not in (None, load.buffer):
                raise _NotFoldable  # x is two buffers' elements: not one operand
            self.x = load.buffer
            return X
        offset = sympy.expand(index - index_var("r", 0))
        if buffer.kind == "weight" and offset.is_Integer and len(buffer.shape) >= 1:
            for sym, known in self.columns.items():
                if known.buffer == load.buffer and known.index == load.index:
                    return sym
            sym = sympy.Symbol(f"C{len(self.columns)}")
            self.columns[sym] = load
            return sym
        raise _NotFoldable

    def _function(self, node: Op) -> sympy.Symbol:
        """rsqrt(var + eps) and the like: kept as a node, when it reads reduction results only."""
        if any(not load.buffer.startswith(ROW_RESULT) for load in scalar.loads(node)) or _has_index_values(node):
            raise _NotFoldable
        for load in scalar.loads(node):
            self._load(load)
        return self.functions.setdefault(node, sympy.Symbol(f"F{len(self.functions)}"))


def _analyse(program: Program, row: RowKernel, k: int) -> _Norm:
    algebra = _Algebra(program, row, k)
    results: dict[sympy.Symbol, sympy.Expr] = {}  # result symbol -> its value over S1, S2 and functions
    squares: set[sympy.Symbol] = set()  # sums of squares (a variance): never negative, whatever the rounding
    for reduction in row.reductions:
        if reduction.op != "sum" or reduction.acc_dtype != "float32" or reduction.out_dtype != "float32":
            raise _NotFoldable
        value = sympy.expand(algebra.convert(reduction.value).subs(results))
        if value.free_symbols & set(algebra.columns):
            raise _NotFoldable  # weighted by column: not a function of the row sums
        c0, c1, c2 = _coefficients(value, 2)
        symbol = algebra.results.setdefault(ROW_RESULT + reduction.name, sympy.Symbol(f"R{len(algebra.results)}"))
        results[symbol] = sympy.expand(c0 * k + c1 * S1 + c2 * S2)
        if c2.is_Number and c2 > 0 and sympy.expand(c1 * c1 - 4 * c0 * c2) == 0:
            squares.add(symbol)
    value = sympy.expand(algebra.convert(row.value).subs(results))
    if algebra.x is None:
        raise _NotFoldable
    b, a = _coefficients(value, 1)
    column_syms = set(algebra.columns)
    alpha, g = _split(a, column_syms)
    if alpha == 0:
        raise _NotFoldable
    grouped: dict[sympy.Expr, sympy.Expr] = {}
    for term in sympy.Add.make_args(b):
        beta, h = _split(term, column_syms)
        grouped[h] = grouped.get(h, sympy.Integer(0)) + beta
    # The functions of results (rsqrt(var + eps)) as nodes over the row sums; a function may read another.
    row_nodes: dict[sympy.Symbol, Node] = {S1: a_row_sum(1), S2: a_row_sum(2)}
    loads: dict[Load, Node] = {}
    for reduction in row.reductions:
        symbol = algebra.results[ROW_RESULT + reduction.name]
        node = _to_node(results[symbol], row_nodes)
        if symbol in squares:  # sum(x^2) - mean * sum(x) may round below zero where the spread is nil
            node = Op("maximum", (node, Const(0.0, "float32")), "float32")
        loads[Load(ROW_RESULT + reduction.name, sympy.Integer(0), reduction.out_dtype)] = node
    for node, symbol in algebra.functions.items():
        row_nodes[symbol] = scalar.cast(scalar.substitute(node, {}, loads), "float32")
    terms = tuple((sympy.expand(beta), h) for h, beta in grouped.items() if sympy.expand(beta) != 0)
    for expr in (alpha, *(beta for beta, _ in terms)):
        if not expr.free_symbols <= set(row_nodes):
            raise _NotFoldable
    return _Norm(algebra.x, alpha, g, terms, dict(algebra.columns), row_nodes)


def _coefficients(expr: sympy.Expr, degree: int) -> list[sympy.Expr]:
    """expr's coefficients of X^0..X^degree, when it is a polynomial of at most that degree in X."""
    poly = sympy.Poly(expr, X) if X in expr.free_symbols else None
    if poly is None:
        return [expr] + [sympy.Integer(0)] * degree
    if poly.degree() > degree:
        raise _NotFoldable
    coefficients = [poly.coeff_monomial(X ** d) for d in range(degree + 1)]
    if any(X in c.free_symbols for c in coefficients):
        raise _NotFoldable
    return coefficients


def _split(term: sympy.Expr, column_syms: set[sympy.Symbol]) -> tuple[sympy.Expr, sympy.Expr]:
    """(row factor, column factor) of a product term; one that does not factor so is not foldable."""
    row, column = term.as_independent(*column_syms, as_Add=False) if column_syms else (term, sympy.Integer(1))
    if row.free_symbols & column_syms or column.free_symbols - column_syms or sympy.expand(row * column - term) != 0:
        raise _NotFoldable
    return row, column


def _has_index_values(node: Node) -> bool:
    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, scalar.IndexValue):
            return True
        if isinstance(n, Op):
            stack.extend(n.args)
    return False


def _to_node(expr: sympy.Expr, leaves: dict[sympy.Symbol, Node]) -> Node:
    """A float32 tree computing a sympy expression of the leaves (sums, products, integer powers)."""
    if expr.is_Number:
        return Const(float(expr), "float32")
    if expr.is_Symbol:
        if expr not in leaves:
            raise _NotFoldable
        return leaves[expr]
    if expr.is_Add:
        args = [_to_node(a, leaves) for a in expr.args]
        out = args[0]
        for a in args[1:]:
            out = Op("add", (out, a), "float32")
        return out
    if expr.is_Pow and expr.exp.is_Integer and int(expr.exp) > 0:
        base = _to_node(expr.base, leaves)
        out = base
        for _ in range(int(expr.exp) - 1):
            out = Op("mul", (out, base), "float32")
        return out
    if expr.is_Pow and expr.exp.is_Integer:
        return Op("div", (Const(1.0, "float32"), _to_node(expr.base ** -expr.exp, leaves)), "float32")
    if expr.is_Mul:
        factors = sympy.Mul.make_args(expr)
        numerator = [_to_node(f, leaves) for f in factors if not (f.is_Pow and f.exp.is_negative)]
        denominator = [f ** -1 for f in factors if f.is_Pow and f.exp.is_negative]
        out = numerator[0] if numerator else Const(1.0, "float32")
        for factor in numerator[1:]:
            out = Op("mul", (out, factor), "float32")
        if denominator:
            out = Op("div", (out, _to_node(sympy.Mul(*denominator), leaves)), "float32")
        return out
    raise _NotFoldable


# --- the folded product --------------------------------------------------------------------------------------


def _column_values(program: Program, load: Load, k: int) -> torch.Tensor:
    """A column symbol's values over the row (float64), as the row kernel loaded them."""
    offset = int(sympy.expand(load.index - index_var("r", 0)))
    flat = program.weights[program.buffers[load.buffer].source].reshape(-1)
    if offset < 0 or offset + k > flat.numel():
        raise _NotFoldable
    return flat[offset:offset + k].to(torch.float64)


def _evaluate(expr: sympy.Expr, values: dict[sympy.Symbol, torch.Tensor], k: int) -> torch.Tensor:
    """A column expression's values over the row, float64."""
    if expr.is_Number:
        return torch.full((k,), float(expr), dtype=torch.float64)
    if expr.is_Symbol:
        return values[expr]
    if expr.is_Add:
        return sum((_evaluate(a, values, k) for a in expr.args), torch.zeros(k, dtype=torch.float64))
    if expr.is_Mul:
        out = torch.ones(k, dtype=torch.float64)
        for a in expr.args:
            out = out * _evaluate(a, values, k)
        return out
    if expr.is_Pow and expr.exp.is_Integer:
        return _evaluate(expr.base, values, k) ** int(expr.exp)
    raise _NotFoldable


def _folded_product(p: MatmulKernel, norm: _Norm, columns: dict[sympy.Symbol, torch.Tensor], buffers: dict,
                    weights: dict, program: Program, step: int) -> MatmulKernel:
    """p reading x against W' = diag(g) W, its product turned back into y @ W in the epilogue."""
    k, n = int(p.k), int(p.n)
    weight = program.buffers[p.b.buffer]
    strides = (int(p.b.strides[1]), int(p.b.strides[2]))
    dense = torch.as_strided(program.weights[weight.source], (k, n), strides, int(p.b.offset)).to(torch.float64)
    g = _evaluate(norm.g, columns, k)
    scaled = (g[:, None] * dense).to(program.weights[weight.source].dtype)
    k_major = strides[0] == 1  # stored as the original was (nn.Linear's [n, k]), so the kernel reads it alike
    name = f"{p.b.buffer}.norm_folded"
    buffers[name] = Buffer(name, weight.dtype, (sympy.Integer(n), sympy.Integer(k)) if k_major else
                           (sympy.Integer(k), sympy.Integer(n)), "weight", f"{weight.source}.norm_folded")
    weights[buffers[name].source] = scaled.t().contiguous() if k_major else scaled.contiguous()
    b = StridedView(name, sympy.Integer(0), (sympy.Integer(0), sympy.Integer(1), sympy.Integer(k)) if k_major
                    else (sympy.Integer(0), sympy.Integer(n), sympy.Integer(1)))
    _, _, e2 = epilogue_vars()
    value = _to_node(norm.alpha, norm.row_nodes)
    value = Op("mul", (value, product_value("float32")), "float32")
    for j, (beta, h) in enumerate(norm.terms):
        # A term of g itself (layer norm's mean: -mean * rstd * gamma) sums the columns of W' as stored, so that
        # it cancels the product's own sum of x's mean against W' exactly: on a row with no spread rstd is
        # 1 / sqrt(eps), and W''s rounding error would come out multiplied by it.
        u = scaled.to(torch.float64).sum(0) if h == norm.g else _evaluate(h, columns, k) @ dense
        u = u.to(torch.float32)
        u_name = f"{p.b.buffer}.norm_term{j}"
        buffers[u_name] = Buffer(u_name, "float32", (sympy.Integer(n),), "weight", f"{weight.source}.norm_term{j}")
        weights[buffers[u_name].source] = u.contiguous()
        term = Load(u_name, e2, "float32")
        if beta != 1:
            term = Op("mul", (_to_node(beta, norm.row_nodes), term), "float32")
        value = Op("add", (value, term), "float32")
    product = scalar.cast(value, p.dtype)  # as the unfolded product was rounded before its epilogue
    epilogue = product if p.epilogue is None else scalar.substitute(p.epilogue, {}, {product_value(p.dtype): product})
    a = StridedView(norm.x, p.a.offset, p.a.strides)
    return replace(p, a=a, b=b, epilogue=epilogue)
