"""Renders kernel IR as Triton kernels from the Jinja templates in templates/triton/.

The same IR the C++ backend renders (lowering/ir.py): Python decides what to compute and hands the
templates plain data (parameter lists, Triton expressions as strings, block sizes); the templates hold
the Triton structure. Each kernel receives the base pointers of its buffers (reads, then the output),
then the int64 values of the symbols it uses, then (when it checks indices read from data) a pointer to
its error flag. Sizes, strides and offsets are computed inside the kernel from the symbols, as on CPU;
the only per-step expressions the runtime evaluates are the launch grid's (docs/package-format.md).

Half types are loaded, computed in float32 and rounded on store, as the C++ kernels do. A kernel's name
is the hash of its source, so a model's repeated layers share one cubin.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2
import sympy
from torch.utils._sympy import functions as tf

from ....errors import UnsupportedError
from ...ir import scalar
from ...ir.kernels import (
    AttentionKernel,
    GatheredOperand,
    Kernel,
    MatmulKernel,
    Operand,
    PointwiseKernel,
    Program,
    ReductionKernel,
    ScatterKernel,
    StridedView,
    operand_vars,
    split_gather,
)
from ...ir.scalar import Const, IndexValue, Load, Node, Op
from ...ir.symbolic import contiguous_strides, index_var, product, upper_bound

TEMPLATES = Path(__file__).resolve().parents[3] / "templates" / "triton"

# Triton's pointer element type per storage dtype; bool is stored as one byte and handled as int8.
POINTER_TYPE = {
    "float32": "*fp32", "float64": "*fp64", "float16": "*fp16", "bfloat16": "*bf16", "int64": "*i64",
    "int32": "*i32", "int16": "*i16", "int8": "*i8", "uint8": "*u8", "bool": "*i8",
}
TL_TYPE = {
    "float32": "tl.float32", "float64": "tl.float64", "float16": "tl.float16", "bfloat16": "tl.bfloat16",
    "int64": "tl.int64", "int32": "tl.int32", "int16": "tl.int16", "int8": "tl.int8", "uint8": "tl.uint8",
    "bool": "tl.int1",
}
# What a value of each dtype is computed in inside a kernel.
COMPUTE_TL = {**TL_TYPE, "float16": "tl.float32", "bfloat16": "tl.float32"}


def _env() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES)),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
    )


def next_pow2(n: int) -> int:
    return 1 if n <= 1 else 1 << (int(n) - 1).bit_length()


# --- index expressions ---------------------------------------------------------------------------------


def _nonneg(e: sympy.Expr) -> bool:
    return bool(sympy.sympify(e).is_nonnegative)


def to_triton(expr: sympy.Expr, names: dict[sympy.Symbol, str] | None = None) -> str:
    """An int64 Triton expression. Triton's // and % truncate like C, so Python's floor semantics go
    through the prelude's helpers unless the numerator is provably non-negative."""
    expr = sympy.sympify(expr)
    names = names or {}

    def p(e: sympy.Expr) -> str:
        if e.is_Integer:
            v = int(e)
            return f"({v})" if v < 0 else str(v)
        if e.is_Symbol:
            return names.get(e, e.name)
        if isinstance(e, sympy.Add):
            return "(" + " + ".join(p(a) for a in e.args) + ")"
        if isinstance(e, sympy.Mul):
            return "(" + " * ".join(p(a) for a in e.args) + ")"
        if isinstance(e, tf.FloorDiv):
            a, b = e.args
            return f"({p(a)} // {p(b)})" if _nonneg(a) and _nonneg(b) else f"_floordiv({p(a)}, {p(b)})"
        if isinstance(e, tf.CeilDiv):
            a, b = e.args
            return f"(-_floordiv(-({p(a)}), {p(b)}))"
        if isinstance(e, tf.ModularIndexing):
            x, div, mod = e.args
            if _nonneg(x):
                return f"(({p(x)} // {p(div)}) % {p(mod)})"
            return f"_pymod(_floordiv({p(x)}, {p(div)}), {p(mod)})"
        if isinstance(e, (tf.PythonMod, tf.Mod, sympy.Mod)):
            a, b = e.args
            return f"({p(a)} % {p(b)})" if _nonneg(a) and _nonneg(b) else f"_pymod({p(a)}, {p(b)})"
        if isinstance(e, (sympy.Max, tf.Max, sympy.Min, tf.Min)):
            fn = "tl.maximum" if isinstance(e, (sympy.Max, tf.Max)) else "tl.minimum"
            out = p(e.args[0])
            for a in e.args[1:]:
                out = f"{fn}({out}, {p(a)})"
            return out
        if isinstance(e, (sympy.Pow, tf.PowByNatural)) and e.args[1].is_Integer and int(e.args[1]) >= 0:
            return "(" + " * ".join([p(e.args[0])] * int(e.args[1])) + ")" if int(e.args[1]) else "1"
        raise UnsupportedError(f"the index expression {e} uses {type(e).__name__}, which aotpack cannot print for Triton")

    return p(expr)


