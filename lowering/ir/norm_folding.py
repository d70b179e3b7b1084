"""Norms folded into the products that read them, with the rows' statistics summed by the product that writes them.

A pre-norm layer runs a layer or RMS norm (a row kernel, ir/row_fusion.py) on the residual stream x that a
product's epilogue has just stored, and one product reads the result: y = norm(x) @ W. Given its row's
statistics a norm is affine in each element, norm(x)_k = A * g_k * x_k + B * g_k + h_k, with g and h vectors of
weights (gamma, beta) and A, B functions of the row's sums S1 = sum x and S2 = sum x^2 (the mean, the variance or
mean square, the epsilon), so

    y_n = A * (x @ W')_n + B * c1_n + c2_n,   W' = diag(g) W,  c1 = the column sums of W' as stored,  c2 = h @ W.

The pass rewrites such a triple: the producer also writes S1 and S2 per group of 16 of its columns
(`MatmulKernel.row_sums`, summed from the tile it stores: no other program, no order between programs), the
reader reads x itself through W' (weights made here) and its epilogue applies A, B, c1 and c2 after summing its
row's groups (`row_stats`), and the norm's kernel is gone: two launches a layer fewer for GPT-2 or Llama.

What it takes, checked on the IR: the row kernel reads one intermediate x at its own element, written by a
product (not paired, one batch) whose columns are the row, plus weight vectors at the element's column; each of
its reductions is a sum of a polynomial of degree at most 2 in x; its value is linear in x with the form above
(sympy, after dropping the casts between float types); every reader of it is a product that reads it as its `a`
(rows of the norm's width, contiguous) with a weight `b` that nothing else reads. Anything else keeps its norm.

Numerics: the fold skips the roundings the norm made on the way (a bfloat16 normalised row, a mean stored in
half) and computes the variance as S2 / n - (S1 / n)^2 in float32 from the row sums (of x as stored, or just
before its rounding: MatmulKernel); S2 is clamped to at least S1^2 / n, so rounding cannot make a variance
negative.

Off unless ENABLED (scripts/pdl_bench.py's `normfold` variant turns it on): on the H200 it gains 4.7% for GPT-2
at one row and loses from 16 rows on, 10-58% at 128 and above, because ptxas serializes the producers' wgmma and
the readers take 1.8x their time (docs/performance.md, "Folded norms on the H200, and wgmma that ptxas
serialized").
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import sympy
import torch

from . import scalar
from .kernels import (
    ACC,
    ROW_RESULT,
    ROW_SUM_GROUP,
    Buffer,
    MatmulKernel,
    Program,
    RowKernel,
    StridedView,
    epilogue_vars,
    operand_buffers,
    paired_value,
    product_value,
    row_stat,
    writes,
)
from .scalar import Const, Load, Node, Op
from .symbolic import flat_offset, fold_div_mod, index_var, product, unflatten

ENABLED = False  # slower on the H200 from 16 rows: see the module docstring

_X = sympy.Symbol("x")  # the row's element
_S1, _S2 = sympy.Symbol("S1"), sympy.Symbol("S2")  # the row's sums of x and of x^2
_FLOAT_TYPES = ("float16", "bfloat16", "float32")


@dataclass(frozen=True)
class _Norm:
    """A recognised norm: norm(x)_k = scale * g_k * x_k + shift * g_k + h_k over the row's elements k, scale and
    shift expressions of _S1 and _S2, g and h of the weight vectors' symbols (`vectors`: symbol -> buffer)."""

    x: str
    width: int
    scale: sympy.Expr
    shift: sympy.Expr
    g: sympy.Expr
    h: sympy.Expr
    vectors: dict[sympy.Symbol, str]


def fold_norms(program: Program) -> Program:
    """Every norm that qualifies (see the module docstring) folded into its producer and its readers."""
    if not ENABLED:
        return program
    t = 0
    while t < len(program.steps):
        folded = _fold(program, t)
        if folded is None:
            combined = _combined_by_producer(program, t)
            folded = _fold(combined, t) if combined is not None else None
        if folded is not None:
            program = folded  # the norm's step is gone: step t is now the one after it
        else:
            t += 1
    return program


