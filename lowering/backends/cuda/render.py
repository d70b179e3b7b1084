"""The data each kernel family's template in templates/triton/ gets, through the codegen core (codegen/).

The same IR the C++ backend renders (lowering/ir/kernels.py): Python decides what to compute and hands the
templates plain data (parameter lists, Triton expressions as strings, block sizes); the templates hold
the Triton structure. Each kernel receives the base pointers of its buffers (reads, then the output),
then the int64 values of the symbols it uses, then (when it checks indices read from data) a pointer to
its error flag. Sizes, strides and offsets are computed inside the kernel from the symbols, as on CPU;
the only per-step expressions the runtime evaluates are the launch grid's (docs/package-format.md).

Half types are loaded, computed in float32 and rounded on store, as the C++ kernels do. A kernel's name
is the hash of its source, so a model's repeated layers share one cubin.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import sympy
from torch.utils._sympy import functions as tf

from ....errors import UnsupportedError
from ...codegen.body import Check, split_independent
from ...codegen.library import KernelRenderer, RenderedKernel, RenderedLibrary, render_library
from ...ir import scalar
from ...ir.dtypes import DTYPES, is_float
from ...ir.kernels import (
    ROW_SUM_GROUP,
    AttentionKernel,
    GatheredOperand,
    Kernel,
    MatmulKernel,
    Operand,
    PanelView,
    PointwiseKernel,
    Program,
    ReductionKernel,
    RowKernel,
    ScatterKernel,
    StridedView,
    epilogue_vars,
    operand_vars,
    paired_value,
    product_value,
    row_result,
    row_stat,
    split_gather,
)
from ...ir.mask_structure import DEAD_SCORE, skips_dead_keys
from ...ir.scalar import Load
from ...ir.symbolic import contiguous_strides, index_var, product
from .attention_config import AttentionConfig, attention_candidates, attention_config
from .matmul_config import SM_COUNT, MatmulConfig, matmul_candidates, matmul_config
from .spelling import COMPUTE_TL, POINTER_TYPE, TL_TYPE, body_writer, to_triton

if TYPE_CHECKING:
    from .tuning import Tuning


def next_pow2(n: int) -> int:
    return 1 if n <= 1 else 1 << (int(n) - 1).bit_length()


# --- kernels -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TritonKernel(RenderedKernel):
    """One rendered kernel and what it takes to compile and launch it."""

    signature: tuple[tuple[str, str], ...]  # (parameter, Triton type) in order; constexprs typed "constexpr"
    constexprs: tuple[tuple[str, int], ...]  # block sizes
    num_warps: int
    num_stages: int
    symbols: tuple[int, ...]  # indices of the program symbols passed after the buffers, in order
    errors: tuple[str, ...]  # messages of the error-flag values 1, 2, ...; empty: no flag parameter
    pdl: bool = False  # begins with griddepcontrol.wait: may be launched with programmatic dependent launch
    persistent: bool = False  # a persistent matrix product reading through TMA descriptors (global scratch)
    early_launch: bool = False  # after its wait, lets its successor launch (EARLY_LAUNCH_ROWS)
    l2_prefetch: bool = False  # fetches its weight into L2 before its wait (TritonRenderer._weight_prefetch)
    paired: bool = False  # a paired product (ir/paired_products.py): two products of one operand, interleaved
    # split-K (MatmulConfig.split_k): the most programs a launch of it has, and the bytes of the partial sums
    # each writes. The runtime passes it a counter per program (zero at every launch: the last program of a
    # tile resets its own) and split_programs * split_tile_bytes of workspace, after the error flag.
    split_programs: int = 0
    split_tile_bytes: int = 0
    # A split kernel's unsplit twin and its grid: what the package names as the step's kernel, so that a runtime
    # that does not know split-K launches it (docs/package-format.md, "split").
    fallback: tuple[TritonKernel, tuple[sympy.Expr, ...]] | None = None
    # The configuration a product or attention was rendered at (None for the other families): what the compile
    # stage renders smaller when the compiled block needs more shared memory than a target gives (fit.py).
    config: MatmulConfig | AttentionConfig | None = None


def _cdiv(a: sympy.Expr, b: int) -> sympy.Expr:
    return tf.FloorDiv(sympy.sympify(a) + (b - 1), sympy.Integer(b))


class TritonRenderer(KernelRenderer):
    """Kernel IR -> Triton kernels: one method per kernel family, returning its template and data (with the
    launch options and grid under "meta")."""

    language = "triton"
    language_name = "Triton"

    def __init__(self, program: Program, arch: int | None = None, tuning: Tuning | None = None,
                 pdl: bool = False, tma: bool = False,
                 shrunk: Mapping[str, MatmulConfig | AttentionConfig] = {}) -> None:
        super().__init__(program)
        self.arch = arch  # the architecture configurations are chosen for (matmul_config.py); None: any
        self.pdl = pdl  # every kernel waits for the previous one itself (see `finish`)
        self.tma = tma  # every target has the tensor memory accelerator (sm_90+): persistent TMA products may run
        self.tuning = tuning  # export-time tuning (tuning.py): collects candidates, or applies its choices
        self._forced: MatmulConfig | AttentionConfig | None = None  # a configuration instead of the table's
        # kernel name -> the smaller configuration to render it at instead: the compile stage's word that its
        # block needs more shared memory than a target gives (fit.py)
        self.shrunk = shrunk

    def candidates(self, kernel: Kernel) -> list[MatmulConfig | AttentionConfig]:
        """The configurations tuning may time for the kernel being rendered (its bucket's sizes), the table's
        choice first; empty: not tunable."""
        if isinstance(kernel, MatmulKernel):
            tma = self.tma and self.tma_operands(kernel) is not None
            return matmul_candidates(self.max(kernel.m), self.max(kernel.n), self.max(kernel.k),
                                     self.operand_dtype(kernel.a), self.arch, tma=tma,
                                     store_bytes=_store_bytes(kernel),
                                     tma_store=tma and self.tma_writes_output(kernel))
        if isinstance(kernel, AttentionKernel):
            return attention_candidates(self.max(kernel.q_len), self.max(kernel.kv_len), int(kernel.head_dim),
                                        kernel.dtype == "float32")
        return []

    def attention_tma(self, k: AttentionKernel) -> bool:
        """Whether TMA descriptors can load attention's keys and values: half-precision [SK, D] rows with unit
        inner stride at a 16-byte aligned start for every batch and head (offset, batch and head strides), row
        strides that are nonzero multiples of 16 bytes, and extents below 2^31 and TMA's 256-element box."""
        for view, dim in ((k.k, k.head_dim), (k.v, k.value_dim)):
            dtype = self.program.buffers[view.buffer].dtype
            if dtype not in ("float16", "bfloat16"):
                return False
            size = DTYPES[dtype].itemsize
            batch, head, row, inner = view.strides
            if inner != 1 or row == 0 or int(dim) > 256:
                return False
            if not _tma_aligned(size, view.offset, batch, head, row):
                return False
        return self.max(k.kv_len) < 2**31

    def tma_operands(self, k: MatmulKernel) -> bool | None:
        """Whether TMA descriptors can read both operands of the product, and how: True when b is stored
        [N, K] (nn.Linear's weight, b's k stride 1), False when [K, N] (n stride 1); None when they cannot.
        A descriptor reads a 2-D tensor with unit inner stride from a 16-byte aligned address with row
        strides that are nonzero multiples of 16 bytes, and a gathered operand has no memory to read; the
        template handles one matrix (batch 1) and extents below 2^31."""
        if not (isinstance(k.a, StridedView) and isinstance(k.b, StridedView)) or k.batch != 1:
            return None
        size = DTYPES[self.operand_dtype(k.a)].itemsize
        if size != 2 or DTYPES[self.operand_dtype(k.b)].itemsize != 2:
            return None
        _, a_sm, a_sk = k.a.strides
        _, b_sk, b_sn = k.b.strides
        if a_sk != 1 or 1 not in (b_sk, b_sn):
            return None
        rows_n = b_sk == 1
        b_row = b_sn if rows_n else b_sk
        if any(self.max(e) >= 2**31 for e in (k.m, k.n, k.k)):
            return None
        aligned = _tma_aligned(size, k.a.offset, k.b.offset)
        strides = _tma_aligned(size, a_sm, b_row) and 0 not in (a_sm, b_row)
        return rows_n if aligned and strides else None

    def tma_writes_output(self, k: MatmulKernel) -> bool:
        """Whether a TMA descriptor can store the product's output tiles: the output is written contiguous (its rows
        `n` elements apart, half of them for a paired product) from the buffer's start, which the runtime aligns to
        64 bytes, so its rows must be whole multiples of 16 bytes at every size, of 2- or 4-byte elements."""
        size = DTYPES[self.program.buffers[k.output].dtype].itemsize
        columns = k.n / 2 if k.paired else k.n
        return k.batch == 1 and size in (2, 4) and _tma_aligned(size, columns) and self.max(k.m) < 2**31

    def operand_dtype(self, operand: Operand) -> str:
        """A matrix product operand's element type (a product's output may be wider: addmm's float32)."""
        return operand.dtype if isinstance(operand, GatheredOperand) else self.program.buffers[operand.buffer].dtype

    def render(self, kernel: Kernel) -> tuple[TritonKernel, tuple[sympy.Expr, ...]]:
        """The kernel at the table's configuration, or at the one tuning chose for its bucket; either rendered
        smaller where the compile stage found it does not fit a target's shared memory (`shrunk`)."""
        rendered, grid = super().render(kernel)
        if self.tuning is not None and self._forced is None:
            chosen = self.tuning.visit(self, kernel, rendered)
            if chosen is not None:
                rendered, grid = self.render_with(kernel, chosen)
        # Each smaller configuration names a new kernel, which may not fit either and then maps on in its turn.
        while rendered.name in self.shrunk:
            rendered, grid = self.render_with(kernel, self.shrunk[rendered.name])
        return rendered, grid

    def render_with(self, kernel: Kernel, config: MatmulConfig | AttentionConfig) -> tuple[TritonKernel, tuple[sympy.Expr, ...]]:
        """The kernel at `config` instead of the table's choice."""
        forced, self._forced = self._forced, config
        try:
            return super().render(kernel)
        finally:
            self._forced = forced

    def deciding_size(self, kernel: Kernel) -> sympy.Expr | None:
        """Matrix products get a variant per bucket of their rows, attention per bucket of its query rows. With
        programmatic dependent launch every other kernel gets one per bucket of its output's rows too, since
        whether it lets its successor launch early depends on them (`_launches_early`)."""
        rows = self._rows(kernel)
        if isinstance(kernel, (MatmulKernel, AttentionKernel)):
            return rows
        return rows if self.pdl and sympy.sympify(rows).free_symbols else None

    def _rows(self, kernel: Kernel) -> sympy.Expr:
        """The rows of a kernel's work: a product's rows, attention's query rows, else its output's rows (every
        dimension but the last; a vector's elements)."""
        if isinstance(kernel, MatmulKernel):
            return kernel.m
        if isinstance(kernel, AttentionKernel):
            return kernel.q_len
        shape = self.program.buffers[kernel.output].shape
        return product(shape[:-1]) if len(shape) > 1 else product(shape)

    def _launches_early(self, kernel: Kernel) -> bool:
        """Whether the kernel, right after its wait, lets its successor launch (programmatic dependent launch):
        where its bucket has at most EARLY_LAUNCH_ROWS rows. See EARLY_LAUNCH_ROWS."""
        return self.max(self._rows(kernel)) <= EARLY_LAUNCH_ROWS

    def _params(self, kernel: Kernel, exprs: list[sympy.Expr], has_errors: bool,
                constexprs: dict[str, int], split: bool = False) -> dict[str, Any]:
        args = self.args(kernel)
        signature = [("out" if i == len(args) - 1 else f"in{i}", POINTER_TYPE[self.program.buffers[b].dtype])
                     for i, b in enumerate(args)]
        symbols = self.used_symbols(exprs)
        signature += [(f"s_{s.name}", "i64") for s, _ in symbols]
        if has_errors:
            signature.append(("err_flag", "*i32"))
        if split:
            signature += [("split_count", "*i32"), ("split_part", "*fp32")]
        signature += [(name, "constexpr") for name in constexprs]
        return {"signature": signature, "symbols": [i for _, i in symbols],
                "params": ", ".join(n if t != "constexpr" else f"{n}: tl.constexpr" for n, t in signature)}

    def finish(self, kernel: Kernel, body: str, data: dict[str, Any]) -> tuple[TritonKernel, tuple[sympy.Expr, ...]]:
        """Named after its source and launch options; the launch data of its step is the grid."""
        meta = data["meta"]
        if self.pdl and "gdc_wait" not in body:  # a template that fetches before waiting places its own wait
            body = _with_grid_dependency_wait(body, self._launches_early(kernel))
        key = body + repr(sorted(meta["constexprs"].items())) + f"w{meta['num_warps']}s{meta['num_stages']}"
        name = "t_" + hashlib.sha256(key.encode()).hexdigest()[:16]
        rendered = TritonKernel(
            name=name, family=kernel.family, source=body.replace("KERNEL_NAME", name),
            signature=tuple(data["signature"]), constexprs=tuple(meta["constexprs"].items()),
            num_warps=meta["num_warps"], num_stages=meta["num_stages"], symbols=tuple(data["symbols"]),
            errors=tuple(meta["errors"]), pdl=self.pdl, persistent=bool(meta.get("persistent")),
            early_launch="_launch_dependents()" in body, l2_prefetch="_l2_prefetch(" in body,
            paired="acc_pair" in body,
            split_programs=meta.get("split_programs", 0), split_tile_bytes=meta.get("split_tile_bytes", 0),
            fallback=meta.get("fallback"), config=meta.get("config"))
        return rendered, meta["grid"]

    def prelude(self, kernels: list[RenderedKernel]) -> str:
        return self.env.get_template("prelude.py.jinja").render()

    def companions(self, kernel: RenderedKernel) -> tuple[RenderedKernel, ...]:
        return (kernel.fallback[0],) if isinstance(kernel, TritonKernel) and kernel.fallback else ()

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

    def pointwise(self, k: PointwiseKernel) -> tuple[str, dict[str, Any]]:
        return "pointwise.py.jinja", self._pointwise(k)

    def _pointwise(self, k: PointwiseKernel) -> dict[str, Any]:
        arg_names, sym_names = self.names(k)
        writer = body_writer(arg_names, sym_names, "xmask")
        value = writer.value(k.value)
        out_dtype = self.program.buffers[k.output].dtype
        numel = product(k.shape)
        xblock = min(1024, max(16, next_pow2(self.max(numel))))
        constexprs = {"XBLOCK": xblock}
        params = self._params(k, [*k.shape, *scalar.index_exprs(k.value)], bool(writer.checks), constexprs)
        return {
            **params, "numel": writer.index(numel), "indices": self._decompose("i", "x", k.shape, writer.index),
            "body": writer.lines, "checks": _checks(writer.checks), "store_value": self._store(value, out_dtype),
            "meta": {"constexprs": constexprs, "num_warps": 4 if xblock >= 512 else (2 if xblock >= 128 else 1),
                     "num_stages": 1, "errors": [c.what for c in writer.checks],
                     "grid": (_cdiv(numel, xblock), sympy.Integer(1), sympy.Integer(1))},
        }

    def reduction(self, k: ReductionKernel) -> tuple[str, dict[str, Any]]:
        return "reduction.py.jinja", self._reduction(k)

    def _reduction(self, k: ReductionKernel) -> dict[str, Any]:
        arg_names, sym_names = self.names(k)
        writer = body_writer(arg_names, sym_names, "rmask_all", zero="rzero")
        value = writer.value(k.value)
        xnumel, rnumel = product(k.shape), product(k.reduced)
        rblock = min(2048, max(16, next_pow2(self.max(rnumel))))
        xblock = max(1, min(next_pow2(self.max(xnumel)), 4096 // rblock, 64))
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

    def row(self, k: RowKernel) -> tuple[str, dict[str, Any]]:
        return "row.py.jinja", self._row(k)

    # A row kernel's program holds XBLOCK whole rows, each part's values a [XBLOCK, RBLOCK] block: about
    # ROW_ELEMENTS per program (as the reduction kernel's blocks), at most 64 rows, and a warp per 512 of
    # them (16 elements a thread per block), so a 16384-element row (ir/row_fusion.py's cap) takes 16 warps.
    ROW_ELEMENTS = 4096

    def _row(self, k: RowKernel) -> dict[str, Any]:
        """A row kernel (ir/row_fusion.py): RBLOCK covers the whole row, so each reduction is one masked fold
        of one block, its result rounded to its stored dtype (as the unfused program stored it) and kept as a
        [XBLOCK, 1] column that the later parts broadcast."""
        arg_names, sym_names = self.names(k)
        xnumel, rnumel = product(k.rows), product(k.reduced)
        rblock = max(16, next_pow2(self.max(rnumel)))
        if self.max(xnumel) <= ROW_PER_PROGRAM_ROWS:
            xblock, num_warps = 1, max(1, min(16, rblock // ROW_PER_PROGRAM_ELEMENTS))
        else:
            xblock = max(1, min(next_pow2(self.max(xnumel)), self.ROW_ELEMENTS // rblock, 64))
            num_warps = min(16, max(1, xblock * rblock // 512))
        constexprs = {"XBLOCK": xblock, "RBLOCK": rblock}
        # One writer for every part: a value the reductions and the pointwise pass share (the row's elements,
        # a gathered embedding) is loaded and computed once, and each index read from data checked once.
        writer = body_writer(arg_names, sym_names, "rmask_all", zero="rzero")
        parts = []
        exprs = [*k.rows, *k.reduced, *scalar.index_exprs(k.value)]
        for j, part in enumerate(k.reductions):
            lines, checks = len(writer.lines), len(writer.checks)
            value = writer.value(part.value)
            acc = _reduction_parts(part.op, part.acc_dtype)
            result, update = acc.pop("result"), acc.pop("update")
            rounded = result if part.out_dtype == "bool" else \
                f"({result}).to({TL_TYPE[part.out_dtype]}).to({COMPUTE_TL[part.out_dtype]})"
            parts.append({"name": f"res{j}", "op": part.op, "body": writer.lines[lines:],
                          "checks": _checks(writer.checks[checks:], first=checks + 1),
                          "value": f"({value}).to({acc['acc_type']})", **acc, "update": update.split("\n"),
                          "rounded": f"({rounded})[:, None]"})
            writer.bind(row_result(part.name, part.out_dtype), f"res{j}")
            exprs += scalar.index_exprs(part.value)
        lines, checks = len(writer.lines), len(writer.checks)
        value = writer.value(k.value)
        point_checks = _checks(writer.checks[checks:], first=checks + 1)
        checks = writer.checks
        params = self._params(k, exprs, bool(checks), constexprs)
        return {
            **params, "xnumel": writer.index(xnumel), "rnumel": writer.index(rnumel),
            "indices": self._decompose("i", "x", k.rows, writer.index),
            "rindices": self._decompose("r", "r", k.reduced, writer.index), "parts": parts,
            "body": writer.lines[lines:], "checks": point_checks,
            "store_value": self._store(value, self.program.buffers[k.output].dtype),
            "meta": {"constexprs": constexprs, "num_warps": num_warps, "num_stages": 1, "errors": [c.what for c in checks],
                     "grid": (_cdiv(xnumel, xblock), sympy.Integer(1), sympy.Integer(1))},
        }

    def scatter(self, k: ScatterKernel) -> tuple[str, dict[str, Any]]:
        return "scatter.py.jinja", self._scatter(k)

    def _scatter(self, k: ScatterKernel) -> dict[str, Any]:
        """Folding updates run in one program, one at a time and in order (deterministic, whatever repeats);
        assignments run in parallel, UBLOCK per program."""
        arg_names, sym_names = self.names(k)
        writer = body_writer(arg_names, sym_names, "umask", zero="uzero")
        value = writer.value(k.value)
        target = writer.offset(k.target)
        dtype = self.program.buffers[k.output].dtype
        numel = product(k.shape)
        serial = k.op != "assign"
        ublock = 1 if serial else min(1024, max(16, next_pow2(self.max(numel))))
        constexprs = {"UBLOCK": ublock}
        exprs = [*k.shape, *scalar.index_exprs(k.value), *scalar.index_exprs(k.target)]
        params = self._params(k, exprs, bool(writer.checks), constexprs)
        old = "(old != 0)" if dtype == "bool" else "old"
        if dtype == "bool":  # bool sums and maxima are "or", products and minima "and"
            fold = {"sum": "{a} | {b}", "prod": "{a} & {b}", "max": "{a} | {b}", "min": "{a} & {b}"}
        elif is_float(dtype):
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
        writer = body_writer(arg_names, names, f"{side}_mask", prefix=f"{side}g", zero=f"{side}_zero")
        value = writer.value(operand.value)
        return {"gather": True, "split": False, "lines": writer.lines, "value": value}, writer.checks

    def matmul(self, k: MatmulKernel) -> tuple[str, dict[str, Any]]:
        data = self._matmul(k)
        return data.pop("template"), data

    def _matmul(self, k: MatmulKernel) -> dict[str, Any]:
        arg_names, sym_names = self.names(k)
        writer = body_writer(arg_names, sym_names, "")

        dtypes = {self.operand_dtype(k.a), self.operand_dtype(k.b), k.dtype}
        if not dtypes <= {"float32", "float16", "bfloat16", "float64"}:
            raise UnsupportedError(f"a matrix product of {'/'.join(sorted(dtypes))} has no CUDA kernel yet "
                                   "(floating point only)")
        operand_dtype = self.operand_dtype(k.a)
        rows_n = self.tma_operands(k) if self.tma else None  # how TMA reads b; None: it cannot run here
        config = self._forced if isinstance(self._forced, MatmulConfig) else matmul_config(
            self.max(k.m), self.max(k.n), self.max(k.k), operand_dtype, self.arch, tma=rows_n is not None,
            store_bytes=_store_bytes(k))
        bm, bn, bk = config.bm, config.bn, config.bk
        constexprs = {"BM": bm, "BN": bn, "BK": bk, "GROUP_M": config.group_m}
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
            elif isinstance(operand, PanelView):
                # panels advance `width` elements per step of k; the template computes each panel's offset
                operands[side] = {"gather": False, "offset": "0", "strides": ["0", str(operand.width), "0"]}
                operands[f"{side}_name"] = arg_names[operand.buffer]
            else:
                exprs += [operand.offset, *operand.strides]
                operands[side] = {"gather": False, **self.view(operand, writer)}
                operands[f"{side}_name"] = arg_names[operand.buffer]
        epilogue = None
        if k.epilogue is not None:
            exprs += scalar.index_exprs(k.epilogue)
            epilogue, epilogue_checks = self._epilogue(k, arg_names, sym_names)
            epilogue["checks"] = _checks(epilogue_checks, first=len(checks) + 1)
            checks += epilogue_checks
            epilogue["early"], epilogue["lines"] = (_split_early(epilogue["lines"], PRODUCT_NAMES)
                                                    if self._loads_epilogue_early(k, config)
                                                    else ([], epilogue["lines"]))
        split = self._split(k, config)
        if split:
            constexprs["SPLIT_K"] = config.split_k
        operands["split_k"] = split
        operands["prefetch"] = self._weight_prefetch(k, config)
        if operands["prefetch"]:
            constexprs["PF_ROWS"] = operands["prefetch"]["rows"]
        operands["pdl_lines"] = _grid_dependency_lines(self._launches_early(k)) if self.pdl else []
        template = "matmul.py.jinja"
        grid = (_cdiv(k.m, bm) * _cdiv(k.n, bn), k.batch, sympy.Integer(config.split_k))
        operands["tma"] = None
        if config.tma:  # a tiled program loading through TMA descriptors
            if rows_n is None or split or config.persistent:
                raise UnsupportedError("a tiled product with TMA loads needs sm_90+ targets, operands TMA can read "
                                       "(tma_operands) and no split-K")
            operands["tma"] = {"b_rows_n": rows_n}
        operands["out_tma"] = config.tma_store
        if config.tma_store and not (config.persistent and self.tma_writes_output(k)):
            raise UnsupportedError("a product storing through TMA needs a persistent program and an output TMA can "
                                   "write (tma_writes_output)")
        if config.persistent:
            if rows_n is None:
                raise UnsupportedError("a persistent TMA matrix product needs sm_90+ targets and operands TMA can "
                                       "read (tma_operands)")
            constexprs["WARP_SPECIALIZE"] = int(config.warp_specialize)
            operands["b_rows_n"] = rows_n
            template = "matmul_persistent.py.jinja"
            # a program per SM of the architecture configurations are chosen for: on a GPU of fewer SMs some
            # take one tile more (correct, a little unbalanced)
            grid = (sympy.Min(grid[0], SM_COUNT.get(self.arch, min(SM_COUNT.values()))), sympy.Integer(1),
                    sympy.Integer(1))
        params = self._params(k, exprs, bool(checks), constexprs, split)
        compute = {"float64": "tl.float64", "float32": "tl.float32"}.get(operand_dtype)
        split_meta = {}
        if split:  # sized for the bucket's largest launch, which the runtime checks each launch against
            programs = -(-self.max(k.m) // bm) * -(-self.max(k.n) // bn) * self.max(k.batch) * config.split_k
            split_meta = {"split_programs": programs, "split_tile_bytes": bm * bn * 4,
                          "fallback": self.render_with(k, dataclasses.replace(config, split_k=1))}
        operands["row_sums"] = None
        if k.row_sums is not None:  # a folded norm's row sums (ir/norm_folding.py): this tile's share
            if k.paired:
                raise UnsupportedError("row sums of a paired product's output (ir/norm_folding.py folds none)")
            operands["row_sums"] = {"name": arg_names[k.row_sums], "group": ROW_SUM_GROUP,
                                    "groups": int(self.program.buffers[k.row_sums].shape[1])}
        return {"template": template,
            **params, "batch": writer.index(k.batch), "m": writer.index(k.m), "n": writer.index(k.n),
            "k": writer.index(k.k), "a_name": None, "b_name": None, **operands,
            # b laid out in panels by a layout pass (ir.kernels.PanelView): element (k, n) at
            # (n // 16) * 16K + 16k + n % 16, the template's panel arithmetic.
            "b_packed": isinstance(k.b, PanelView),
            "b_panel_k": k.b.k if isinstance(k.b, PanelView) else None,
            "operand_type": compute or TL_TYPE[operand_dtype],
            "precision": "ieee" if compute else "tf32",
            "acc_type": "tl.float64" if k.dtype == "float64" else "tl.float32",
            "epilogue": epilogue,
            "paired": k.paired,
            "store_value": self._store(epilogue["value"], self.program.buffers[k.output].dtype) if epilogue
            else self._store("acc", k.dtype),
            "meta": {"constexprs": constexprs, "num_warps": config.num_warps,
                     "num_stages": config.num_stages, "errors": [c.what for c in checks], "grid": grid,
                     "persistent": config.persistent, "config": config, **split_meta},
        }

    def _loads_epilogue_early(self, k: MatmulKernel, config: MatmulConfig) -> bool:
        """Whether the product's epilogue loads what it can before the k loop (_split_early): in a bucket of few
        rows, whose short loop waits on the latency of each load, so that the epilogue's loads (a bias from
        DRAM, a residual from L2) overlap the loop instead of following it; not where the values held across
        the loop would take more than EARLY_EPILOGUE_ELEMENTS registers a tile, nor in persistent programs,
        whose loop is over tiles."""
        return (self.max(k.m) <= EARLY_EPILOGUE_ROWS and config.bm * config.bn <= EARLY_EPILOGUE_ELEMENTS
                and not config.persistent)

    def _split(self, k: MatmulKernel, config: MatmulConfig) -> bool:
        """Whether the product runs split-K (config.split_k programs per tile): refused where its partial sums
        would not be float32 or its programs persistent."""
        if config.split_k == 1:
            return False
        if config.persistent or k.dtype == "float64" or config.split_k < 1:
            raise UnsupportedError(f"split-K {config.split_k} needs a tiled product with float32 accumulation")
        return True

    def _weight_prefetch(self, k: MatmulKernel, config: MatmulConfig) -> dict[str, int] | None:
        """How a few-row product fetches its program's columns of a weight b into L2 before it waits for the
        previous kernel, or None. Only with programmatic dependent launch does this overlap anything (the
        previous kernel's tail); only a weight is safe to read early (no kernel writes it). Where the bucket has
        more than one tile of rows, only the first tile's programs fetch (`first_row_tile_only`), so that each
        column is fetched once, the whole of the product's DRAM traffic. One fetch per 128-byte line of each
        column (`line` elements apart along k), `rows` of them per step of the loop."""
        b = k.b
        if not (self.pdl and isinstance(b, StridedView) and not config.persistent
                and self.program.buffers[b.buffer].kind == "weight" and self.max(k.m) <= PREFETCH_ROWS
                and self._launches_early(k) and sympy.sympify(b.strides[1]) == 1):
            return None
        # [N, K] storage (nn.Linear's weight read transposed): each of the program's columns is a run of K
        # elements. A [K, N] weight (GPT-2's Conv1D) would need a fetch per row of k, two per 128 bytes for
        # 32-column tiles; measured, that lost more than it hid (docs/performance.md).
        line = 128 // DTYPES[self.program.buffers[b.buffer].dtype].itemsize
        # lines fetched per column and step: a block size (constexpr PF_ROWS), so that the kernel's source does
        # not depend on its configuration (refit compares sources up to configurations)
        rows = min(next_pow2(-(-self.max(k.k) // line)), max(1, PREFETCH_POINTS // config.bn))
        return {"rows": rows, "line": line, "first_row_tile_only": self.max(k.m) > config.bm}

    def _epilogue(self, k: MatmulKernel, arg_names: dict[str, str],
                  sym_names: dict[sympy.Symbol, str]) -> tuple[dict[str, Any], list[Check]]:
        """The fused epilogue (ir/epilogue.py) on the tile: e0, e1, e2 are the program's batch, its rows and its
        columns; a load that varies along columns only (a bias) reads BN elements, not BM x BN."""
        e0, e1, e2 = epilogue_vars()

        def guard(load: Load) -> tuple[str, str]:
            used = load.index.free_symbols
            if not load.indirect and e1 not in used and e2 in used:
                return "nmask", "nzero"
            return "omask", "ozero"

        columns = "rno[None, :]" if k.paired else "rn[None, :]"  # a paired product's output columns (_matmul_store)
        writer = body_writer(arg_names, {**sym_names, e0: "bi", e1: "rm[:, None]", e2: columns}, "omask",
                             prefix="ep", zero="ozero", guard=guard)

        def rounded(acc: str) -> str:  # the product as the unfused program stored it
            return acc if k.dtype == "float32" else f"{acc}.to({TL_TYPE[k.dtype]}).to(tl.float32)"

        writer.bind(product_value(k.dtype), rounded("acc_own" if k.paired else "acc"))
        if k.paired:
            writer.bind(paired_value(k.dtype), rounded("acc_pair"))
        stats = []
        if k.row_stats is not None:  # a folded norm's row sums (ir/norm_folding.py): the row's groups added up
            groups = int(self.program.buffers[k.row_stats].shape[1])
            ptrs = (f"{arg_names[k.row_stats]} + (bi * M + rm)[:, None] * {2 * groups}"
                    f" + tl.arange(0, {next_pow2(groups)})[None, :] * 2")
            mask = f"(rm[:, None] < M) & (tl.arange(0, {next_pow2(groups)})[None, :] < {groups})"
            for power in (1, 2):
                stats.append(f"rstat{power} = tl.sum(tl.load({ptrs} + {power - 1}, mask={mask}, other=0.0), axis=1)[:, None]")
                writer.bind(row_stat(power), f"rstat{power}")
        value = writer.value(k.epilogue)
        return {"lines": stats + writer.lines, "value": value}, writer.checks

    def attention(self, k: AttentionKernel) -> tuple[str, dict[str, Any]]:
        return "attention.py.jinja", self._attention(k)

    def _attention(self, k: AttentionKernel) -> dict[str, Any]:
        arg_names, sym_names = self.names(k)
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

        writer = body_writer(arg_names, {**sym_names, **loop_vars}, "smask", prefix="m", zero="szero",
                                  guard=guard)
        score, live, neutral = "s", None, None
        if k.mask is not None:
            mask = writer.value(k.mask)
            score = f"tl.where({mask}, s, _NINF)" if k.mask.dtype == "bool" else f"s + ({mask}).to(tl.float32)"
            live = mask if k.mask.dtype == "bool" else f"({mask}).to(tl.float32) > {DEAD_SCORE!r}"
            # where the mask leaves the score exactly as it is (selected, or 0 added)
            neutral = mask if k.mask.dtype == "bool" else f"({mask}).to(tl.float32) == 0.0"
        additive = k.mask is not None and k.mask.dtype != "bool"
        # a positive scale with no mask adding to the scores folds into the exponential's argument
        fold_scale = repr(k.scale * LOG2_E) if k.scale > 0 and not additive else ""
        head_dim, value_dim = int(k.head_dim), int(k.value_dim)
        wide = k.dtype == "float32"
        bd, bdv = max(16, next_pow2(head_dim)), max(16, next_pow2(value_dim))
        config = self._forced if isinstance(self._forced, AttentionConfig) else attention_config(
            self.max(k.q_len), self.max(k.kv_len), head_dim, wide)
        bm, bn = config.bm, config.bn
        if config.tma and not (self.tma and self.attention_tma(k)):
            raise UnsupportedError("attention with TMA loads needs sm_90+ targets and keys and values TMA can read "
                                   "(attention_tma)")
        constexprs = {"BM": bm, "BN": bn, "BD": bd, "BDV": bdv}
        exprs = [k.heads, k.q_len, k.kv_len, *(scalar.index_exprs(k.mask) if k.mask is not None else ())]
        if k.causal:
            exprs.append(k.causal_offset)
        diagonal = f" + ({writer.index(k.causal_offset)})" if k.causal and k.causal_offset != 0 else ""
        views = {"q": k.q, "k": k.k, "v": k.v}
        for view in views.values():
            exprs += [view.offset, *view.strides]
        params = self._params(k, exprs, bool(writer.checks), constexprs)
        data = {**params, "heads": writer.index(k.heads), "group": str(int(k.heads) // int(k.kv_heads)),
                "q_len": writer.index(k.q_len), "kv_len": writer.index(k.kv_len), "head_dim": head_dim,
                "value_dim": value_dim, "scale": repr(k.scale), "causal": k.causal, "diagonal": diagonal,
                "mask": k.mask is not None, "skip_dead_keys": skips_dead_keys(k), "live": live, "neutral": neutral,
                "scan_blocks": min(SCAN_BLOCKS, next_pow2(-(-self.max(k.kv_len) // bn))),
                "mask_lines": writer.lines, "checks": _checks(writer.checks), "masked_score": score,
                "fold_scale": fold_scale, "log2_e": repr(LOG2_E), "tma": config.tma,
                "precision": "ieee" if wide else "tf32", "store_value": self._store("result", k.dtype),
                "meta": {"constexprs": constexprs, "num_warps": config.num_warps, "num_stages": config.num_stages,
                         "errors": [c.what for c in writer.checks], "config": config,
                         "grid": (_cdiv(k.q_len, bm), k.batch * k.heads, sympy.Integer(1))}}
        for name, view in views.items():
            data[name] = self.view(view, writer)
            data[f"{name}_name"] = arg_names[view.buffer]
        return data


def _split_early(lines: list[str], late_names: frozenset[str]) -> tuple[list[str], list[str]]:
    """A body's assignments (`name = expr`, in order) split into those that use none of `late_names` nor a
    name assigned from them, which may run earlier, and the rest, each part in its order."""
    return split_independent(lines, late_names, lambda line: (line.partition(" = ")[0], line.partition(" = ")[2]))


def _checks(checks: list[Check], first: int = 1) -> list[dict[str, Any]]:
    return [{"condition": c.condition, "code": first + i} for i, c in enumerate(checks)]


def _reduction_parts(op: str, acc_dtype: str) -> dict[str, str]:
    """The accumulator's type and initial value, the masked update of `acc` by `v`, and the final fold."""
    acc_type = COMPUTE_TL[acc_dtype]
    floating = is_float(acc_dtype)
    lowest = "_NINF" if floating else f"{DTYPES[acc_dtype].int_range[0]}"
    highest = "_INF" if floating else f"{DTYPES[acc_dtype].int_range[1]}"
    nan = " | (v != v)" if floating else ""
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
                "result": f"tl.reduce(acc, 1, _{op}_nan)" if floating else f"tl.{op}(acc, 1)"}
    if op in ("argmax", "argmin"):
        cmp = ">" if op == "argmax" else "<"
        first_nan = " | ((v != v) & (acc == acc))" if floating else ""
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


# Programmatic dependent launch (sm_90+): a kernel launched with it may start while the previous kernel on the
# stream finishes, so that the gap between two kernels in a CUDA graph (about 1 us on an H200 at GPT-2's one
# token, against kernels of 2-5 us) overlaps the previous kernel's tail. Each kernel therefore first waits for
# the previous one to finish and its memory to be visible (gdc_wait), so every read and write keeps its order.
# The wait is a no-op when a kernel is launched without it; ptxas refuses it before sm_90, so a package for an
# older architecture too has none (one source is compiled for every architecture of the package).
PDL_MIN_ARCH = 90
# A kernel whose bucket has at most this many rows signals right after its wait that its successor may launch
# (gdc_launch_dependents), so the successor's programs are resident, and its launch done, while it runs. Session
# 17 measured signalling in every kernel (H200, GPT-2 and the Llama shape, scripts/pdl_bench.py): 8-13% less
# wall time at 1 to 128 tokens than without PDL, but 3-8% more than the wait alone at 512, where the successor's
# early programs crowd the SMs the big tiles then need; above 128 rows a kernel therefore only waits.
EARLY_LAUNCH_ROWS = 128
# A product of at most this many rows reading a weight stored [N, K] fetches its columns of it into L2 before
# its wait (TritonRenderer._weight_prefetch): 3-6% less at the Llama shape's 1 and 16 tokens in session 17's runs.
# Raised past a bucket's tile of rows (scripts/pdl_bench.py's prefetch128, not yet timed), that bucket's first
# tile of rows fetches for the others.
PREFETCH_ROWS = 16
PREFETCH_POINTS = 1024  # addresses a program fetches per step of its fetch loop (8 a thread at 4 warps)
# A product's epilogue loads what does not need the product before its k loop (TritonRenderer._loads_epilogue_early)
# in buckets of at most this many rows, where its tile holds at most EARLY_EPILOGUE_ELEMENTS elements: 32 float32
# registers a thread at 4 warps for a residual tile.
EARLY_EPILOGUE_ROWS = 128
EARLY_EPILOGUE_ELEMENTS = 64 * 64
# A row kernel of a bucket of at most this many rows holds one row a program, with a warp per
# ROW_PER_PROGRAM_ELEMENTS of it (32 a thread), so that a 768- or 1024-wide norm reduces within one warp (shuffles,
# no shared memory or barrier between its two reductions) instead of across the 8 warps of four rows, three of
# them empty at one token.
ROW_PER_PROGRAM_ROWS = 16
ROW_PER_PROGRAM_ELEMENTS = 1024
PRODUCT_NAMES = frozenset({"acc", "acc_own", "acc_pair"})  # the template's names of the product in an epilogue
# Blocks of keys an attention kernel's scan for live keys (a padding mask's: skips_dead_keys) reads a step, at
# most (fewer where the keys are fewer): 16 x 64 keys are 8 mask values a thread at 4 warps.
SCAN_BLOCKS = 16
TMA_MIN_ARCH = 90  # the tensor memory accelerator: Hopper and later
LOG2_E = math.log2(math.e)  # exp(x) = exp2(x * log2(e)): the GPU's exponential is base 2


def _store_bytes(k: MatmulKernel) -> int:
    """Bytes per element of a product's output tile as its store stages it in shared memory: an epilogue works
    on the float32 accumulator; a plain product stores its output type."""
    return 4 if k.epilogue is not None else DTYPES[k.dtype].itemsize


def _multiple_of(expr: sympy.Expr, n: int) -> bool:
    """Whether an integer expression of the size symbols is a multiple of n at every value of them."""
    return bool((sympy.sympify(expr) / n).is_integer)


def _tma_aligned(itemsize: int, *elements: sympy.Expr) -> bool:
    """Whether each offset or stride, in elements of `itemsize` bytes, is a multiple of the 16 bytes a TMA
    descriptor's address and row strides must be, at every value of the size symbols."""
    return all(_multiple_of(e * itemsize, 16) for e in elements)


def _grid_dependency_lines(early: bool) -> list[str]:
    """A kernel's wait for its predecessor and, if `early`, after it its signal that its successor may launch."""
    return ["tl.extra.cuda.gdc_wait()", *(["_launch_dependents()"] if early else [])]


def _with_grid_dependency_wait(body: str, early: bool) -> str:
    lines = body.split("\n")
    at = next(i for i, line in enumerate(lines) if line.startswith("def ")) + 1
    return "\n".join([*lines[:at], *("    " + line for line in _grid_dependency_lines(early)), *lines[at:]])


def render_triton_library(program: Program, archs: tuple[int, ...] = (), tune: bool = False,
                          shrunk: Mapping[str, MatmulConfig | AttentionConfig] = {}) -> RenderedLibrary:
    """Every step of a program as Triton: the prelude, then each distinct kernel once. Configurations are
    chosen for the newest of `archs` (one source is compiled for them all): from the tables, or with `tune`,
    by timing candidates on this machine's GPU, which must be of that architecture (tuning.py); `shrunk` renders
    the kernels it names at smaller configurations (fit.py). With no architecture (Triton's interpreter) no
    kernel waits for programmatic dependent launch."""
    arch = max(archs) if archs else None
    pdl = bool(archs) and min(archs) >= PDL_MIN_ARCH
    tma = bool(archs) and min(archs) >= TMA_MIN_ARCH
    if not tune:
        return render_library(TritonRenderer(program, arch, pdl=pdl, tma=tma, shrunk=shrunk))
    from .tuning import tuned_library  # imports torch's CUDA side only when tuning

    return tuned_library(program, archs, lambda tuning: render_library(
        TritonRenderer(program, arch, tuning, pdl=pdl, tma=tma, shrunk=shrunk)))