# --- scalar expressions --------------------------------------------------------------------------------

_UNARY_FLOAT = {
    "exp": "libdevice.exp", "exp2": "libdevice.exp2", "expm1": "libdevice.expm1", "log": "libdevice.log",
    "log2": "libdevice.log2", "log10": "libdevice.log10", "log1p": "libdevice.log1p", "sqrt": "tl.sqrt_rn",
    "sin": "libdevice.sin", "cos": "libdevice.cos", "tan": "libdevice.tan", "asin": "libdevice.asin",
    "acos": "libdevice.acos", "atan": "libdevice.atan", "sinh": "libdevice.sinh", "cosh": "libdevice.cosh",
    "tanh": "libdevice.tanh", "asinh": "libdevice.asinh", "acosh": "libdevice.acosh", "atanh": "libdevice.atanh",
    "erf": "libdevice.erf", "erfc": "libdevice.erfc", "floor": "libdevice.floor", "ceil": "libdevice.ceil",
    "round": "libdevice.rint", "trunc": "libdevice.trunc", "abs": "tl.abs",
}
_BINARY_INFIX = {
    "add": "+", "sub": "-", "mul": "*", "div": "/", "eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">",
    "ge": ">=", "logical_and": "&", "logical_or": "|", "logical_xor": "!=", "lshift": "<<", "rshift": ">>",
    "bitwise_and": "&", "bitwise_or": "|", "bitwise_xor": "^",
}
_BINARY_FLOAT_FN = {"atan2": "libdevice.atan2", "hypot": "libdevice.hypot", "copysign": "libdevice.copysign",
                    "fmax": "libdevice.fmax", "fmin": "libdevice.fmin", "pow": "libdevice.pow",
                    "fmod": "libdevice.fmod"}


def const_literal(value: Any, dtype: str) -> str:
    """A typed 0-d constant (Triton's literals would otherwise take Triton's default types)."""
    tl_type = COMPUTE_TL[dtype]
    if dtype == "bool":
        return f"tl.full([], {1 if value else 0}, tl.int1)"
    if scalar.is_float(dtype):
        value = float(value)
        if math.isnan(value):
            text = "_NAN"
        elif math.isinf(value):
            text = "_NINF" if value < 0 else "_INF"
        else:
            text = repr(value)
        return f"tl.full([], {text}, {tl_type})"
    return f"tl.full([], {int(value)}, {tl_type})"


@dataclass(frozen=True)
class Check:
    """A run-time check: where `condition` holds (on an active lane), the kernel reports `what`."""

    condition: str
    what: str


