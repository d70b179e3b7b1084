"""The combination every reader of a product makes of it, computed once by the product's epilogue.

Llama adds the attention block's output to the residual stream and reads the sum twice: the RMS norm before
the MLP normalises it, and the MLP's down projection adds it to its own product. The sum is never stored:
row fusion and the epilogue fusion each inline the add into its reader, so the attention's output product
keeps no epilogue, both readers load two buffers and add them, and the norm's row kernel reads a sum, which
ir/norm_folding.py cannot fold (the product it would fold into would read two buffers). Moving the add into
the product's epilogue stores the sum instead of the product: each reader loads one buffer, and the norm
folds.

A product P writing the intermediate X (no epilogue yet) gets the epilogue E when:
- every load of X in every reader (pointwise, reduction, row kernels' expressions, products' epilogues) is
  an argument of an E: an add, sub or mul of plain loads all at the load's own offset (X and other buffers,
  elementwise with X), the same E in every reader up to the offset;
- X is read in no other way (not as a product's or attention's operand);
- nothing between P and the last reader writes what E reads besides X.
X then holds E's value in E's dtype, and each E in a reader becomes a load of X. In float32 that is the value
the readers computed, bit for bit. In a half type, kernels compute in float32 and round only what they store,
so a reader had kept the sum unrounded; stored, it is rounded to the half type once, as eager PyTorch stores it.
"""

from __future__ import annotations

from dataclasses import replace

import sympy

from . import scalar
from .epilogue import FLOAT_PRODUCTS
from .kernels import (
    AttentionKernel,
    MatmulKernel,
    PointwiseKernel,
    Program,
    ReductionKernel,
    RowKernel,
    epilogue_vars,
    operand_buffers,
    product_value,
)
from .scalar import Load, Node, Op
from .symbolic import fold_div_mod

ELEMENTWISE = ("add", "sub", "mul")


def fuse_shared_combinations(program: Program) -> Program:
    for t in range(len(program.steps)):
        program = _combined(program, t) or program
    return program


def _trees(step) -> list[tuple[str, Node]]:
    """The step's expression trees a combination may be read in, by field (row kernels: their reductions')."""
    if isinstance(step, (PointwiseKernel, ReductionKernel)):
        return [("value", step.value)]
    if isinstance(step, RowKernel):
        return [*((f"reduction{j}", r.value) for j, r in enumerate(step.reductions)), ("value", step.value)]
    if isinstance(step, MatmulKernel):
        return [("epilogue", step.epilogue)] if step.epilogue is not None else []
    return []


def _with_trees(step, trees: dict[str, Node]):
    if isinstance(step, RowKernel):
        reductions = tuple(replace(r, value=trees.get(f"reduction{j}", r.value)) for j, r in enumerate(step.reductions))
        return replace(step, reductions=reductions, value=trees.get("value", step.value))
    return replace(step, **trees)


def _combined(program: Program, t: int) -> Program | None:
    p = program.steps[t]
    if not isinstance(p, MatmulKernel) or p.epilogue is not None or p.dtype not in FLOAT_PRODUCTS:
        return None
    x = p.output
    if program.buffers[x].kind != "arena" or program.buffers[x].dtype != p.dtype:
        return None
    readers = [u for u in range(t + 1, len(program.steps)) if x in program.steps[u].reads()]
    if not readers:
        return None
    shapes: set[tuple] = set()  # each combination as (op, dtype, its loads' buffers and dtypes)
    combos: dict[int, list[Op]] = {}
    for u in readers:
        step = program.steps[u]
        if isinstance(step, MatmulKernel) and x in operand_buffers(step.a) + operand_buffers(step.b):
            return None
        if isinstance(step, AttentionKernel) or not _trees(step):
            return None
        found = []
        for _, tree in _trees(step):
            parents = _parents_of_loads(tree, x)
            if parents is None:
                return None
            found += parents
        if not found:
            return None
        for op in found:
            shapes.add(_shape(op))
        combos[u] = found
    if len(shapes) != 1:
        return None
    op_name, dtype, args = next(iter(shapes))
    others = {buffer for buffer, _ in args if buffer != x}
    if any(s.output in others for s in program.steps[t + 1:readers[-1]]) or dtype not in FLOAT_PRODUCTS:
        return None
    e0, e1, e2 = epilogue_vars()
    element = sympy.expand((e0 * p.m + e1) * p.n + e2 if p.batch != 1 else e1 * p.n + e2)
    epilogue = Op(op_name, tuple(product_value(p.dtype) if buffer == x else Load(buffer, element, load_dtype)
                                 for buffer, load_dtype in args), dtype)
    steps = list(program.steps)
    steps[t] = replace(p, epilogue=epilogue)
    for u, found in combos.items():
        step = steps[u]
        replaced = {}
        for name, tree in _trees(step):
            mapping = {op: Load(x, _x_load(op, x).index, dtype) for op in found}
            replaced[name] = _substitute_nodes(tree, mapping)
        steps[u] = _with_trees(step, replaced)
    buffers = dict(program.buffers)
    buffers[x] = replace(buffers[x], dtype=dtype)
    return replace(program, steps=tuple(steps), buffers=buffers)


def _x_load(op: Op, x: str) -> Load:
    return next(a for a in op.args if isinstance(a, Load) and a.buffer == x)


def _shape(op: Op) -> tuple:
    return op.name, op.dtype, tuple((a.buffer, a.dtype) for a in op.args)


def _parents_of_loads(tree: Node, x: str) -> list[Op] | None:
    """The combinations of x in the tree: each load of x must be an argument of one (None otherwise)."""
    found: list[Op] = []
    ok = True

    def walk(node: Node, parent: Node | None) -> None:
        nonlocal ok
        if isinstance(node, Load):
            if node.buffer == x and not (isinstance(parent, Op) and _is_combination(parent, x)):
                ok = False
            for i in node.indirect:
                walk(i.value, node)
            return
        if isinstance(node, Op):
            if _is_combination(node, x):
                found.append(node)
                return
            for a in node.args:
                walk(a, node)

    walk(tree, None)
    return list(dict.fromkeys(found)) if ok else None


def _is_combination(op: Op, x: str) -> bool:
    """An add, sub or mul of plain loads at one offset, one of them x's."""
    if op.name not in ELEMENTWISE or not all(isinstance(a, Load) and not a.indirect for a in op.args):
        return False
    if not any(a.buffer == x for a in op.args) or op.dtype not in FLOAT_PRODUCTS:
        return False
    offsets = {sympy.expand(fold_div_mod(a.index)) for a in op.args}
    return len(offsets) == 1 and sum(a.buffer == x for a in op.args) == 1


def _substitute_nodes(node: Node, mapping: dict[Op, Node]) -> Node:
    if node in mapping:
        return mapping[node]
    if isinstance(node, Op):
        return Op(node.name, tuple(_substitute_nodes(a, mapping) for a in node.args), node.dtype)
    if isinstance(node, Load) and node.indirect:
        indirect = tuple(replace(i, value=_substitute_nodes(i.value, mapping)) for i in node.indirect)
        return replace(node, indirect=indirect)
    return node