def _fold(program: Program, t: int) -> Program | None:
    norm_step = program.steps[t]
    if not isinstance(norm_step, RowKernel) or norm_step.output in program.outputs:
        return None
    norm = _recognise(program, norm_step)
    if (norm is None or norm.width % ROW_SUM_GROUP
            or program.buffers[norm.x].dtype != program.buffers[norm_step.output].dtype):
        return None  # (the readers' a becomes x: the same operand dtype)
    rows = product(norm_step.rows)
    producer_at = max((s for s in range(t) if norm.x in writes(program.steps[s])), default=None)
    if producer_at is None:
        return None
    producer = program.steps[producer_at]
    if not (isinstance(producer, MatmulKernel) and producer.output == norm.x and not producer.paired
            and producer.dtype in _FLOAT_TYPES and producer.row_sums is None and sympy.sympify(producer.batch) == 1
            and sympy.expand(producer.m - rows) == 0 and sympy.sympify(producer.n) == norm.width):
        return None
    readers = [s for s, step in enumerate(program.steps) if norm_step.output in step.reads()]
    if not readers or not all(_reads_as_a(program, program.steps[s], norm_step.output, norm.width, rows) for s in readers):
        return None

    buffers, weights = dict(program.buffers), dict(program.weights)
    sums = f"{norm.x}.row_sums"
    buffers[sums] = Buffer(sums, "float32", (rows, sympy.Integer(norm.width // ROW_SUM_GROUP), sympy.Integer(2)),
                           "arena")
    steps = list(program.steps)
    steps[producer_at] = replace(producer, row_sums=sums)
    for s in readers:
        steps[s] = _folded_reader(steps[s], norm, sums, buffers, weights)
    del steps[t]
    del buffers[norm_step.output]
    return replace(program, steps=tuple(steps), buffers=buffers, weights=weights)


def _combined_by_producer(program: Program, t: int) -> Program | None:
    """When the norm's row combines several stored intermediates at its element (a residual add that row fusion
    left in the norm, as in Llama's norm after attention: x = h + attention's output), the program with the
    latest writer of them, a product, storing the combination instead (its epilogue computes it; the norm and
    any other reader that recomputed it read it), so that the product can sum the row. None where that does
    not hold."""
    step = program.steps[t]
    if not isinstance(step, RowKernel) or len(step.reduced) != 1:
        return None
    trees = [*(r.value for r in step.reductions), step.value]
    stored = {load.buffer for tree in trees for load in scalar.loads(tree)
              if not load.buffer.startswith(ROW_RESULT) and program.buffers[load.buffer].kind != "weight"}
    if len(stored) < 2:
        return None
    candidates = {node for tree in trees for node in _subtrees(tree) if isinstance(node, Op)
                  and stored <= {load.buffer for load in scalar.loads(node)}}
    if not candidates:
        return None
    combination = min(candidates, key=lambda node: (len(_subtrees(node)), repr(node)))
    width = int(step.reduced[0])
    element = sympy.expand(flat_offset("i", step.rows) * width + index_var("r", 0))
    writers = {name: max((s for s in range(t) if name in writes(program.steps[s])), default=-1) for name in stored}
    producer_at = max(writers.values())
    producer = program.steps[producer_at] if producer_at >= 0 else None
    rows = product(step.rows)
    if not (isinstance(producer, MatmulKernel) and producer.output in stored and not producer.paired
            and producer.dtype in _FLOAT_TYPES and producer.row_sums is None and sympy.sympify(producer.batch) == 1
            and sympy.expand(producer.m - rows) == 0 and sympy.sympify(producer.n) == width
            and program.buffers[producer.output].dtype == combination.dtype):
        return None
    if any(load.buffer == producer.output and (load.indirect or sympy.expand(load.index - element) != 0)
           for load in scalar.loads(combination)):
        return None  # the product's own value at another element than the norm's
    # the combination at the product's element (e1 its row, e2 its column), as an epilogue reads it
    _, e1, e2 = epilogue_vars()
    at_product = {**unflatten(step.rows, e1, "i"), index_var("r", 0): e2}
    combined = scalar.map_indices(scalar.substitute(combination, at_product), fold_div_mod)
    own = Load(producer.output, e1 * width + e2, combination.dtype)
    if own not in scalar.loads(combined):
        return None
    # every read of those intermediates, in the norm and in the other readers of the product, must be inside
    # the combination: the product's buffer holds the combination from now on, not its own value
    hidden = Load("@combination", sympy.Integer(0), combination.dtype)
    if any(load.buffer in stored for tree in trees for load in scalar.loads(_swap(tree, {combination: hidden}))):
        return None
    value = producer.epilogue if producer.epilogue is not None else product_value(producer.dtype)
    steps = list(program.steps)
    steps[producer_at] = replace(producer, epilogue=_swap(combined, {own: scalar.cast(value, combination.dtype)}))
    read = {combination: Load(producer.output, element, combination.dtype)}  # the norm reads what it stores
    steps[t] = replace(step, reductions=tuple(replace(r, value=_swap(r.value, read)) for r in step.reductions),
                       value=_swap(step.value, read))
    for s, other in enumerate(steps):  # other readers of the raw product must have recomputed the combination
        if s == t or s == producer_at or producer.output not in other.reads():
            continue
        if not (isinstance(other, MatmulKernel) and other.epilogue is not None and sympy.sympify(other.batch) == 1
                and sympy.expand(other.m - rows) == 0 and producer.output not in operand_buffers(other.a)
                and producer.output not in operand_buffers(other.b)):
            return None
        probe = scalar.loads(_swap(other.epilogue, {combined: hidden}))
        if hidden not in probe or any(load.buffer == producer.output for load in probe):
            return None  # it reads the raw product some other way
        steps[s] = replace(other, epilogue=_swap(other.epilogue, {combined: own}))
    return replace(program, steps=tuple(steps))


def _subtrees(node: Node) -> list[Node]:
    out, stack = [], [node]
    while stack:
        n = stack.pop()
        out.append(n)
        if isinstance(n, Op):
            stack.extend(n.args)
    return out


def _reads_as_a(program: Program, step, name: str, width: int, rows: sympy.Expr) -> bool:
    """Whether `step` reads buffer `name` only as its `a`, rows of `width` contiguous, with a weight `b` that
    no other step reads (the fold rewrites it)."""
    if not (isinstance(step, MatmulKernel) and isinstance(step.a, StridedView) and step.a.buffer == name
            and isinstance(step.b, StridedView) and step.row_stats is None and sympy.sympify(step.batch) == 1
            and sympy.sympify(step.k) == width and sympy.sympify(step.a.offset) == 0
            and sympy.sympify(step.a.strides[1]) == width and sympy.sympify(step.a.strides[2]) == 1
            and sympy.expand(step.m - rows) == 0 and name not in step.epilogue_reads() and step.b.buffer != name
            and step.dtype in _FLOAT_TYPES
            and (step.epilogue is None or product_value(step.dtype) in scalar.loads(step.epilogue))):
        return False
    weight = program.buffers[step.b.buffer]
    return (weight.kind == "weight" and weight.dtype in _FLOAT_TYPES
            and sum(step.b.buffer in other.reads() for other in program.steps) == 1
            and sum(b.source == weight.source for b in program.buffers.values()) == 1)


# --- recognising a norm ----------------------------------------------------------------------------------------


def _recognise(program: Program, step: RowKernel) -> _Norm | None:
    if len(step.reduced) != 1 or not sympy.sympify(step.reduced[0]).is_Integer:
        return None
    width = int(step.reduced[0])
    column = index_var("r", 0)
    element = sympy.expand(flat_offset("i", step.rows) * width + column)
    loads = [load for node in (*(r.value for r in step.reductions), step.value) for load in scalar.loads(node)
             if not load.buffer.startswith(ROW_RESULT)]
    intermediates = {load.buffer for load in loads if program.buffers[load.buffer].kind != "weight"}
    if len(intermediates) != 1:
        return None
    x = intermediates.pop()
    if program.buffers[x].dtype not in _FLOAT_TYPES:
        return None
    vectors: dict[sympy.Symbol, str] = {}
    for load in loads:
        if load.indirect:
            return None
        if load.buffer == x and sympy.expand(load.index - element) != 0:
            return None
        if load.buffer != x:
            if sympy.expand(load.index - column) != 0 or program.buffers[load.buffer].dtype not in _FLOAT_TYPES:
                return None  # a weight read at anything but the element's column
            vectors[sympy.Symbol(f"w_{len(vectors)}_{load.buffer}")] = load.buffer
    by_buffer = {name: symbol for symbol, name in vectors.items()}
    try:
        results: dict[str, sympy.Expr] = {}  # each reduction's result as an expression of S1 and S2
        for part in step.reductions:
            if part.op != "sum":
                return None
            poly = sympy.Poly(sympy.expand(_to_sympy(part.value, x, by_buffer, results)), _X)
            if poly.degree() > 2 or any(c.free_symbols - {_S1, _S2} for c in poly.all_coeffs()):
                return None
            c = dict(zip(range(poly.degree(), -1, -1), poly.all_coeffs()))
            results[part.name] = c.get(0, 0) * width + c.get(1, 0) * _S1 + c.get(2, 0) * _S2
        value = _to_sympy(step.value, x, by_buffer, results)
    except (_NotAffine, sympy.PolynomialError):
        return None
    slope, intercept = sympy.diff(value, _X), value.subs(_X, 0)
    if slope == 0 or sympy.diff(slope, _X) != 0:
        return None
    g, scale = slope.as_independent(_S1, _S2, as_Add=False)
    if scale.free_symbols & set(vectors) or g.free_symbols - set(vectors):
        return None
    with_stats = [term for term in sympy.Add.make_args(sympy.expand(intercept)) if term.free_symbols & {_S1, _S2}]
    shift = sympy.simplify(sympy.Add(*with_stats) / g)
    h = sympy.expand(intercept) - sympy.Add(*with_stats)
    if shift.free_symbols - {_S1, _S2} or h.free_symbols - set(vectors):
        return None
    try:  # both must have float32 nodes (_to_node), or the norm stays
        _to_node(scale, width), _to_node(shift, width)
    except ValueError:
        return None
    return _Norm(x, width, scale, shift, g, h, vectors)


class _NotAffine(Exception):
    """A node the fold has no algebra for."""


def _to_sympy(node: Node, x: str, vectors: dict[str, sympy.Symbol], results: dict[str, sympy.Expr]) -> sympy.Expr:
    """The node as sympy: x's element as _X, a weight vector as its symbol, an earlier reduction's result as its
    expression of _S1 and _S2; casts between float types dropped (the fold computes in float32)."""
    if isinstance(node, Const):
        return sympy.Float(node.value) if isinstance(node.value, float) else sympy.Integer(node.value)
    if isinstance(node, Load):
        if node.buffer == x:
            return _X
        if node.buffer.startswith(ROW_RESULT):
            return results[node.buffer[len(ROW_RESULT):]]
        return vectors[node.buffer]
    if not isinstance(node, Op):
        raise _NotAffine(node)
    args = [_to_sympy(a, x, vectors, results) for a in node.args]
    name = node.name
    if name == "cast" and node.dtype in _FLOAT_TYPES and node.args[0].dtype in _FLOAT_TYPES:
        return args[0]
    simple = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
              "div": lambda a, b: a / b, "neg": lambda a: -a, "rsqrt": lambda a: a ** sympy.Rational(-1, 2),
              "sqrt": lambda a: sympy.sqrt(a)}
    if name in simple:
        return simple[name](*args)
    if name in ("maximum", "minimum") and all(a.is_Number for a in args):
        return max(args) if name == "maximum" else min(args)
    raise _NotAffine(node)


# --- the rewrite -----------------------------------------------------------------------------------------------


def _folded_reader(step: MatmulKernel, norm: _Norm, sums: str, buffers: dict[str, Buffer],
                   weights: dict[str, object]) -> MatmulKernel:
    """The product that read the norm's row, reading x through W' and applying the norm in its epilogue."""
    view = step.b
    weight = buffers[view.buffer]
    stored = weights[weight.source].contiguous()
    n = int(sympy.sympify(step.n))
    columns = torch.as_strided(stored.reshape(-1), (norm.width, n),
                               (int(view.strides[1]), int(view.strides[2])), int(view.offset)).float()
    g = _evaluate(norm.g, norm, buffers, weights)
    h = _evaluate(norm.h, norm, buffers, weights)
    scaled = (g[:, None] * columns).to(stored.dtype)
    folded = stored.clone()
    torch.as_strided(folded.reshape(-1), (norm.width, n), (int(view.strides[1]), int(view.strides[2])),
                     int(view.offset)).copy_(scaled)
    c1 = scaled.float().sum(0)  # as stored, so that it cancels what x's mean contributes through W'
    c2 = (h[:, None] * columns).sum(0)
    del buffers[view.buffer], weights[weight.source]
    names = {}
    for suffix, tensor, dtype, shape in ((".normed", folded, weight.dtype, weight.shape),
                                         (".norm_c1", c1, "float32", (sympy.Integer(n),)),
                                         (".norm_c2", c2, "float32", (sympy.Integer(n),))):
        name = view.buffer + suffix
        buffers[name] = Buffer(name, dtype, shape, "weight", weight.source + suffix)
        weights[weight.source + suffix] = tensor.contiguous()
        names[suffix] = name

    def normed(column: sympy.Expr) -> Node:
        f32 = "float32"
        product = Op("mul", (_to_node(norm.scale, norm.width), product_value(f32)), f32)
        shift = Op("mul", (_to_node(norm.shift, norm.width), Load(names[".norm_c1"], column, f32)), f32)
        value = Op("add", (Op("add", (product, shift), f32), Load(names[".norm_c2"], column, f32)), f32)
        return scalar.cast(value, step.dtype)  # rounded as the product was stored for its epilogue

    _, _, e2 = epilogue_vars()
    if step.paired:  # b's columns 2j and 2j + 1 are the two products' column j
        own, partner = normed(2 * e2), _partner(normed(2 * e2 + 1))
        swaps = {product_value(step.dtype): own, paired_value(step.dtype): partner}
    else:
        swaps = {product_value(step.dtype): normed(e2)}
    epilogue = swaps[product_value(step.dtype)] if step.epilogue is None else _swap(step.epilogue, swaps)
    return replace(step, a=replace(step.a, buffer=norm.x), b=replace(view, buffer=names[".normed"]),
                   dtype="float32", epilogue=epilogue, row_stats=sums)


def _partner(node: Node) -> Node:
    """`node` with the accumulator's element read from the partner's column (paired_value) instead."""
    return _swap(node, {product_value("float32"): Load(ACC, sympy.Integer(1), "float32")})


def _swap(node: Node, swaps: dict[Node, Node]) -> Node:
    if node in swaps:
        return swaps[node]
    if isinstance(node, Op):
        return Op(node.name, tuple(_swap(a, swaps) for a in node.args), node.dtype)
    return node


def _evaluate(expr: sympy.Expr, norm: _Norm, buffers: dict[str, Buffer], weights: dict[str, object]) -> torch.Tensor:
    """A vector expression (g or h) per column of the row, in float32, from the weight vectors' values."""
    values = {symbol: weights[buffers[name].source].reshape(-1)[: norm.width].float()
              for symbol, name in norm.vectors.items()}
    out = sympy.lambdify(list(values), expr, modules=[{"sqrt": torch.sqrt}, "math"])(*values.values())
    return out if isinstance(out, torch.Tensor) else torch.full((norm.width,), float(out))


def _to_node(expr: sympy.Expr, width: int) -> Node:
    """A scale or shift expression of _S1 and _S2 as a float32 node over the product's row statistics; S2 is
    clamped to at least S1^2 / width (a variance computed from them is never negative)."""
    f32 = "float32"
    if expr.is_Number:
        return Const(float(expr), f32)
    if expr == _S1:
        return row_stat(1)
    if expr == _S2:
        s1 = row_stat(1)
        floor = Op("div", (Op("mul", (s1, s1), f32), Const(float(width), f32)), f32)
        return Op("maximum", (row_stat(2), floor), f32)
    if expr.is_Add or expr.is_Mul:
        name = "add" if expr.is_Add else "mul"
        parts = [_to_node(a, width) for a in expr.args]
        node = parts[0]
        for part in parts[1:]:
            node = Op(name, (node, part), f32)
        return node
    if expr.is_Pow:
        base, exponent = _to_node(expr.base, width), expr.exp
        if exponent == sympy.Rational(-1, 2):
            return Op("rsqrt", (base,), f32)
        if exponent == sympy.Rational(1, 2):
            return Op("sqrt", (base,), f32)
        if exponent == -1:
            return Op("div", (Const(1.0, f32), base), f32)
        if exponent.is_Integer and exponent > 0:
            node = base
            for _ in range(int(exponent) - 1):
                node = Op("mul", (node, base), f32)
            return node
    raise ValueError(f"no float32 node for {expr}")