class TritonBodyWriter:
    """Turns scalar expression trees into Triton statements, computing each distinct subexpression once.

    `mask` names the active-lane mask every load is guarded with and `zero` a block of zeros of its shape;
    `guard`, where given, picks both per load instead (a narrower mask for a load that varies along fewer
    axes). `checks` collects the data-dependent conditions the kernel reports through its error flag.
    """

    def __init__(self, arg_names: dict[str, str], symbol_names: dict[sympy.Symbol, str], mask: str,
                 prefix: str = "t", zero: str = "xzero",
                 guard: Callable[[Load], tuple[str, str]] | None = None) -> None:
        self.arg_names = arg_names
        self.symbol_names = symbol_names
        self.mask = mask
        self.zero = zero
        self.guard = guard
        self.prefix = prefix
        self.lines: list[str] = []
        self.checks: list[Check] = []
        self._cache: dict[Node, str] = {}

    def index(self, expr: sympy.Expr, extra: dict[sympy.Symbol, str] | None = None) -> str:
        return to_triton(expr, {**self.symbol_names, **(extra or {})})

    def _tmp(self, expr: str) -> str:
        name = f"{self.prefix}{len(self.lines)}"
        self.lines.append(f"{name} = {expr}")
        return name

    def value(self, node: Node) -> str:
        if node in self._cache:
            return self._cache[node]
        if isinstance(node, Const):
            out = const_literal(node.value, node.dtype)
        elif isinstance(node, IndexValue):
            out = self._tmp(f"({self.index(node.expr)} + tl.zeros([], tl.int64)).to({COMPUTE_TL[node.dtype]})")
        elif isinstance(node, Load):
            out = self._load(node)
        else:
            out = self._tmp(self._op(node))
        self._cache[node] = out
        return out

    def _load(self, node: Load) -> str:
        # `zero` (a block of zeros of the mask's shape) makes every pointer a block of that shape, whatever
        # loop indices the position uses: tl.load refuses a block mask on a scalar or narrower pointer.
        mask, zero = self.guard(node) if self.guard else (self.mask, self.zero)
        ptr = f"{self.arg_names[node.buffer]} + {self.offset(node)} + {zero}"
        loaded = f"tl.load({ptr}, mask={mask}, other=0)"
        if node.dtype == "bool":
            return self._tmp(f"{loaded} != 0")
        if node.dtype in ("float16", "bfloat16"):
            return self._tmp(f"{loaded}.to(tl.float32)")
        return self._tmp(loaded)

    def offset(self, node: Load) -> str:
        """The element offset `node` addresses; an index from data out of range sets the error flag, reads 0."""
        extra = {}
        for ind in node.indirect:
            position = self.value(ind.value)
            pos = self._tmp(f"{position}.to(tl.int64)")
            size = self.index(ind.size)
            if ind.wrap:
                pos = self._tmp(f"tl.where({pos} < 0, {pos} + {size}, {pos})")
            bad = self._tmp(f"({pos} < 0) | ({pos} >= {size})")
            self.checks.append(Check(bad, ind.what))
            extra[ind.var] = self._tmp(f"tl.where({bad}, 0, {pos})")
        return self.index(node.index, extra)

    def _op(self, node: Op) -> str:
        args = [self.value(a) for a in node.args]
        name, dtype = node.name, node.dtype
        tl_type = COMPUTE_TL[dtype]
        arg_dtype = node.args[0].dtype if node.args else dtype
        is_float = scalar.is_float(arg_dtype)
        is_bool = arg_dtype == "bool"
        if name == "cast":
            if dtype == "bool":
                return f"{args[0]} != 0"
            if COMPUTE_TL[dtype] != TL_TYPE[dtype] and arg_dtype != dtype:
                # Half types compute in float32, but a cast must still round to the narrow type, as eager does.
                return f"{args[0]}.to({TL_TYPE[dtype]}).to({tl_type})"
            return f"{args[0]}.to({tl_type})"
        if name == "where":
            return f"tl.where({args[0]}, {args[1]}, {args[2]})"
        if name == "neg":
            return f"-{args[0]}"
        if name in ("logical_not", "bitwise_not"):
            if name == "logical_not" or is_bool:
                return f"{args[0]} == 0"
            return f"~{args[0]}"
        if name in _BINARY_INFIX:
            if name == "div" and not is_float:
                raise UnsupportedError("integer true division reached code generation; this is an aotpack bug")
            return f"{args[0]} {_BINARY_INFIX[name]} {args[1]}"
        if name in ("maximum", "minimum"):
            if is_float:
                return f"_{name}_nan({args[0]}, {args[1]})"
            return f"tl.{name}({args[0]}, {args[1]})"
        if name == "relu":
            return f"tl.where({args[0]} < 0, tl.zeros_like({args[0]}), {args[0]})"
        if name == "sigmoid":
            return f"1.0 / (1.0 + libdevice.exp(-{args[0]}))"
        if name == "rsqrt":
            return f"1.0 / tl.sqrt_rn({args[0]})"
        if name == "reciprocal":
            return f"1.0 / {args[0]}"
        if name == "sign":
            return f"_sign({args[0]})"
        if name in ("isposinf", "isneginf"):
            return f"{args[0]} == {'_INF' if name == 'isposinf' else '_NINF'}"
        if not is_float:
            if name in ("floor", "ceil", "round", "trunc"):
                return f"{args[0]} + 0"
            if name == "abs":
                return f"tl.where({args[0]} < 0, -{args[0]}, {args[0]})"
            if name in ("floordiv", "truncdiv", "remainder", "fmod"):
                zero = self._tmp(f"{args[1]} == 0")
                self.checks.append(Check(zero, "integer division by zero" if "div" in name else "integer modulo by zero"))
                divisor = self._tmp(f"tl.where({zero}, 1, {args[1]})")
                fn = {"floordiv": "_floordiv({a}, {b})", "truncdiv": "{a} // {b}", "remainder": "_pymod({a}, {b})",
                      "fmod": "{a} % {b}"}[name]
                return f"({fn.format(a=args[0], b=divisor)}).to({tl_type})"
            if name in ("isnan", "isinf", "signbit", "isfinite"):
                if name == "signbit":
                    return f"{args[0]} < 0"
                return f"tl.full([], {1 if name == 'isfinite' else 0}, tl.int1)"
            raise UnsupportedError(f"the scalar op {name} on {arg_dtype} has no Triton form yet")
        if name == "isnan":
            return f"{args[0]} != {args[0]}"
        if name == "isinf":
            return f"tl.abs({args[0]}) == _INF"
        if name == "isfinite":
            return f"tl.abs({args[0]}) < _INF"
        if name == "signbit":
            return f"libdevice.signbit({args[0]}) != 0"
        if name in _UNARY_FLOAT:
            return f"{_UNARY_FLOAT[name]}({args[0]})"
        if name in _BINARY_FLOAT_FN:
            return f"{_BINARY_FLOAT_FN[name]}({args[0]}, {args[1]})"
        if name == "remainder":
            return f"_fmod_py({args[0]}, {args[1]})"
        if name == "floordiv":
            return f"libdevice.floor({args[0]} / {args[1]})"
        raise UnsupportedError(f"the scalar op {name} on {arg_dtype} has no Triton form yet")


