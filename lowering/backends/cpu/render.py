"""Renders kernel IR as C++ from the Jinja templates in templates/cpp/.

Python decides what to compute and hands the templates plain data (names, C++ expressions as strings,
loop bounds); the templates hold all the C++ structure. A kernel's name is the hash of its rendered
body, so identical kernels (a model's repeated layers) collapse into one function.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2
import sympy

from ....errors import UnsupportedError
from ...ir import scalar
from ...ir.kernels import (
    AttentionKernel,
    GatheredOperand,
    Kernel,
    MatmulKernel,
    PointwiseKernel,
    Program,
    ReductionKernel,
    ScatterKernel,
    StridedView,
    operand_vars,
    split_gather,
)
from ...ir.scalar import Const, IndexValue, Load, Node, Op
from ...ir.symbolic import contiguous_strides, index_var, to_cpp

TEMPLATES = Path(__file__).resolve().parents[3] / "templates" / "cpp"

STORAGE_CTYPE = {
    "float32": "float", "float64": "double", "float16": "uint16_t", "bfloat16": "uint16_t", "int64": "int64_t",
    "int32": "int32_t", "int16": "int16_t", "int8": "int8_t", "uint8": "uint8_t", "bool": "bool",
}
COMPUTE_CTYPE = {**STORAGE_CTYPE, "float16": "float", "bfloat16": "float"}


def _env() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES)),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
    )


def load_from_storage(expr: str, dtype: str) -> str:
    if dtype == "bfloat16":
        return f"aotpack_bf16_to_f32({expr})"
    if dtype == "float16":
        return f"aotpack_f16_to_f32({expr})"
    return expr


def widen_to_float(dtype: str) -> str:
    """The function (a name to call) that turns one stored element of `dtype` into a float."""
    return {"bfloat16": "aotpack_bf16_to_f32", "float16": "aotpack_f16_to_f32"}.get(dtype, "static_cast<float>")


def store_to_storage(expr: str, dtype: str) -> str:
    if dtype == "bfloat16":
        return f"aotpack_f32_to_bf16({expr})"
    if dtype == "float16":
        return f"aotpack_f32_to_f16({expr})"
    return f"static_cast<{STORAGE_CTYPE[dtype]}>({expr})"


def const_literal(value: Any, dtype: str) -> str:
    ctype = COMPUTE_CTYPE[dtype]
    if dtype == "bool":
        return "true" if value else "false"
    if scalar.is_float(dtype):
        value = float(value)
        if math.isnan(value):
            return f"static_cast<{ctype}>(NAN)"
        if math.isinf(value):
            return f"static_cast<{ctype}>({'-' if value < 0 else ''}INFINITY)"
        return f"static_cast<{ctype}>({value!r})"
    return f"static_cast<{ctype}>(INT64_C({int(value)}))"


_UNARY_FLOAT = {
    "exp": "std::exp", "exp2": "std::exp2", "expm1": "std::expm1", "log": "std::log", "log2": "std::log2",
    "log10": "std::log10", "log1p": "std::log1p", "sqrt": "std::sqrt", "sin": "std::sin", "cos": "std::cos",
    "tan": "std::tan", "asin": "std::asin", "acos": "std::acos", "atan": "std::atan", "sinh": "std::sinh",
    "cosh": "std::cosh", "tanh": "std::tanh", "asinh": "std::asinh", "acosh": "std::acosh", "atanh": "std::atanh",
    "erf": "std::erf", "erfc": "std::erfc", "lgamma": "std::lgamma", "floor": "std::floor", "ceil": "std::ceil", "round": "std::nearbyint",
    "trunc": "std::trunc", "abs": "std::abs", "isnan": "std::isnan", "isinf": "std::isinf",
    "isfinite": "std::isfinite", "signbit": "std::signbit",
}
# float versions the compiler can vectorise (templates/cpp/prelude.h.jinja); double keeps libm's.
_VECTOR_FLOAT = {"exp": "aotpack_exp", "tanh": "aotpack_tanh", "erf": "aotpack_erf"}
_BINARY_INFIX = {
    "add": "+", "sub": "-", "mul": "*", "div": "/", "eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">",
    "ge": ">=", "logical_and": "&&", "logical_or": "||", "logical_xor": "!=", "lshift": "<<", "rshift": ">>",
}
_BINARY_FLOAT_FN = {"atan2": "std::atan2", "hypot": "std::hypot", "copysign": "std::copysign",
                    "fmax": "std::fmax", "fmin": "std::fmin", "pow": "std::pow", "fmod": "std::fmod"}


class BodyWriter:
    """Turns scalar expression trees into C++ statements, computing each distinct subexpression once."""

    def __init__(self, arg_names: dict[str, str], symbol_names: dict[sympy.Symbol, str],
                 inner: frozenset[sympy.Symbol] = frozenset()) -> None:
        self.arg_names = arg_names
        self.symbol_names = symbol_names
        # Loop variables of the innermost loop(s): the part of a load's offset that uses none of them is
        # computed once before that loop (`hoisted`), which also lets the compiler vectorise the loop.
        self.inner = inner
        self.hoisted: list[str] = []
        self._hoisted_names: dict[sympy.Expr, str] = {}
        self.lines: list[str] = []
        self._cache: dict[Node, str] = {}

    def index(self, expr: sympy.Expr, extra: dict[sympy.Symbol, str] | None = None) -> str:
        return to_cpp(expr, {**self.symbol_names, **(extra or {})})

    def _tmp(self, ctype: str, expr: str) -> str:
        name = f"t{len(self.lines)}"
        self.lines.append(f"const {ctype} {name} = {expr};")
        return name

    def value(self, node: Node) -> str:
        if node in self._cache:
            return self._cache[node]
        if isinstance(node, Const):
            out = const_literal(node.value, node.dtype)
        elif isinstance(node, IndexValue):
            out = self._tmp(COMPUTE_CTYPE[node.dtype], f"static_cast<{COMPUTE_CTYPE[node.dtype]}>({self.split_index(node.expr)})")
        elif isinstance(node, Load):
            out = self._load(node)
        else:
            out = self._tmp(COMPUTE_CTYPE[node.dtype], self._op(node))
        self._cache[node] = out
        return out

    def _load(self, node: Load) -> str:
        element = f"{self.arg_names[node.buffer]}[{self.offset(node)}]"
        return self._tmp(COMPUTE_CTYPE[node.dtype], load_from_storage(element, node.dtype))

    def offset(self, node: Load) -> str:
        """The element offset `node` addresses, its indices from data checked (a bad one reported, then 0)."""
        extra = {}
        for ind in node.indirect:
            position = self.value(ind.value)
            what = ind.what.replace("\\", "\\\\").replace('"', '\\"')
            checked = self._tmp("int64_t", f'aotpack_check_index(ctx, static_cast<int64_t>({position}), '
                                           f'{self.index(ind.size)}, {"true" if ind.wrap else "false"}, "{what}")')
            extra[ind.var] = checked
        return self.split_index(node.index, extra)

    def split_index(self, index: sympy.Expr, extra: dict[sympy.Symbol, str] | None = None) -> str:
        extra = extra or {}
        if not self.inner:
            return self.index(index, extra)
        terms = sympy.Add.make_args(sympy.expand(index))
        outer = [t for t in terms if not (t.free_symbols & self.inner) and not (t.free_symbols & set(extra))]
        if not outer or all(t.is_number for t in outer):
            return self.index(index, extra)
        base = sympy.Add(*outer)
        if base not in self._hoisted_names:
            name = f"o{len(self._hoisted_names)}"
            self._hoisted_names[base] = name
            self.hoisted.append(f"const int64_t {name} = {self.index(base)};")
        rest = sympy.Add(*[t for t in terms if t not in outer])
        return f"{self._hoisted_names[base]} + {self.index(rest, extra)}"

    def _op(self, node: Op) -> str:
        args = [self.value(a) for a in node.args]
        name, dtype = node.name, node.dtype
        ctype = COMPUTE_CTYPE[dtype]
        arg_dtype = node.args[0].dtype if node.args else dtype
        is_float = scalar.is_float(arg_dtype)
        is_bool = arg_dtype == "bool"
        if name == "cast":
            if dtype == "bool":
                return f"({args[0]} != 0)"
            if dtype in ("bfloat16", "float16") and arg_dtype != dtype:
                # half types compute in float, but a cast to one must still round, fused or not
                half = "bf16" if dtype == "bfloat16" else "f16"
                return f"aotpack_{half}_to_f32(aotpack_f32_to_{half}(static_cast<float>({args[0]})))"
            return f"static_cast<{ctype}>({args[0]})"
        if name == "where":
            return f"({args[0]} ? {args[1]} : {args[2]})"
        if name == "neg":
            return f"static_cast<{ctype}>(-{args[0]})"
        if name in ("logical_not", "bitwise_not"):
            return f"(!{args[0]})" if (name == "logical_not" or is_bool) else f"static_cast<{ctype}>(~{args[0]})"
        if name in ("bitwise_and", "bitwise_or", "bitwise_xor"):
            op = {"bitwise_and": "&", "bitwise_or": "|", "bitwise_xor": "^"}[name]
            return f"static_cast<{ctype}>({args[0]} {op} {args[1]})"
        if name in _BINARY_INFIX:
            if name == "div" and not is_float:
                raise UnsupportedError("integer true division reached code generation; this is an aotpack bug")
            return f"static_cast<{ctype}>({args[0]} {_BINARY_INFIX[name]} {args[1]})"
        if name in ("maximum", "minimum"):
            fn = "aotpack_maximum" if name == "maximum" else "aotpack_minimum"
            return f"{fn}<{ctype}>({args[0]}, {args[1]})"
        if name == "relu":
            return f"({args[0]} < 0 ? static_cast<{ctype}>(0) : {args[0]})"
        if name == "sigmoid":
            exp = "aotpack_exp" if ctype == "float" else "std::exp"
            return f"static_cast<{ctype}>(1) / (static_cast<{ctype}>(1) + {exp}(-{args[0]}))"
        if name == "rsqrt":
            return f"static_cast<{ctype}>(1) / std::sqrt({args[0]})"
        if name == "reciprocal":
            return f"static_cast<{ctype}>(1) / {args[0]}"
        if name == "sign":
            return f"aotpack_sign<{ctype}>({args[0]})"
        if name in ("isposinf", "isneginf"):
            return f"({args[0]} == {'' if name == 'isposinf' else '-'}INFINITY)"
        if not is_float:
            if name in ("floor", "ceil", "round", "trunc"):
                return args[0]
            if name == "abs":
                return f"static_cast<{ctype}>({args[0]} < 0 ? -{args[0]} : {args[0]})"
            integer = {"floordiv": "aotpack_idiv_floor", "truncdiv": "aotpack_idiv_trunc", "remainder": "aotpack_imod",
                       "fmod": "aotpack_ifmod"}
            if name in integer:
                return f"{integer[name]}<{ctype}>(ctx, {args[0]}, {args[1]})"
            if name == "pow":
                return f"aotpack_ipow<{ctype}>({args[0]}, {args[1]})"
            if name in ("isnan", "isinf", "signbit", "isfinite"):
                return {"isnan": "false", "isinf": "false", "isfinite": "true"}.get(name, f"({args[0]} < 0)")
        if ctype == "float" and name in _VECTOR_FLOAT:
            return f"{_VECTOR_FLOAT[name]}({args[0]})"
        if name in _UNARY_FLOAT:
            return f"{_UNARY_FLOAT[name]}({args[0]})"
        if name in _BINARY_FLOAT_FN:
            return f"{_BINARY_FLOAT_FN[name]}({args[0]}, {args[1]})"
        if name == "remainder":
            return f"aotpack_fmod_py<{ctype}>({args[0]}, {args[1]})"
        if name == "floordiv":
            return f"std::floor({args[0]} / {args[1]})"
        raise UnsupportedError(f"the scalar op {name} on {arg_dtype} has no C++ form yet")


@dataclass(frozen=True)
class RenderedKernel:
    name: str
    family: str
    source: str
    scratch_bytes: int = 0


@dataclass(frozen=True)
class RenderedLibrary:
    source: str
    step_kernels: tuple[str, ...]  # kernel function name of each program step
    step_args: tuple[tuple[str, ...], ...]  # buffer names passed to each step, in order
    kernels: tuple[RenderedKernel, ...]


class KernelRenderer:
    def __init__(self, program: Program) -> None:
        self.program = program
        self.env = _env()
        self.symbol_index = {s.expr: i for i, s in enumerate(program.symbols)}

    def _args(self, kernel: Kernel) -> list[str]:
        return [*kernel.reads(), kernel.output]

    def _common(self, kernel: Kernel, exprs: list[sympy.Expr]) -> dict[str, Any]:
        args = self._args(kernel)
        arg_data = []
        for i, buffer in enumerate(args):
            dtype = self.program.buffers[buffer].dtype
            is_out = i == len(args) - 1
            arg_data.append({"cname": "out" if is_out else f"in{i}", "ctype": STORAGE_CTYPE[dtype],
                             "qualifier": "" if is_out else "const "})
        used: set[sympy.Symbol] = set()
        for e in exprs:
            used |= sympy.sympify(e).free_symbols
        symbols = [{"cname": f"s_{s.name}", "index": i} for s, i in self.symbol_index.items() if s in used]
        return {"args": arg_data, "symbols": symbols, "output": "out"}

    def _names(self, kernel: Kernel) -> tuple[dict[str, str], dict[sympy.Symbol, str]]:
        args = self._args(kernel)
        arg_names = {b: ("out" if i == len(args) - 1 else f"in{i}") for i, b in enumerate(args)}
        return arg_names, {s: f"s_{s.name}" for s in self.symbol_index}

    def render(self, kernel: Kernel) -> RenderedKernel:
        if isinstance(kernel, PointwiseKernel):
            data, template = self._pointwise(kernel), "pointwise.cpp.jinja"
        elif isinstance(kernel, ReductionKernel):
            data, template = self._reduction(kernel), "reduction.cpp.jinja"
        elif isinstance(kernel, ScatterKernel):
            data, template = self._scatter(kernel), "scatter.cpp.jinja"
        elif isinstance(kernel, MatmulKernel):
            data = self._matmul(kernel)
            template = "matmul.cpp.jinja" if kernel.dtype in ("float32", "float16", "bfloat16") else "matmul_generic.cpp.jinja"
        elif isinstance(kernel, AttentionKernel):
            data, template = self._attention(kernel), "attention.cpp.jinja"
        else:
            raise UnsupportedError(f"no C++ template for {type(kernel).__name__}")
        body = self.env.get_template(template).render(name="KERNEL_NAME", **data)
        name = "k_" + hashlib.sha256(body.encode()).hexdigest()[:16]
        return RenderedKernel(name, kernel.family, body.replace("KERNEL_NAME", name), self.scratch_bytes(kernel))

    def _pointwise(self, k: PointwiseKernel) -> dict[str, Any]:
        arg_names, sym_names = self._names(k)
        inner = frozenset({index_var("i", len(k.shape) - 1)}) if len(k.shape) >= 2 else frozenset()
        writer = BodyWriter(arg_names, sym_names, inner)
        value = writer.value(k.value)
        out_dtype = self.program.buffers[k.output].dtype
        outer_strides = contiguous_strides(k.shape[:-1])
        loops = [{"var": f"i{d}", "size": writer.index(s),
                  "stride": writer.index(outer_strides[d]) if d < len(outer_strides) else "1"}
                 for d, s in enumerate(k.shape)]
        store_index = writer.split_index(
            sum((index_var("i", d) * st for d, st in enumerate(contiguous_strides(k.shape))), sympy.Integer(0)))
        data = self._common(k, [*k.shape, *scalar.index_exprs(k.value)])
        data.update(loops=loops, body=writer.lines, hoisted=writer.hoisted, store_index=store_index,
                    store_value=store_to_storage(value, out_dtype))
        return data

    def _reduction(self, k: ReductionKernel) -> dict[str, Any]:
        arg_names, sym_names = self._names(k)
        writer = BodyWriter(arg_names, sym_names, frozenset(index_var("r", d) for d in range(len(k.reduced))))
        value = writer.value(k.value)
        acc_ctype = COMPUTE_CTYPE[k.acc_dtype]
        strides = contiguous_strides(k.shape)
        loops = [{"var": f"i{d}", "size": writer.index(s), "stride": writer.index(st)}
                 for d, (s, st) in enumerate(zip(k.shape, strides))]
        rloops = [{"var": f"r{d}", "size": writer.index(s)} for d, s in enumerate(k.reduced)]
        rstrides = contiguous_strides(k.reduced)
        ridx = writer.index(sum((index_var("r", d) * st for d, st in enumerate(rstrides)), sympy.Integer(0)))
        init, combine, result = _reduction_parts(k.op, k.acc_dtype)
        data = self._common(k, [*k.shape, *k.reduced, *scalar.index_exprs(k.value)])
        data.update(loops=loops, rloops=rloops, body=writer.lines, hoisted=writer.hoisted,
                    value=f"static_cast<{acc_ctype}>({value})",
                    acc_ctype=acc_ctype, init=init, combine=combine, arg=k.op in ("argmax", "argmin"), ridx=ridx,
                    lanes=REDUCTION_LANES if len(k.reduced) == 1 and k.op not in ("argmax", "argmin") else 0,
                    combine_lane=combine.replace("acc", "part[l]"),
                    op=k.op, store_value=store_to_storage(result, k.out_dtype))
        return data

    def _scatter(self, k: ScatterKernel) -> dict[str, Any]:
        arg_names, sym_names = self._names(k)
        writer = BodyWriter(arg_names, sym_names)
        value = writer.value(k.value)
        target = writer.offset(k.target)
        dtype = self.program.buffers[k.output].dtype
        ctype = COMPUTE_CTYPE[dtype]
        old = load_from_storage("out[dst]", dtype)
        combined = {"assign": "v", "sum": f"static_cast<{ctype}>({old} + v)", "prod": f"static_cast<{ctype}>({old} * v)",
                    "max": f"aotpack_maximum<{ctype}>({old}, v)", "min": f"aotpack_minimum<{ctype}>({old}, v)"}
        if k.op not in combined:
            raise UnsupportedError(f"scatter {k.op} has no C++ form")
        data = self._common(k, [*k.shape, *scalar.index_exprs(k.value), *scalar.index_exprs(k.target)])
        data.update(loops=[{"var": f"u{d}", "size": writer.index(s)} for d, s in enumerate(k.shape)],
                    body=writer.lines, ctype=ctype, value=value, target=target, op=k.op,
                    store_value=store_to_storage(combined[k.op], dtype))
        return data

    def _view(self, view: StridedView, writer: BodyWriter) -> dict[str, Any]:
        return {"offset": writer.index(view.offset), "strides": [writer.index(s) for s in view.strides]}

    # Cache blocking of the float matmul (templates/cpp/matmul.cpp.jinja): a task's tile is MC rows (a
    # multiple of the micro-kernel's 6) by NC columns (a multiple of 16), packed KC steps of k at a time.
    MATMUL_BLOCKS = {"mc": 192, "nc": 256, "kc": 256}

    def scratch_bytes(self, kernel: Kernel) -> int:
        """Per-thread scratch the kernel takes from the runtime (kernel ABI thread_scratch)."""
        if isinstance(kernel, MatmulKernel) and kernel.dtype in ("float32", "float16", "bfloat16"):
            b = self.MATMUL_BLOCKS
            column_offsets = 8 * b["nc"] if isinstance(kernel.b, GatheredOperand) else 0
            return 4 * (b["mc"] * b["kc"] + b["kc"] * b["nc"] + b["mc"] * b["nc"]) + column_offsets
        if isinstance(kernel, AttentionKernel):
            bm, bn = self.ATTENTION_BLOCKS["bm"], self.ATTENTION_BLOCKS["bn"]
            d, dvp = int(kernel.head_dim), _round_up(int(kernel.value_dim), 16)
            return 4 * (bm * d + bn * d + bm * bn + bn * dvp + bm * dvp + 2 * bm)
        return 0

    def _matmul(self, k: MatmulKernel) -> dict[str, Any]:
        arg_names, sym_names = self._names(k)
        writer = BodyWriter(arg_names, sym_names)
        exprs = [k.batch, k.m, k.n, k.k]
        for operand in (k.a, k.b):
            if isinstance(operand, GatheredOperand):
                exprs += scalar.index_exprs(operand.value)
            else:
                exprs += [operand.offset, *operand.strides]
        data = self._common(k, exprs)
        data.update(batch=writer.index(k.batch), m=writer.index(k.m), n=writer.index(k.n), k=writer.index(k.k),
                    a_gather=isinstance(k.a, GatheredOperand), b_gather=isinstance(k.b, GatheredOperand),
                    b_split=False, dot_rows=False)
        if isinstance(k.a, GatheredOperand) or isinstance(k.b, GatheredOperand):
            if k.dtype not in ("float32", "float16", "bfloat16"):
                raise UnsupportedError(f"a {k.dtype} matrix product with a gathered operand reached code "
                                       "generation; this is an aotpack bug (GATHER_DTYPES, ops_linalg.py)")
            return self._matmul_gathered(k, data, arg_names, sym_names)
        a_dtype = self.program.buffers[k.a.buffer].dtype
        b_dtype = self.program.buffers[k.b.buffer].dtype
        data.update(a=self._view(k.a, writer), b=self._view(k.b, writer), a_ctype=STORAGE_CTYPE[a_dtype],
                    b_ctype=STORAGE_CTYPE[b_dtype], a_name=arg_names[k.a.buffer], b_name=arg_names[k.b.buffer])
        if k.dtype in ("float32", "float16", "bfloat16"):
            a_elem = "row[k]" if k.a.strides[2] == 1 else "row[k * a_sk]"
            data.update(self.MATMUL_BLOCKS, out_ctype=STORAGE_CTYPE[k.dtype],
                        load_a=f"static_cast<float>({load_from_storage(a_elem, a_dtype)})",
                        load_b_at=widen_to_float(b_dtype), b_n_contiguous=k.b.strides[2] == 1, b_packed=k.b_packed,
                        a_rows=a_dtype == "float32" and k.a.strides[2] == 1,
                        dot_rows=not k.b_packed and k.b.strides[1] == 1 and k.a.strides[2] == 1,
                        load_a_at=widen_to_float(a_dtype),
                        store=store_to_storage("tile[i * NC + j]", k.dtype))
            return data
        acc = "double" if k.dtype == "float64" else "int64_t"
        a_elem = f"{arg_names[k.a.buffer]}[a_off + bi * a_sb + (m0 + i) * a_sm + kk * a_sk]"
        b_elem = "brow[j]" if k.b.strides[2] == 1 else "brow[j * b_sn]"
        data.update(mb=4, nb=256, acc_ctype=acc,
                    load_a=f"static_cast<{acc}>({load_from_storage(a_elem, a_dtype)})",
                    load_b=f"static_cast<{acc}>({load_from_storage(b_elem, b_dtype)})",
                    store=store_to_storage("acc[i][j]", k.dtype))
        return data

    def _matmul_gathered(self, k: MatmulKernel, data: dict[str, Any], arg_names: dict[str, str],
                         sym_names: dict[sympy.Symbol, str]) -> dict[str, Any]:
        """The float matmul with a gathered operand (implicit GEMM): the packing loops evaluate its expression
        straight into the panels the micro-kernel reads, instead of copying them from memory."""
        g0, g1, g2 = operand_vars()
        names = {**sym_names, g0: "bi", g1: "g1", g2: "g2"}
        data.update(self.MATMUL_BLOCKS, out_ctype=STORAGE_CTYPE[k.dtype], b_packed=k.b_packed,
                    store=store_to_storage("tile[i * NC + j]", k.dtype))
        writer = BodyWriter(arg_names, names)
        for side, operand in (("a", k.a), ("b", k.b)):
            if not isinstance(operand, GatheredOperand):
                dtype = self.program.buffers[operand.buffer].dtype
                data.update({side: self._view(operand, writer), f"{side}_ctype": STORAGE_CTYPE[dtype],
                             f"{side}_name": arg_names[operand.buffer]})
                if side == "a":
                    a_elem = "row[k]" if operand.strides[2] == 1 else "row[k * a_sk]"
                    data.update(load_a=f"static_cast<float>({load_from_storage(a_elem, dtype)})",
                                a_rows=dtype == "float32" and operand.strides[2] == 1)
                else:
                    data.update(load_b_at=widen_to_float(dtype),
                                b_n_contiguous=operand.strides[2] == 1)
                continue
            data.update({side: {"offset": "0", "strides": ["0", "0", "0"]}, f"{side}_name": None})
            if side == "a":
                data.update(a_rows=False)
            split = split_gather(operand, g1) if side == "b" else None
            if split is not None:
                load, col, row = split
                dtype = self.program.buffers[load.buffer].dtype
                data.update(b_split=True, b_name=arg_names[load.buffer], b_ctype=STORAGE_CTYPE[dtype],
                            load_b_at=widen_to_float(dtype),
                            b_row_offset=to_cpp(row, names), b_col_offset=to_cpp(col, names))
                continue
            element = BodyWriter(arg_names, names)
            value = element.value(operand.value)
            data.update({f"{side}_lines": element.lines, f"{side}_value": f"static_cast<float>({value})"})
        return data

    # A task of the attention kernel (templates/cpp/attention.cpp.jinja) owns BM query rows (a multiple of the
    # micro-kernel's 6) and walks the keys BN (a multiple of 16) at a time. Each task packs every key and value
    # block it reads, so taller tasks pack less per score: at seq 2048, 12 heads of dim 64, causal, one thread,
    # BM 96 took 167 ms where BM 48 took 230 and BM 24 283 (BN 128 changed little; eager took about 130).
    ATTENTION_BLOCKS = {"bm": 96, "bn": 64}

    def _attention(self, k: AttentionKernel) -> dict[str, Any]:
        arg_names, sym_names = self._names(k)
        loop_vars = {index_var("i", d): f"i{d}" for d in range(4)}
        writer = BodyWriter(arg_names, {**sym_names, **loop_vars}, frozenset({index_var("i", 3)}))
        score = "srow[j]"
        if k.mask is not None:
            mask = writer.value(k.mask)
            score = f"({mask} ? {score} : -INFINITY)" if k.mask.dtype == "bool" else f"{score} + static_cast<float>({mask})"
        if k.causal:
            score = f"(i3 > i2 ? -INFINITY : {score})"
        views = {"q": k.q, "k": k.k, "v": k.v}
        dtypes = {name: self.program.buffers[view.buffer].dtype for name, view in views.items()}
        exprs = [k.batch, k.heads, k.q_len, k.kv_len]
        for view in views.values():
            exprs += [view.offset, *view.strides]
        if k.mask is not None:
            exprs += scalar.index_exprs(k.mask)
        data = self._common(k, exprs)
        data.update(self.ATTENTION_BLOCKS, batch=writer.index(k.batch), heads=writer.index(k.heads),
                    group=str(int(k.heads) // int(k.kv_heads)), q_len=writer.index(k.q_len),
                    kv_len=writer.index(k.kv_len), head_dim=int(k.head_dim), value_dim=int(k.value_dim),
                    value_dim_padded=_round_up(int(k.value_dim), 16), scale=f"{k.scale!r}f", causal=k.causal,
                    mask=k.mask is not None, mask_lines=writer.lines, mask_hoisted=writer.hoisted,
                    masked_score=score, out_ctype=STORAGE_CTYPE[k.dtype],
                    store=store_to_storage("acc[i * DVP + d] * inv", k.dtype))
        for name, view in views.items():
            element = {"q": "qb[i * q_si + d * q_sd]", "k": "row[d * k_sd]", "v": "row[d * v_sd]"}[name]
            data.update({name: self._view(view, writer), f"{name}_ctype": STORAGE_CTYPE[dtypes[name]],
                         f"{name}_name": arg_names[view.buffer],
                         f"load_{name}": f"static_cast<float>({load_from_storage(element, dtypes[name])})"})
        return data


def _round_up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


# Partial accumulators of a reduction over one dim: 8 floats fill one AVX2 register.
REDUCTION_LANES = 8


def _reduction_parts(op: str, acc_dtype: str) -> tuple[str, str, str]:
    """(initial value, C++ statement folding `v` into `acc`, the stored result) of a reduction."""
    ctype = COMPUTE_CTYPE[acc_dtype]
    is_float = scalar.is_float(acc_dtype)
    lowest = f"-std::numeric_limits<{ctype}>::infinity()" if is_float else f"std::numeric_limits<{ctype}>::lowest()"
    highest = f"std::numeric_limits<{ctype}>::infinity()" if is_float else f"std::numeric_limits<{ctype}>::max()"
    nan_check = " || v != v" if is_float else ""
    if op == "sum":
        return "0", "acc += v;", "acc"
    if op == "prod":
        return "1", "acc *= v;", "acc"
    if op == "max":
        return lowest, f"if (v > acc{nan_check}) acc = v;", "acc"
    if op == "min":
        return highest, f"if (v < acc{nan_check}) acc = v;", "acc"
    if op in ("argmax", "argmin"):
        cmp = ">" if op == "argmax" else "<"
        first_nan = " || (v != v && acc == acc)" if is_float else ""
        init = lowest if op == "argmax" else highest
        return init, f"if (v {cmp} acc{first_nan}) {{ acc = v; best = ridx; }}", "best"
    if op == "any":
        return "false", "acc = acc || v;", "acc"
    if op == "all":
        return "true", "acc = acc && v;", "acc"
    raise UnsupportedError(f"reduction {op} has no C++ form")


def render_library(program: Program) -> RenderedLibrary:
    """The whole kernel library of a program: prelude, then each distinct kernel once."""
    renderer = KernelRenderer(program)
    kernels: dict[str, RenderedKernel] = {}
    names, args = [], []
    for step in program.steps:
        rendered = renderer.render(step)
        kernels.setdefault(rendered.name, rendered)
        names.append(rendered.name)
        args.append(tuple(renderer._args(step)))
    scratch = max((k.scratch_bytes for k in kernels.values()), default=0)
    prelude = renderer.env.get_template("prelude.h.jinja").render(scratch_bytes=scratch)
    source = prelude + "\n" + "\n".join(k.source for k in kernels.values())
    return RenderedLibrary(source, tuple(names), tuple(args), tuple(kernels.values()))

