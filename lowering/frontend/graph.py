"""Walks the captured ATen graph and builds the kernel IR: values, buffers and the kernels between them.

Elementwise ops and views stay lazy (see values.py); a value becomes a buffer written by a kernel when it
must: a matmul or convolution operand, a graph output, or a non-trivial value read by several ops
(recomputing it in each consumer would cost more than storing it once).
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Any

import sympy
import torch
import torch.fx

from ...errors import UnsupportedError
from ..ir import index_math, scalar
from ..ir.constant_over_box import constant_reduction
from ..ir.dtypes import DTYPES, is_float
from ..ir.kernels import Buffer, Kernel, PointwiseKernel, Program, ReductionKernel, StridedView, Symbol
from ..ir.symbolic import as_expr, index_var, product, settled, size_symbol, upper_bound
from . import symbolic_scalars
from .diagnostics import source_line, unsupported_ops_error
from .registry import lowering_for
from .values import TensorValue, affine_view, from_buffer, is_contiguous, unsqueeze

# A lazy value read by several ops is stored once if its expression has more nodes than this; smaller ones
# (a bias add: two loads and an add) cost less to recompute in each reader than a round trip to memory.
INLINE_SHARED_MAX_NODES = 4
# A lazy value whose expression grows past this is stored, however many ops read it.
INLINE_MAX_NODES = 160
# A shared value at least this many times larger than everything it reads is a broadcast (a [batch, seq]
# padding mask seen as [batch, heads, seq, seq] by every attention layer): storing it would write and re-read
# the large form, so its readers recompute it from the small sources, up to this many nodes. Not a value that
# gathers positions read from data: every reader would repeat the gathers and their bounds checks per element
# (GPT-2's Triton attention did 4 checked gathers per score before its mask's positions became index math,
# ops/index.py; its run at seq 2048 on an H200 went from 5.7 to 10.9 ms with that change among others).
EXPANSION_MIN_RATIO = 8
EXPANSION_INLINE_MAX_NODES = 48

# Graph nodes with no effect on the computed values (shape assertions torch.export inserts).
_IGNORED = {
    "aten._assert_scalar.default",
    "aten._assert_tensor_metadata.default",
    "aten.sym_constrain_range_for_size.default",
    "aten._assert_async.msg",
}

# torch's dtypes by the IR's names for them (lowering/ir/dtypes.py)
DTYPE_NAMES = {getattr(torch, name): name for name in DTYPES}


def dtype_name(dtype: torch.dtype) -> str:
    try:
        return DTYPE_NAMES[dtype]
    except KeyError:
        raise UnsupportedError(f"dtype {dtype} is not supported (supported: {', '.join(DTYPE_NAMES.values())})")


class GraphLowering:
    """One use: GraphLowering(captured).run() -> Program."""

    def __init__(self, captured: Any) -> None:
        self.captured = captured
        self._model_dir = captured.model_file.resolve().parent  # source lines are named relative to it
        self.ep: torch.export.ExportedProgram = captured.program
        self.graph: torch.fx.Graph = self.ep.graph
        # A symbol with min == max was captured as a constant size: nothing to bind at run time.
        self.symbols = tuple(Symbol(s.name, s.min, s.max) for s in captured.symbols if s.min != s.max)
        self._rename = self._torch_symbols_to_user()
        self.buffers: dict[str, Buffer] = {}
        self.steps: list[Kernel] = []
        self.weights: dict[str, torch.Tensor] = {}
        self._weight_by_storage: dict[tuple, tuple[str, torch.Tensor]] = {}
        self.env: dict[torch.fx.Node, Any] = {}
        self.current: torch.fx.Node | None = None
        self.inputs: list[str] = []
        self.outputs: list[str] = []

    # --- symbols -----------------------------------------------------------------------------------

    def _torch_symbols_to_user(self) -> dict[sympy.Symbol, sympy.Symbol]:
        rename = {}
        user = {s.name for s in self.symbols}
        for node in self.graph.nodes:
            if node.op != "placeholder" or not isinstance(node.meta.get("val"), torch.Tensor):
                continue
            for size in node.meta["val"].shape:
                expr = as_expr(size)
                for sym in expr.free_symbols:
                    name = self.captured.symbol_of.get(sym.name)
                    if name in user:
                        rename[sym] = size_symbol(name)
        return rename

    def sym(self, value: Any) -> sympy.Expr:
        """A size from the graph (int, SymInt, sympy) in terms of the user's symbols."""
        expr = as_expr(value).xreplace(self._rename)
        stray = {s for s in expr.free_symbols if s not in {x.expr for x in self.symbols}}
        if stray:
            raise UnsupportedError(
                f"{self.where()}: a size depends on {', '.join(sorted(map(str, stray)))}, which is not a declared "
                "symbol (a data-dependent size, e.g. from nonzero() or a boolean mask); aotpack needs sizes "
                "that follow from the input shapes"
            )
        return settled(expr, self.ranges())

    @staticmethod
    def _first_tensor(node: torch.fx.Node) -> torch.Tensor:
        val = node.meta["val"]
        return val[0] if isinstance(val, (tuple, list)) else val  # multi-output ops: the first output

    def shape_of(self, node: torch.fx.Node) -> tuple[sympy.Expr, ...]:
        return tuple(self.sym(s) for s in self._first_tensor(node).shape)

    def dtype_of(self, node: torch.fx.Node) -> str:
        return dtype_name(self._first_tensor(node).dtype)

    def where(self) -> str:
        return source_line(self.current, self._model_dir) if self.current is not None else "the model"

    # --- buffers and kernels ------------------------------------------------------------------------

    def new_buffer(self, dtype: str, shape: Sequence[sympy.Expr], kind: str = "arena", source: str | None = None) -> str:
        name = f"buf{len(self.buffers)}"
        self.buffers[name] = Buffer(name, dtype, tuple(shape), kind, source)
        return name

    def add_step(self, kernel: Kernel) -> None:
        self.steps.append(kernel)

    def realize(self, value: TensorValue, kind: str = "arena", source: str | None = None) -> TensorValue:
        """`value` written to a new contiguous buffer by one pointwise kernel."""
        name = self.new_buffer(value.dtype, value.shape, kind, source)
        index = tuple(index_var("i", d) for d in range(value.rank))
        self.add_step(PointwiseKernel(name, value.shape, scalar.cast(value.loader(index), value.dtype)))
        return from_buffer(name, value.dtype, value.shape)

    def as_view(self, value: TensorValue) -> StridedView:
        """A strided view of memory holding `value`, computing it into a buffer if it is lazy and not already
        a plain read of memory at strides (`affine_view`)."""
        if value.view is None:
            view = affine_view(value)
            if view is not None:
                return view
            value = self.realize(value)
        return value.view

    def reduce(
        self,
        value: TensorValue,
        dims: Sequence[int] | None,
        op: str,
        out_dtype: str,
        keepdim: bool = False,
        acc_dtype: str | None = None,
    ) -> TensorValue:
        """Folds `op` over `dims` (all when None or empty) into a new buffer, the value fused as prologue."""
        rank = value.rank
        dims = sorted({d % max(rank, 1) for d in dims}) if dims else list(range(rank))  # 0-d: dim 0 and -1
        if rank == 0:
            dims = []
        kept = [d for d in range(rank) if d not in dims]
        out_shape = tuple(value.shape[d] for d in kept)
        index: list[sympy.Expr] = [sympy.Integer(0)] * rank
        for pos, d in enumerate(kept):
            index[d] = index_var("i", pos)
        for pos, d in enumerate(dims):
            index[d] = index_var("r", pos)
        body = value.loader(tuple(index))
        reduced = tuple(value.shape[d] for d in dims)
        constant = constant_reduction(body, out_shape, reduced, op, out_dtype, self.ranges())
        if constant is not None:  # e.g. a running count of position jumps, which aranged positions never make
            result = TensorValue(out_dtype, out_shape, lambda idx: constant)
            for d in dims if keepdim else ():
                result = unsqueeze(result, d)
            return result
        if acc_dtype is None:
            acc_dtype = accumulator_dtype(op, body.dtype, out_dtype)
        name = self.new_buffer(out_dtype, out_shape)
        self.add_step(ReductionKernel(name, out_shape, reduced, body, op, acc_dtype, out_dtype))
        result = from_buffer(name, out_dtype, out_shape)
        if keepdim:
            for d in dims:
                result = unsqueeze(result, d)
        return result

    def ranges(self) -> dict[sympy.Symbol, tuple[int, int]]:
        """Each symbol's declared range, for proofs over all the sizes a package runs at."""
        return {size_symbol(s.name): (s.min, s.max) for s in self.symbols}

    def weight(self, tensor: torch.Tensor, name: str) -> str:
        """A buffer for a constant tensor; tensors sharing storage (tied weights) are stored once."""
        key = (tensor.untyped_storage().data_ptr(), tensor.storage_offset(), tuple(tensor.shape),
               tuple(tensor.stride()), tensor.dtype)
        if key in self._weight_by_storage and tensor.numel() > 0:
            return self._weight_by_storage[key][0]
        self.weights[name] = tensor.detach().contiguous().clone()
        buffer = self.new_buffer(dtype_name(tensor.dtype), [sympy.Integer(s) for s in tensor.shape], "weight", name)
        # Keep `tensor` alive with its key: a freed tensor's address could be reused by the next one (a constant
        # the lowering makes), which would then be mistaken for it.
        self._weight_by_storage[key] = (buffer, tensor)
        return buffer

    # --- the walk -----------------------------------------------------------------------------------

    def run(self) -> Program:
        self._check_supported()
        for node in self.graph.nodes:
            self.current = node
            if node.op == "placeholder":
                self.env[node] = self._placeholder(node)
            elif node.op == "call_function":
                self.env[node] = self._call(node)
            elif node.op == "output":
                self._outputs(node)
        self.current = None
        self._drop_unused_weights()
        return Program(
            symbols=self.symbols,
            buffers=dict(self.buffers),
            steps=tuple(self.steps),
            inputs=tuple(self.inputs),
            outputs=tuple(self.outputs),
            weights=dict(self.weights),
        )

    def _drop_unused_weights(self) -> None:
        """Constants no kernel reads (e.g. batch norm's num_batches_tracked) stay out of the package."""
        read = {name for step in self.steps for name in step.reads()}
        for name, buf in list(self.buffers.items()):
            if buf.kind == "weight" and name not in read:
                del self.buffers[name]
                self.weights.pop(buf.source, None)

    def _check_supported(self) -> None:
        missing = []
        for node in self.graph.nodes:
            if node.op != "call_function" or str(node.target) in _IGNORED or _is_size_node(node):
                continue
            if symbolic_scalars.is_symbolic_scalar(node):
                continue
            if node.target is operator.getitem:
                continue
            if lowering_for(node.target) is None:
                missing.append(node)
        if missing:
            raise unsupported_ops_error(missing, self._model_dir)

    def _placeholder(self, node: torch.fx.Node) -> Any:
        sig = self.ep.graph_signature
        val = node.meta.get("val")
        if not isinstance(val, torch.Tensor):
            raise UnsupportedError(f"input {node.name} is not a tensor ({type(val).__name__}); aotpack takes tensors")
        if node.name in sig.inputs_to_parameters:
            target = sig.inputs_to_parameters[node.name]
            tensor = self.ep.state_dict[target]
        elif node.name in sig.inputs_to_buffers:
            target = sig.inputs_to_buffers[node.name]
            tensor = self.ep.state_dict[target] if target in self.ep.state_dict else self.ep.constants[target]
        elif node.name in sig.inputs_to_lifted_tensor_constants:
            target = sig.inputs_to_lifted_tensor_constants[node.name]
            tensor = self.ep.constants[target]
        else:
            index = len(self.inputs)
            user_name = self.captured.input_names[index]
            name = self.new_buffer(dtype_name(val.dtype), self.shape_of(node), "input", user_name)
            self.inputs.append(name)
            return from_buffer(name, dtype_name(val.dtype), self.shape_of(node))
        if isinstance(tensor, torch.nn.Parameter):
            tensor = tensor.data
        buffer = self.weight(tensor, target)
        return from_buffer(buffer, dtype_name(tensor.dtype), self.buffers[buffer].shape)

    def _map_arg(self, arg: Any) -> Any:
        if isinstance(arg, torch.fx.Node):
            return self.env[arg]
        if isinstance(arg, (list, tuple)):
            return type(arg)(self._map_arg(a) for a in arg)
        return arg

    def _call(self, node: torch.fx.Node) -> Any:
        if str(node.target) in _IGNORED:
            return None
        if _is_size_node(node):
            return self.sym(node.meta["val"])
        args = self._map_arg(node.args)
        if symbolic_scalars.is_symbolic_scalar(node):
            return symbolic_scalars.lower(node, args)
        kwargs = {k: self._map_arg(v) for k, v in node.kwargs.items()}
        if node.target is operator.getitem:
            result = args[0][args[1]]
            if result is None:
                raise UnsupportedError(f"{self.where()}: this output of {node.args[0].target} is not supported")
            return result
        fn = lowering_for(node.target)
        try:
            result = fn(self, node, *args, **kwargs)
        except UnsupportedError as e:
            if self.where() in str(e):
                raise
            raise UnsupportedError(f"{self.where()}: {node.target}: {e}") from e
        if isinstance(result, TensorValue):
            result = self._maybe_store(node, result)
        return result

    def _maybe_store(self, node: torch.fx.Node, value: TensorValue) -> TensorValue:
        if value.view is not None:
            return value
        index = tuple(index_var("i", d) for d in range(value.rank))
        expr = value.loader(index)
        value, expr = _folded(value, index, expr)
        size = scalar.size_of(expr)
        # torch.export's metadata assertions read values without computing anything from them
        readers = [user for user in node.users if str(user.target) not in _IGNORED]
        shared = len(readers) > 1 and size > INLINE_SHARED_MAX_NODES
        if shared and size <= EXPANSION_INLINE_MAX_NODES and self._is_expansion(value, expr):
            return value
        if shared or size > INLINE_MAX_NODES:
            outputs = any(user.op == "output" for user in node.users)
            return self.realize(value) if outputs else self._realize_narrow(value, expr)
        return value

    def _realize_narrow(self, value: TensorValue, expr: scalar.Node) -> TensorValue:
        """`value` stored. A half value widened to float32 (a norm's `x.float()`, read by its mean, its variance
        and the normalisation) is stored in the half type and widened by its readers: the model holds that
        value rounded to half (torch stores x before casting it), and the readers read half the bytes. A
        matrix product reads it through its expression (linalg._operand), without a float32 copy."""
        if not (isinstance(expr, scalar.Op) and expr.name == "cast" and value.dtype == "float32"
                and expr.args[0].dtype in ("float16", "bfloat16")):
            return self.realize(value)
        loader = value.loader
        narrow = self.realize(TensorValue(expr.args[0].dtype, value.shape, lambda idx: loader(idx).args[0]))
        return TensorValue(value.dtype, value.shape, lambda idx: scalar.cast(narrow.loader(idx), value.dtype))

    def _is_expansion(self, value: TensorValue, expr: scalar.Node) -> bool:
        """Whether `value` has EXPANSION_MIN_RATIO times more elements than the buffers it reads, together,
        at the declared maxima, and gathers nothing."""
        loads = scalar.loads(expr)
        if any(load.indirect for load in loads):
            return False
        ranges = {size_symbol(s.name): (s.min, s.max) for s in self.symbols}
        read = sum(upper_bound(product(self.buffers[load.buffer].shape), ranges) for load in loads)
        return upper_bound(product(value.shape), ranges) >= EXPANSION_MIN_RATIO * max(read, 1)

    def _outputs(self, node: torch.fx.Node) -> None:
        values = torch.fx.node.map_arg(node.args[0], lambda n: self.env[n])
        flat = list(values) if isinstance(values, (list, tuple)) else [values]
        names = self.captured.output_names
        for i, value in enumerate(flat):
            if not isinstance(value, TensorValue):
                raise UnsupportedError(f"output {i} is not a tensor ({type(value).__name__})")
            self.outputs.append(self._output_buffer(value, names[i]))

    def _output_buffer(self, value: TensorValue, name: str) -> str:
        """The output's own buffer: the producing kernel writes it directly when it can, else a copy."""
        view = value.view
        if view is not None and view.buffer in self.buffers:
            buf = self.buffers[view.buffer]
            # Output memory lives for the whole run, so the kernel can write there even if later steps read it.
            # A contiguous reshape of the whole buffer ([batch * seq, vocab] as [batch, seq, vocab]) is the same
            # memory: the buffer takes the output's shape (its writer indexes by its own sizes, not the buffer's).
            whole = buf.kind == "arena" and sympy.expand(product(buf.shape) - product(value.shape)) == 0
            if whole and is_contiguous(value) and view.offset == 0:
                self.buffers[buf.name] = Buffer(buf.name, buf.dtype, tuple(value.shape), "output", name)
                return buf.name
        realized = self.realize(value, kind="output", source=name)
        return realized.view.buffer


def _folded(value: TensorValue, index: tuple, expr: scalar.Node) -> tuple[TensorValue, scalar.Node]:
    """An integer value computed from positions alone (an arange, offset and broadcast) as one index
    expression: it costs nothing to recompute, so it is never stored, and the ops that index with it or
    compare it (a causal mask) see index math (ir/index_math.py)."""
    simple = index_math.folded(expr)
    if simple is expr:
        return value, expr
    if isinstance(simple, scalar.IndexValue):
        return TensorValue(value.dtype, value.shape, lambda idx: scalar.IndexValue(
            simple.expr.xreplace(dict(zip(index, idx))), simple.dtype)), simple
    return TensorValue(value.dtype, value.shape, lambda idx: simple), simple


def _is_size_node(node: torch.fx.Node) -> bool:
    val = node.meta.get("val")
    return isinstance(val, (torch.SymInt, int)) and not isinstance(val, bool)


def accumulator_dtype(op: str, value_dtype: str, out_dtype: str) -> str:
    if op in ("any", "all"):
        return "bool"
    if op in ("argmax", "argmin", "max", "min"):
        return value_dtype
    if is_float(out_dtype):
        return "float64" if out_dtype == "float64" else "float32"
    return "int64" if out_dtype != "bool" else "bool"