# --- kernels -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TritonKernel:
    """One rendered kernel and what it takes to compile and launch it."""

    name: str
    family: str
    source: str
    signature: tuple[tuple[str, str], ...]  # (parameter, Triton type) in order; constexprs typed "constexpr"
    constexprs: tuple[tuple[str, int], ...]  # block sizes
    num_warps: int
    num_stages: int
    symbols: tuple[int, ...]  # indices of the program symbols passed after the buffers, in order
    errors: tuple[str, ...]  # messages of the error-flag values 1, 2, ...; empty: no flag parameter


@dataclass(frozen=True)
class TritonLibrary:
    source: str  # the prelude and every distinct kernel, one Python module
    prelude: str  # the helpers every kernel may call: with a kernel's own source, all that its cubin depends on
    kernels: tuple[TritonKernel, ...]
    step_kernels: tuple[str, ...]
    step_args: tuple[tuple[str, ...], ...]  # buffer names passed to each step (as on CPU)
    step_grids: tuple[tuple[sympy.Expr, sympy.Expr, sympy.Expr], ...]  # launch grid of each step


def _cdiv(a: sympy.Expr, b: int) -> sympy.Expr:
    return tf.FloorDiv(sympy.sympify(a) + (b - 1), sympy.Integer(b))


class TritonRenderer:
    def __init__(self, program: Program) -> None:
        self.program = program
        self.env = _env()
        self.symbol_index = {s.expr: i for i, s in enumerate(program.symbols)}
        self.ranges = {s.expr: (s.min, s.max) for s in program.symbols}

    def _max(self, expr: sympy.Expr) -> int:
        return max(upper_bound(expr, self.ranges), 1)

    def args(self, kernel: Kernel) -> list[str]:
        return [*kernel.reads(), kernel.output]

    def _names(self, kernel: Kernel) -> tuple[dict[str, str], dict[sympy.Symbol, str]]:
        args = self.args(kernel)
        arg_names = {b: ("out" if i == len(args) - 1 else f"in{i}") for i, b in enumerate(args)}
        return arg_names, {s: f"s_{s.name}" for s in self.symbol_index}

    def _params(self, kernel: Kernel, exprs: list[sympy.Expr], has_errors: bool,
                constexprs: dict[str, int]) -> dict[str, Any]:
        args = self.args(kernel)
        signature = [("out" if i == len(args) - 1 else f"in{i}", POINTER_TYPE[self.program.buffers[b].dtype])
                     for i, b in enumerate(args)]
        used: set[sympy.Symbol] = set()
        for e in exprs:
            used |= sympy.sympify(e).free_symbols
        symbols = [(s, i) for s, i in self.symbol_index.items() if s in used]
        signature += [(f"s_{s.name}", "i64") for s, _ in symbols]
        if has_errors:
            signature.append(("err_flag", "*i32"))
        signature += [(name, "constexpr") for name in constexprs]
        return {"signature": signature, "symbols": [i for _, i in symbols],
                "params": ", ".join(n if t != "constexpr" else f"{n}: tl.constexpr" for n, t in signature)}

    def render(self, kernel: Kernel) -> tuple[TritonKernel, tuple[sympy.Expr, sympy.Expr, sympy.Expr]]:
        if isinstance(kernel, PointwiseKernel):
            data, template = self._pointwise(kernel), "pointwise.py.jinja"
        elif isinstance(kernel, ReductionKernel):
            data, template = self._reduction(kernel), "reduction.py.jinja"
        elif isinstance(kernel, ScatterKernel):
            data, template = self._scatter(kernel), "scatter.py.jinja"
        elif isinstance(kernel, MatmulKernel):
            data, template = self._matmul(kernel), "matmul.py.jinja"
        elif isinstance(kernel, AttentionKernel):
            data, template = self._attention(kernel), "attention.py.jinja"
        else:
            raise UnsupportedError(f"no Triton template for {type(kernel).__name__}")
        meta = data.pop("meta")
        body = self.env.get_template(template).render(name="KERNEL_NAME", **data)
        key = body + repr(sorted(meta["constexprs"].items())) + f"w{meta['num_warps']}s{meta['num_stages']}"
        name = "t_" + hashlib.sha256(key.encode()).hexdigest()[:16]
        rendered = TritonKernel(
            name=name, family=kernel.family, source=body.replace("KERNEL_NAME", name),
            signature=tuple(data["signature"]), constexprs=tuple(meta["constexprs"].items()),
            num_warps=meta["num_warps"], num_stages=meta["num_stages"], symbols=tuple(data["symbols"]),
            errors=tuple(meta["errors"]))
        return rendered, meta["grid"]

    @staticmethod
    def _decompose(prefix: str, flat: str, shape: tuple[sympy.Expr, ...], index) -> list[dict[str, str]]:
        """Loop indices of `shape` from a flat row-major index: i_d = (flat // stride_d) % size_d."""
        out = []
        strides = contiguous_strides(shape)
        for d, (size, stride) in enumerate(zip(shape, strides)):
            if sympy.sympify(size) == 1:
                expr = "0"
            elif d == 0:
                expr = flat if stride == 1 else f"{flat} // {index(stride)}"
            elif stride == 1:
                expr = f"{flat} % {index(size)}"
            else:
                expr = f"({flat} // {index(stride)}) % {index(size)}"
            out.append({"var": f"{prefix}{d}", "expr": expr})
        return out

    def _store(self, value: str, dtype: str) -> str:
        if dtype == "bool":
            return f"(({value}) != 0).to(tl.int8)"
        return f"({value}).to({TL_TYPE[dtype]})"

    def _pointwise(self, k: PointwiseKernel) -> dict[str, Any]:
        arg_names, sym_names = self._names(k)
        writer = TritonBodyWriter(arg_names, sym_names, "xmask")
        value = writer.value(k.value)
        out_dtype = self.program.buffers[k.output].dtype
        numel = product(k.shape)
        xblock = min(1024, max(16, next_pow2(self._max(numel))))
        constexprs = {"XBLOCK": xblock}
        params = self._params(k, [*k.shape, *scalar.index_exprs(k.value)], bool(writer.checks), constexprs)
        return {
            **params, "numel": writer.index(numel), "indices": self._decompose("i", "x", k.shape, writer.index),
            "body": writer.lines, "checks": _checks(writer.checks), "store_value": self._store(value, out_dtype),
            "meta": {"constexprs": constexprs, "num_warps": 4 if xblock >= 512 else (2 if xblock >= 128 else 1),
                     "num_stages": 1, "errors": [c.what for c in writer.checks],
                     "grid": (_cdiv(numel, xblock), sympy.Integer(1), sympy.Integer(1))},
        }

    def _reduction(self, k: ReductionKernel) -> dict[str, Any]:
        arg_names, sym_names = self._names(k)
        writer = TritonBodyWriter(arg_names, sym_names, "rmask_all", zero="rzero")
        value = writer.value(k.value)
        xnumel, rnumel = product(k.shape), product(k.reduced)
        rblock = min(2048, max(16, next_pow2(self._max(rnumel))))
        xblock = max(1, min(next_pow2(self._max(xnumel)), 4096 // rblock, 64))
        constexprs = {"XBLOCK": xblock, "RBLOCK": rblock}
        params = self._params(k, [*k.shape, *k.reduced, *scalar.index_exprs(k.value)], bool(writer.checks), constexprs)
        acc = _reduction_parts(k.op, k.acc_dtype)
        result = acc.pop("result")
        return {
            **params, "xnumel": writer.index(xnumel), "rnumel": writer.index(rnumel),
            "indices": self._decompose("i", "x", k.shape, writer.index),
            "rindices": self._decompose("r", "r", k.reduced, writer.index), "body": writer.lines,
            "checks": _checks(writer.checks), "value": f"({value}).to({acc['acc_type']})",
            "op": k.op, **acc, "store_value": self._store(result, k.out_dtype),
            "meta": {"constexprs": constexprs, "num_warps": 8 if xblock * rblock >= 2048 else 4, "num_stages": 1,
                     "errors": [c.what for c in writer.checks],
                     "grid": (_cdiv(xnumel, xblock), sympy.Integer(1), sympy.Integer(1))},
        }

    def _scatter(self, k: ScatterKernel) -> dict[str, Any]:
        """Folding updates run in one program, one at a time and in order (deterministic, whatever repeats);
        assignments run in parallel, UBLOCK per program."""
        arg_names, sym_names = self._names(k)
        writer = TritonBodyWriter(arg_names, sym_names, "umask", zero="uzero")
        value = writer.value(k.value)
        target = writer.offset(k.target)
        dtype = self.program.buffers[k.output].dtype
        numel = product(k.shape)
        serial = k.op != "assign"
        ublock = 1 if serial else min(1024, max(16, next_pow2(self._max(numel))))
        constexprs = {"UBLOCK": ublock}
        exprs = [*k.shape, *scalar.index_exprs(k.value), *scalar.index_exprs(k.target)]
        params = self._params(k, exprs, bool(writer.checks), constexprs)
        old = "(old != 0)" if dtype == "bool" else "old"
        if dtype == "bool":  # bool sums and maxima are "or", products and minima "and"
            fold = {"sum": "{a} | {b}", "prod": "{a} & {b}", "max": "{a} | {b}", "min": "{a} & {b}"}
        elif scalar.is_float(dtype):
            fold = {"sum": "{a} + {b}", "prod": "{a} * {b}", "max": "_maximum_nan({a}, {b})",
                    "min": "_minimum_nan({a}, {b})"}
        else:
            fold = {"sum": "{a} + {b}", "prod": "{a} * {b}", "max": "tl.maximum({a}, {b})", "min": "tl.minimum({a}, {b})"}
        if k.op != "assign" and k.op not in fold:
            raise UnsupportedError(f"scatter {k.op} has no Triton form")
        combined = "v" if k.op == "assign" else fold[k.op].format(a=f"{old}.to({COMPUTE_TL[dtype]})", b="v")
        return {
            **params, "numel": writer.index(numel), "indices": self._decompose("u", "u", k.shape, writer.index),
            "body": writer.lines, "checks": _checks(writer.checks), "value": value, "target": target,
            "serial": serial, "op": k.op, "store_value": self._store(combined, dtype),
            "meta": {"constexprs": constexprs, "num_warps": 1 if serial else 4, "num_stages": 1,
                     "errors": [c.what for c in writer.checks],
                     "grid": (sympy.Integer(1) if serial else _cdiv(numel, ublock), sympy.Integer(1), sympy.Integer(1))},
        }

    def _view(self, view: StridedView, writer: TritonBodyWriter) -> dict[str, Any]:
        return {"offset": writer.index(view.offset), "strides": [writer.index(s) for s in view.strides]}

    def _gathered(self, operand: GatheredOperand, side: str, rows: str, cols: str, arg_names: dict[str, str],
                  sym_names: dict[sympy.Symbol, str]) -> tuple[dict[str, Any], list[Check]]:
        """How the k loop computes a gathered operand's tile (implicit GEMM); `rows` and `cols` name the
        tile's row and column indices as broadcastable int64 blocks. One load at an offset that splits into a
        part without k and a part with it (convolution's columns) loads at the first part, computed once
        before the loop, plus the second; any other expression is evaluated whole for each tile."""
        g0, g1, g2 = operand_vars()
        names = {**sym_names, g0: "bi", g1: rows, g2: cols}
        k_var, fixed_shape, k_shape = (g2, "[BM, 1]", "[1, BK]") if side == "a" else \
            (g1, "[1, BN]", "[BK, 1]")
        split = split_gather(operand, k_var)
        if split is not None:
            load, fixed, with_k = split
            return {"gather": True, "split": True, "name": arg_names[load.buffer],
                    "fixed": f"{to_triton(fixed, names)} + tl.zeros({fixed_shape}, tl.int64)",
                    "with_k": f"{to_triton(with_k, names)} + tl.zeros({k_shape}, tl.int64)", "checks": []}, []
        writer = TritonBodyWriter(arg_names, names, f"{side}_mask", prefix=f"{side}g", zero=f"{side}_zero")
        value = writer.value(operand.value)
        return {"gather": True, "split": False, "lines": writer.lines, "value": value}, writer.checks

    def _matmul(self, k: MatmulKernel) -> dict[str, Any]:
        arg_names, sym_names = self._names(k)
        writer = TritonBodyWriter(arg_names, sym_names, "")

        def dtype_of(operand: Operand) -> str:
            if isinstance(operand, GatheredOperand):
                return operand.dtype
            return self.program.buffers[operand.buffer].dtype

        dtypes = {dtype_of(k.a), dtype_of(k.b), k.dtype}
        if not dtypes <= {"float32", "float16", "bfloat16", "float64"}:
            raise UnsupportedError(f"a matrix product of {'/'.join(sorted(dtypes))} has no CUDA kernel yet "
                                   "(floating point only)")
        m_max, n_max, k_max = self._max(k.m), self._max(k.n), self._max(k.k)
        wide = k.dtype in ("float32", "float64")
        bm = min(128 if not wide else 64, max(16, next_pow2(m_max)))
        bn = min(128 if not wide else 64, max(16, next_pow2(n_max)))
        bk = min(32 if wide else 64, max(16, next_pow2(k_max)))
        constexprs = {"BM": bm, "BN": bn, "BK": bk, "GROUP_M": 8}
        exprs = [k.batch, k.m, k.n, k.k]
        operands: dict[str, Any] = {}
        checks: list[Check] = []
        sides = (("a", k.a, "rm[:, None]", "gk[None, :]"), ("b", k.b, "gk[:, None]", "rn[None, :]"))
        for side, operand, rows, cols in sides:
            if isinstance(operand, GatheredOperand):
                exprs += scalar.index_exprs(operand.value)
                operands[side], side_checks = self._gathered(operand, side, rows, cols, arg_names, sym_names)
                operands[side]["checks"] = _checks(side_checks, first=len(checks) + 1)
                checks += side_checks
            else:
                exprs += [operand.offset, *operand.strides]
                operands[side] = {"gather": False, **self._view(operand, writer)}
                operands[f"{side}_name"] = arg_names[operand.buffer]
        params = self._params(k, exprs, bool(checks), constexprs)
        compute = "tl.float64" if k.dtype == "float64" else ("tl.float32" if k.dtype == "float32" else None)
        grid = (_cdiv(k.m, bm) * _cdiv(k.n, bn), k.batch, sympy.Integer(1))
        if k.b_packed:
            # a packed b (lowering/prepack.py) advances 16 elements per k; its panel offset is in the template
            operands["b"] = {"gather": False, "offset": "0", "strides": ["0", "16", "0"]}
        return {
            **params, "batch": writer.index(k.batch), "m": writer.index(k.m), "n": writer.index(k.n),
            "k": writer.index(k.k), "a_name": None, "b_name": None, **operands,
            "b_packed": k.b_packed,
            # A constant b the lowering laid out in [ceil(N/16), K, 16] panels (lowering/prepack.py): element
            # (k, n) sits at (n // 16) * 16K + 16k + n % 16.
            "b_panel_k": int(k.k) if getattr(k, "b_packed", False) else None,
            "operand_type": compute or TL_TYPE[k.dtype],
            "precision": "ieee" if compute else "tf32",
            "acc_type": "tl.float64" if k.dtype == "float64" else "tl.float32",
            "store_value": self._store("acc", k.dtype),
            "meta": {"constexprs": constexprs, "num_warps": 8 if bm * bn >= 128 * 128 else 4,
                     "num_stages": 3, "errors": [c.what for c in checks], "grid": grid},
        }

    def _attention(self, k: AttentionKernel) -> dict[str, Any]:
        arg_names, sym_names = self._names(k)
        # The mask's index variables: b and h are the program's scalars, i and j its row and key blocks.
        loop_vars = {index_var("i", d): f"i{d}" for d in range(4)}
        row, key = index_var("i", 2), index_var("i", 3)

        def guard(load: Load) -> tuple[str, str]:
            # A load that varies along keys only (a [batch, seq] padding mask) reads BN elements per block,
            # not BM x BN: its pointer block takes the shape of the indices it uses.
            used = load.index.free_symbols
            if load.indirect or (row in used and key in used):
                return "smask", "szero"
            return ("rmask", "rzero") if row in used else ("kmask", "kzero")

        writer = TritonBodyWriter(arg_names, {**sym_names, **loop_vars}, "smask", prefix="m", zero="szero",
                                  guard=guard)
        score = "s"
        if k.mask is not None:
            mask = writer.value(k.mask)
            score = f"tl.where({mask}, s, _NINF)" if k.mask.dtype == "bool" else f"s + ({mask}).to(tl.float32)"
        head_dim, value_dim = int(k.head_dim), int(k.value_dim)
        wide = k.dtype == "float32"
        bd, bdv = max(16, next_pow2(head_dim)), max(16, next_pow2(value_dim))
        q_max = self._max(k.q_len)
        # Half operands: 64 x 64 blocks, 4 warps, 3 stages was the fastest of the configurations that
        # scripts/gpu_attention_bench.py tries on an H200, at head dims 64 and 128, causal or masked: at seq
        # 2048, 1.3-1.4x faster than 128-row blocks with 8 warps for causal attention, level with them for a
        # padding mask. float32 operands take twice the shared memory and registers: at head dims above 64,
        # 32 keys per block.
        bm = min(64, max(16, next_pow2(q_max)))
        bn = min(32 if wide and bd > 64 else 64, max(16, next_pow2(self._max(k.kv_len))))
        constexprs = {"BM": bm, "BN": bn, "BD": bd, "BDV": bdv}
        exprs = [k.heads, k.q_len, k.kv_len, *(scalar.index_exprs(k.mask) if k.mask is not None else ())]
        views = {"q": k.q, "k": k.k, "v": k.v}
        for view in views.values():
            exprs += [view.offset, *view.strides]
        params = self._params(k, exprs, bool(writer.checks), constexprs)
        data = {**params, "heads": writer.index(k.heads), "group": str(int(k.heads) // int(k.kv_heads)),
                "q_len": writer.index(k.q_len), "kv_len": writer.index(k.kv_len), "head_dim": head_dim,
                "value_dim": value_dim, "scale": repr(k.scale), "causal": k.causal, "mask": k.mask is not None,
                "mask_lines": writer.lines, "checks": _checks(writer.checks), "masked_score": score,
                "precision": "ieee" if wide else "tf32", "store_value": self._store("result", k.dtype),
                "meta": {"constexprs": constexprs, "num_warps": 4, "num_stages": 2 if wide else 3,
                         "errors": [c.what for c in writer.checks],
                         "grid": (_cdiv(k.q_len, bm), k.batch * k.heads, sympy.Integer(1))}}
        for name, view in views.items():
            data[name] = self._view(view, writer)
            data[f"{name}_name"] = arg_names[view.buffer]
        return data


def _checks(checks: list[Check], first: int = 1) -> list[dict[str, Any]]:
    return [{"condition": c.condition, "code": first + i} for i, c in enumerate(checks)]


def _reduction_parts(op: str, acc_dtype: str) -> dict[str, str]:
    """The accumulator's type and initial value, the masked update of `acc` by `v`, and the final fold."""
    acc_type = COMPUTE_TL[acc_dtype]
    is_float = scalar.is_float(acc_dtype)
    lowest = "_NINF" if is_float else f"{_int_limits(acc_dtype)[0]}"
    highest = "_INF" if is_float else f"{_int_limits(acc_dtype)[1]}"
    nan = " | (v != v)" if is_float else ""
    if op == "sum":
        return {"acc_type": acc_type, "init": "0", "update": "acc = acc + tl.where(rmask_all, v, 0)",
                "result": "tl.sum(acc, 1)"}
    if op == "prod":
        return {"acc_type": acc_type, "init": "1", "update": "acc = acc * tl.where(rmask_all, v, 1)",
                "result": "tl.reduce(acc, 1, _prod_combine)"}
    if op in ("max", "min"):
        cmp = ">" if op == "max" else "<"
        return {"acc_type": acc_type, "init": lowest if op == "max" else highest,
                "update": f"acc = tl.where(rmask_all & ((v {cmp} acc){nan}), v, acc)",
                "result": f"tl.reduce(acc, 1, _{op}_nan)" if is_float else f"tl.{op}(acc, 1)"}
    if op in ("argmax", "argmin"):
        cmp = ">" if op == "argmax" else "<"
        first_nan = " | ((v != v) & (acc == acc))" if is_float else ""
        return {"acc_type": acc_type, "init": lowest if op == "argmax" else highest,
                "update": f"upd = rmask_all & ((v {cmp} acc){first_nan})\n"
                          "best = tl.where(upd, ridx + tl.zeros_like(best), best)\n"
                          "acc = tl.where(upd, v, acc)",
                "result": f"tl.reduce((acc, best), 1, _{op}_combine)[1]"}
    if op in ("any", "all"):
        return {"acc_type": "tl.int32", "init": "0" if op == "any" else "1",
                "update": f"acc = tl.{'maximum' if op == 'any' else 'minimum'}(acc, tl.where(rmask_all, v, "
                          f"{0 if op == 'any' else 1}))",
                "result": f"tl.{'max' if op == 'any' else 'min'}(acc, 1) != 0"}
    raise UnsupportedError(f"reduction {op} has no Triton form")


def _int_limits(dtype: str) -> tuple[int, int]:
    bits = {"int64": 64, "int32": 32, "int16": 16, "int8": 8}.get(dtype)
    if bits is None:
        return (0, 255) if dtype == "uint8" else (0, 1)
    return -(2 ** (bits - 1)), 2 ** (bits - 1) - 1


def render_triton_library(program: Program) -> TritonLibrary:
    """Every step of a program as Triton: the prelude, then each distinct kernel once."""
    renderer = TritonRenderer(program)
    kernels: dict[str, TritonKernel] = {}
    names, args, grids = [], [], []
    for step in program.steps:
        rendered, grid = renderer.render(step)
        kernels.setdefault(rendered.name, rendered)
        names.append(rendered.name)
        args.append(tuple(renderer.args(step)))
        grids.append(grid)
    prelude = renderer.env.get_template("prelude.py.jinja").render()
    source = prelude + "\n" + "\n".join(k.source for k in kernels.values())
    return TritonLibrary(source, prelude, tuple(kernels.values()), tuple(names), tuple(args), tuple(grids))
