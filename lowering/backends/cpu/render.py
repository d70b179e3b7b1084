"""The data each kernel family's template in templates/cpp/ gets, through the codegen core (codegen/).

Python decides what to compute and hands the templates plain data (names, C++ expressions as strings,
loop bounds, block sizes); the templates hold all the C++ structure, spelling.py the C++ of bodies and
sizes. A kernel's name is the hash of its rendered body, so identical kernels (a model's repeated layers)
collapse into one function.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any

import sympy

from ....errors import UnsupportedError
from ...codegen.body import BodyWriter, split_independent
from ...codegen.counters import count_divisions
from ...codegen.library import KernelRenderer, RenderedKernel, RenderedLibrary, render_library
from ...codegen.peeling import peel
from ...codegen.printer import to_json
from ...ir import scalar
from ...ir.dtypes import code as dtype_code
from ...ir.dtypes import is_float
from ...ir.kernels import (
    AttentionKernel,
    GatheredOperand,
    Kernel,
    MatmulKernel,
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
    writes,
)
from ...ir.mask_structure import DEAD_SCORE, skips_dead_keys
from ...ir.symbolic import contiguous_strides, flat_offset, index_var
from .spelling import (
    COMPUTE_CTYPE,
    STORAGE_CTYPE,
    body_writer,
    counted_loop,
    load_from_storage,
    store_to_storage,
    to_cpp,
    widen_to_float,
)


@dataclass(frozen=True)
class KernelArg:
    """What a kernel does with one argument, for the library's kernel table (aotpack_kernel_abi.h): whether it
    writes it, and the buffer it was generated for (the runtime checks each step's buffers against these)."""

    writes: bool
    dtype: str
    shape: str  # the buffer's shape in program.json's JSON form, compact


@dataclass(frozen=True)
class CppKernel(RenderedKernel):
    scratch_bytes: int = 0  # per-thread scratch it takes from the runtime (kernel ABI thread_scratch)
    args: tuple[KernelArg, ...] = ()


class CppRenderer(KernelRenderer):
    """Kernel IR -> C++ kernels: one method per kernel family, returning its template and data."""

    language = "cpp"
    language_name = "C++"

    def _common(self, kernel: Kernel, exprs: list[sympy.Expr]) -> dict[str, Any]:
        args = self.args(kernel)
        written = writes(kernel)
        arg_data = []
        for i, buffer in enumerate(args):
            dtype = self.program.buffers[buffer].dtype
            is_out = i == len(args) - 1
            arg_data.append({"cname": "out" if is_out else f"in{i}", "ctype": STORAGE_CTYPE[dtype],
                             "qualifier": "" if buffer in written else "const "})
        symbols = [{"cname": f"s_{s.name}", "index": i} for s, i in self.used_symbols(exprs)]
        return {"args": arg_data, "symbols": symbols, "output": "out"}

    def contract(self, kernel: Kernel) -> tuple[KernelArg, ...]:
        """Each argument's access and buffer: what it reads, then what it writes."""
        written = writes(kernel)
        return tuple(KernelArg(b in written, self.program.buffers[b].dtype,
                               json.dumps([to_json(d) for d in self.program.buffers[b].shape], separators=(",", ":")))
                     for b in self.args(kernel))

    def finish(self, kernel: Kernel, body: str, data: dict[str, Any]) -> tuple[CppKernel, None]:
        # Named by its body and its arguments' contract, so that steps share a kernel only where the table's one
        # entry describes every one of them.
        contract = self.contract(kernel)
        key = body + "".join(f"\n{a.writes} {a.dtype} {a.shape}" for a in contract)
        name = "k_" + hashlib.sha256(key.encode()).hexdigest()[:16]
        return CppKernel(name, kernel.family, body.replace("KERNEL_NAME", name), self.scratch_bytes(kernel),
                         contract), None

    def prelude(self, kernels: list[RenderedKernel]) -> str:
        scratch = max((k.scratch_bytes for k in kernels), default=0)
        return self.env.get_template("prelude.h.jinja").render(scratch_bytes=scratch)

    def epilogue(self, kernels: list[RenderedKernel]) -> str:
        """The kernel table: every kernel with its arguments' contract, and the symbols they were made for."""
        entries = [{"name": k.name, "scratch_bytes": k.scratch_bytes,
                    "args": [{"access": "AOTPACK_ACCESS_WRITE" if a.writes else "AOTPACK_ACCESS_READ",
                              "dtype": dtype_code(a.dtype), "shape": json.dumps(a.shape)} for a in k.args]}
                   for k in kernels if isinstance(k, CppKernel)]
        symbols = [{"name": json.dumps(s.name), "min": s.min, "max": s.max} for s in self.program.symbols]
        return self.env.get_template("kernel_table.cpp.jinja").render(kernels=entries, symbols=symbols)

    def pointwise(self, k: PointwiseKernel) -> tuple[str, dict[str, Any]]:
        arg_names, sym_names = self.names(k)
        row_var = index_var("i", len(k.shape) - 1)  # the innermost loop's variable, where there are 2+ dims
        inner = frozenset({row_var}) if len(k.shape) >= 2 else frozenset()
        writer = body_writer(arg_names, sym_names, inner)
        value = writer.value(k.value)
        out_dtype = self.program.buffers[k.output].dtype
        loop_var = frozenset({row_var.name})
        peeled, range_data = peel(k.value, row_var) if inner else None, None
        if peeled is not None:
            middle = writer.sibling("u")
            middle_value = middle.value(peeled.body)
            invariant, body = _split_invariant(middle.lines, loop_var)
            range_data = {"lower": [writer.index(b) for b in peeled.lower],
                          "upper": [writer.index(b) for b in peeled.upper], "invariant": invariant, "body": body,
                          "store_value": store_to_storage(middle_value, out_dtype)}
        # What does not vary along the row (a channel's scale and shift) is computed once before its loop.
        invariant, body = _split_invariant(writer.lines, loop_var) if inner else ([], writer.lines)
        outer_strides = contiguous_strides(k.shape[:-1])
        loops = [{"var": f"i{d}", "size": writer.index(s),
                  "stride": writer.index(outer_strides[d]) if d < len(outer_strides) else "1"}
                 for d, s in enumerate(k.shape)]
        store_index = writer.split_index(
            sum((index_var("i", d) * st for d, st in enumerate(contiguous_strides(k.shape))), sympy.Integer(0)))
        data = self._common(k, [*k.shape, *scalar.index_exprs(k.value)])
        data.update(loops=loops, body=body, invariant=invariant, hoisted=writer.hoisted, store_index=store_index,
                    store_value=store_to_storage(value, out_dtype), peeled=range_data)
        return "pointwise.cpp.jinja", data

    def reduction(self, k: ReductionKernel) -> tuple[str, dict[str, Any]]:
        arg_names, sym_names = self.names(k)
        writer = body_writer(arg_names, sym_names, frozenset(index_var("r", d) for d in range(len(k.reduced))))
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
        return "reduction.cpp.jinja", data

    def row(self, k: RowKernel) -> tuple[str, dict[str, Any]]:
        """A row kernel (ir/row_fusion.py): per row, each reduction as the reduction template folds it (the
        same lanes, so the same sums), its result rounded to its stored dtype, then the pointwise pass."""
        arg_names, sym_names = self.names(k)
        rvars = frozenset(index_var("r", d) for d in range(len(k.reduced)))
        strides = contiguous_strides(k.rows)
        index = body_writer(arg_names, sym_names).index
        loops = [{"var": f"i{d}", "size": index(s), "stride": index(st)}
                 for d, (s, st) in enumerate(zip(k.rows, strides))]
        rloops = [{"var": f"r{d}", "size": index(s)} for d, s in enumerate(k.reduced)]
        ridx = index(flat_offset("r", k.reduced))
        earlier: list[tuple[Any, str]] = []  # (row_result load, its C++ name) of the results computed so far
        parts = []
        exprs = [*k.rows, *k.reduced, *scalar.index_exprs(k.value)]
        for j, part in enumerate(k.reductions):
            writer = body_writer(arg_names, sym_names, rvars)
            for node, name in earlier:
                writer.bind(node, name)
            value = writer.value(part.value)
            acc_ctype = COMPUTE_CTYPE[part.acc_dtype]
            init, combine, result = _reduction_parts(part.op, part.acc_dtype)
            out_ctype = COMPUTE_CTYPE[part.out_dtype]
            # rounded to its stored dtype, as the unfused program stored it for its readers
            rounded = load_from_storage(store_to_storage(result, part.out_dtype), part.out_dtype)
            parts.append({"name": f"res{j}", "op": part.op, "body": writer.lines,
                          "hoisted": writer.hoisted, "value": f"static_cast<{acc_ctype}>({value})",
                          "acc_ctype": acc_ctype, "init": init, "combine": combine,
                          "combine_lane": combine.replace("acc", "part[l]"), "out_ctype": out_ctype,
                          "rounded": f"static_cast<{out_ctype}>({rounded})"})
            earlier.append((row_result(part.name, part.out_dtype), f"res{j}"))
            exprs += scalar.index_exprs(part.value)
        writer = body_writer(arg_names, sym_names, rvars)
        for node, name in earlier:
            writer.bind(node, name)
        value = writer.value(k.value)
        data = self._common(k, exprs)
        data.update(loops=loops, rloops=rloops, ridx=ridx, parts=parts, body=writer.lines, hoisted=writer.hoisted,
                    lanes=REDUCTION_LANES if len(k.reduced) == 1 else 0,
                    store_value=store_to_storage(value, self.program.buffers[k.output].dtype))
        return "row.cpp.jinja", data

    def scatter(self, k: ScatterKernel) -> tuple[str, dict[str, Any]]:
        arg_names, sym_names = self.names(k)
        writer = body_writer(arg_names, sym_names)
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
        return "scatter.cpp.jinja", data

    # Cache blocking of the float matmul (templates/cpp/matmul.cpp.jinja): a task's tile is MC rows (a
    # multiple of the micro-kernel's 6) by NC columns (a multiple of 16), packed KC steps of k at a time.
    MATMUL_BLOCKS = {"mc": 192, "nc": 256, "kc": 256}

    def scratch_bytes(self, kernel: Kernel) -> int:
        """Per-thread scratch the kernel takes from the runtime (kernel ABI thread_scratch)."""
        if isinstance(kernel, MatmulKernel) and kernel.dtype in ("float32", "float16", "bfloat16"):
            b = self.MATMUL_BLOCKS
            # a gathered b's column offsets, a flag per 16-column strip, its row offsets
            column_offsets = 8 * (b["nc"] + b["nc"] // 16 + b["kc"]) if isinstance(kernel.b, GatheredOperand) else 0
            return 4 * (b["mc"] * b["kc"] + b["kc"] * b["nc"] + b["mc"] * b["nc"]) + column_offsets
        if isinstance(kernel, AttentionKernel):
            bm, bn = self.ATTENTION_BLOCKS["bm"], self.ATTENTION_BLOCKS["bn"]
            d, dvp = int(kernel.head_dim), _round_up(int(kernel.value_dim), 16)
            return 4 * (bm * d + bn * d + bm * bn + bn * dvp + bm * dvp + 2 * bm)
        return 0

    def matmul(self, k: MatmulKernel) -> tuple[str, dict[str, Any]]:
        fast = k.dtype in ("float32", "float16", "bfloat16")
        return "matmul.cpp.jinja" if fast else "matmul_generic.cpp.jinja", self._matmul(k)

    def _matmul(self, k: MatmulKernel) -> dict[str, Any]:
        arg_names, sym_names = self.names(k)
        writer = body_writer(arg_names, sym_names)
        exprs = [k.batch, k.m, k.n, k.k]
        for operand in (k.a, k.b):
            if isinstance(operand, GatheredOperand):
                exprs += scalar.index_exprs(operand.value)
            elif isinstance(operand, StridedView):
                exprs += [operand.offset, *operand.strides]
        if k.epilogue is not None:
            exprs += scalar.index_exprs(k.epilogue)
        data = self._common(k, exprs)
        data.update(batch=writer.index(k.batch), m=writer.index(k.m), n=writer.index(k.n), k=writer.index(k.k),
                    a_gather=isinstance(k.a, GatheredOperand), b_gather=isinstance(k.b, GatheredOperand),
                    b_split=False, b_rows_in_place=False, dot_rows=False, **self._epilogue(k, arg_names, sym_names))
        if isinstance(k.a, GatheredOperand) or isinstance(k.b, GatheredOperand):
            if k.dtype not in ("float32", "float16", "bfloat16"):
                raise UnsupportedError(f"a {k.dtype} matrix product with a gathered operand reached code "
                                       "generation; this is an aotpack bug (GATHER_DTYPES, frontend/ops/linalg.py)")
            return self._matmul_gathered(k, data, arg_names, sym_names)
        a_dtype = self.program.buffers[k.a.buffer].dtype
        b_dtype = self.program.buffers[k.b.buffer].dtype
        data.update(a=self.view(k.a, writer), b=self._memory_view(k.b, writer), a_ctype=STORAGE_CTYPE[a_dtype],
                    b_ctype=STORAGE_CTYPE[b_dtype], a_name=arg_names[k.a.buffer], b_name=arg_names[k.b.buffer])
        if k.dtype in ("float32", "float16", "bfloat16"):
            a_elem = "row[k]" if k.a.strides[2] == 1 else "row[k * a_sk]"
            data.update(self.MATMUL_BLOCKS,
                        load_a=f"static_cast<float>({load_from_storage(a_elem, a_dtype)})",
                        load_b_at=widen_to_float(b_dtype), b_n_contiguous=_unit_stride(k.b, 2),
                        b_packed=isinstance(k.b, PanelView), a_rows=a_dtype == "float32" and k.a.strides[2] == 1,
                        dot_rows=_unit_stride(k.b, 1) and k.a.strides[2] == 1,
                        load_a_at=widen_to_float(a_dtype))
            return data
        acc = "double" if k.dtype == "float64" else "int64_t"
        a_elem = f"{arg_names[k.a.buffer]}[a_off + bi * a_sb + (m0 + i) * a_sm + kk * a_sk]"
        b_elem = "brow[j]" if k.b.strides[2] == 1 else "brow[j * b_sn]"
        data.update(mb=4, nb=256, acc_ctype=acc,
                    load_a=f"static_cast<{acc}>({load_from_storage(a_elem, a_dtype)})",
                    load_b=f"static_cast<{acc}>({load_from_storage(b_elem, b_dtype)})",
                    store=store_to_storage("acc[i][j]", k.dtype))
        return data

    def _epilogue(self, k: MatmulKernel, arg_names: dict[str, str], sym_names: dict[sympy.Symbol, str]) -> dict[str, Any]:
        """How the float template stores an element of the product (`tile[i * NC + j]`): as is, or through the
        fused epilogue (ir/epilogue.py), computed per element with e1, e2 its row and column."""
        out_dtype = self.program.buffers[k.output].dtype
        element = "tile[i * NC + 2 * j]" if k.paired else "tile[i * NC + j]"
        sums = None
        if k.row_sums is not None:  # a folded norm's row sums (ir/norm_folding.py), per 16 of the tile's columns
            if k.paired:
                raise UnsupportedError("row sums of a paired product's output (ir/norm_folding.py folds none)")
            sums = {"name": arg_names[k.row_sums], "groups": int(self.program.buffers[k.row_sums].shape[1]),
                    "load": load_from_storage("dst[j]", out_dtype)}
        if k.epilogue is None:
            return {"out_ctype": STORAGE_CTYPE[out_dtype], "store": store_to_storage(element, out_dtype),
                    "epilogue_lines": None, "paired": False, "row_sums": sums, "row_lines": []}
        e0, e1, e2 = epilogue_vars()
        writer = body_writer(arg_names, {**sym_names, e0: "bi", e1: "e1", e2: "e2"})

        def rounded(value: str) -> str:  # the product rounded to its dtype, as the unfused program stored it
            return load_from_storage(store_to_storage(value, k.dtype), k.dtype) if k.dtype != "float32" else value

        writer.bind(product_value(k.dtype), rounded(element))
        if k.paired:
            writer.bind(paired_value(k.dtype), rounded("tile[i * NC + 2 * j + 1]"))
        stats = []
        if k.row_stats is not None:  # a folded norm's row sums (ir/norm_folding.py): the row's groups added up
            groups, name = int(self.program.buffers[k.row_stats].shape[1]), arg_names[k.row_stats]
            stats = ["float rstat1 = 0.0f, rstat2 = 0.0f;",
                     f"for (int64_t g = 0; g < {groups}; ++g) {{",
                     f"  rstat1 += {name}[(bi * M + e1) * {2 * groups} + 2 * g];",
                     f"  rstat2 += {name}[(bi * M + e1) * {2 * groups} + 2 * g + 1];",
                     "}"]
            writer.bind(row_stat(1), "rstat1")
            writer.bind(row_stat(2), "rstat2")
        value = writer.value(k.epilogue)
        per_row, per_element = _split_row_invariant(writer.lines)
        return {"out_ctype": STORAGE_CTYPE[out_dtype], "store": store_to_storage(value, out_dtype),
                "epilogue_lines": per_element, "paired": k.paired, "row_sums": sums, "row_lines": stats + per_row}

    def _memory_view(self, operand: StridedView | PanelView, writer: BodyWriter) -> dict[str, Any]:
        """A memory operand's offset and strides; panels (b_packed) are addressed by the template itself."""
        if isinstance(operand, PanelView):
            return {"offset": "0", "strides": ["0", "0", "0"]}
        return self.view(operand, writer)

    def _matmul_gathered(self, k: MatmulKernel, data: dict[str, Any], arg_names: dict[str, str],
                         sym_names: dict[sympy.Symbol, str]) -> dict[str, Any]:
        """The float matmul with a gathered operand (implicit GEMM): the packing loops evaluate its expression
        straight into the panels the micro-kernel reads, instead of copying them from memory."""
        g0, g1, g2 = operand_vars()
        names = {**sym_names, g0: "bi", g1: "g1", g2: "g2"}
        data.update(self.MATMUL_BLOCKS, b_packed=isinstance(k.b, PanelView))
        writer = body_writer(arg_names, names)
        for side, operand in (("a", k.a), ("b", k.b)):
            if not isinstance(operand, GatheredOperand):
                dtype = self.program.buffers[operand.buffer].dtype
                data.update({side: self._memory_view(operand, writer), f"{side}_ctype": STORAGE_CTYPE[dtype],
                             f"{side}_name": arg_names[operand.buffer]})
                if side == "a":
                    a_elem = "row[k]" if operand.strides[2] == 1 else "row[k * a_sk]"
                    data.update(load_a=f"static_cast<float>({load_from_storage(a_elem, dtype)})",
                                a_rows=dtype == "float32" and operand.strides[2] == 1)
                else:
                    data.update(load_b_at=widen_to_float(dtype), b_n_contiguous=_unit_stride(operand, 2))
                continue
            data.update({side: {"offset": "0", "strides": ["0", "0", "0"]}, f"{side}_name": None})
            if side == "a":
                data.update(a_rows=False)
            split = split_gather(operand, g1) if side == "b" else None
            if split is not None:
                load, col, row = split
                dtype = self.program.buffers[load.buffer].dtype
                data.update(b_split=True, b_name=arg_names[load.buffer], b_ctype=STORAGE_CTYPE[dtype],
                            load_b_at=widen_to_float(dtype), b_rows_in_place=dtype == "float32",
                            b_row_offset=to_cpp(row, names),
                            b_col_lines=counted_loop(count_divisions(col, g2, "col_"), names, "c", "nb", "g2", "n0",
                                                     "coff[c] = $value;"))
                continue
            element = body_writer(arg_names, names)
            value = element.value(operand.value)
            data.update({f"{side}_lines": element.lines, f"{side}_value": f"static_cast<float>({value})"})
        return data

    # A task of the attention kernel (templates/cpp/attention.cpp.jinja) owns BM query rows (a multiple of the
    # micro-kernel's 6) and walks the keys BN (a multiple of 16) at a time. Each task packs every key and value
    # block it reads, so taller tasks pack less per score: at seq 2048, 12 heads of dim 64, causal, one thread,
    # BM 96 took 167 ms where BM 48 took 230 and BM 24 283 (BN 128 changed little; eager took about 130).
    ATTENTION_BLOCKS = {"bm": 96, "bn": 64}

    def attention(self, k: AttentionKernel) -> tuple[str, dict[str, Any]]:
        arg_names, sym_names = self.names(k)
        loop_vars = {index_var("i", d): f"i{d}" for d in range(4)}
        writer = body_writer(arg_names, {**sym_names, **loop_vars}, frozenset({index_var("i", 3)}))
        score, live = "srow[j]", None
        if k.mask is not None:
            mask = writer.value(k.mask)
            score = f"({mask} ? {score} : -INFINITY)" if k.mask.dtype == "bool" else f"{score} + static_cast<float>({mask})"
            live = f"({mask})" if k.mask.dtype == "bool" else f"static_cast<float>({mask}) > {DEAD_SCORE!r}f"
        diagonal = _diagonal(k, writer)
        if k.causal:
            score = f"(i3 > i2{diagonal} ? -INFINITY : {score})"
        views = {"q": k.q, "k": k.k, "v": k.v}
        dtypes = {name: self.program.buffers[view.buffer].dtype for name, view in views.items()}
        exprs = [k.batch, k.heads, k.q_len, k.kv_len]
        for view in views.values():
            exprs += [view.offset, *view.strides]
        if k.mask is not None:
            exprs += scalar.index_exprs(k.mask)
        if k.causal:
            exprs.append(k.causal_offset)
        data = self._common(k, exprs)
        data.update(self.ATTENTION_BLOCKS, batch=writer.index(k.batch), heads=writer.index(k.heads),
                    group=str(int(k.heads) // int(k.kv_heads)), q_len=writer.index(k.q_len),
                    kv_len=writer.index(k.kv_len), head_dim=int(k.head_dim), value_dim=int(k.value_dim),
                    value_dim_padded=_round_up(int(k.value_dim), 16), scale=f"{k.scale!r}f", causal=k.causal,
                    diagonal=diagonal,
                    mask=k.mask is not None, mask_lines=writer.lines, mask_hoisted=writer.hoisted,
                    skip_dead_keys=skips_dead_keys(k), live=live,
                    masked_score=score, out_ctype=STORAGE_CTYPE[k.dtype],
                    store=store_to_storage("acc[i * DVP + d] * inv", k.dtype))
        for name, view in views.items():
            element = {"q": "qb[i * q_si + d * q_sd]", "k": "row[d * k_sd]", "v": "row[d * v_sd]"}[name]
            data.update({name: self.view(view, writer), f"{name}_ctype": STORAGE_CTYPE[dtypes[name]],
                         f"{name}_name": arg_names[view.buffer],
                         f"load_{name}": f"static_cast<float>({load_from_storage(element, dtypes[name])})"})
        return "attention.cpp.jinja", data


def _diagonal(k: AttentionKernel, writer: BodyWriter) -> str:
    """` + offset` of causal attention's diagonal in the kernel's spelling, "" for the main diagonal."""
    if not k.causal or k.causal_offset == 0:
        return ""
    return f" + ({writer.index(k.causal_offset)})"


def _unit_stride(operand: StridedView | PanelView, dim: int) -> bool:
    """Whether a memory operand's elements are contiguous along `dim` (never for panels, read as panels)."""
    return isinstance(operand, StridedView) and operand.strides[dim] == 1


def _round_up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


# Partial accumulators of a reduction over one dim: 8 floats fill one AVX2 register.
REDUCTION_LANES = 8


def _reduction_parts(op: str, acc_dtype: str) -> tuple[str, str, str]:
    """(initial value, C++ statement folding `v` into `acc`, the stored result) of a reduction."""
    ctype = COMPUTE_CTYPE[acc_dtype]
    floating = is_float(acc_dtype)
    lowest = f"-std::numeric_limits<{ctype}>::infinity()" if floating else f"std::numeric_limits<{ctype}>::lowest()"
    highest = f"std::numeric_limits<{ctype}>::infinity()" if floating else f"std::numeric_limits<{ctype}>::max()"
    nan_check = " || v != v" if floating else ""
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
        first_nan = " || (v != v && acc == acc)" if floating else ""
        init = lowest if op == "argmax" else highest
        return init, f"if (v {cmp} acc{first_nan}) {{ acc = v; best = ridx; }}", "best"
    if op == "any":
        return "false", "acc = acc || v;", "acc"
    if op == "all":
        return "true", "acc = acc && v;", "acc"
    raise UnsupportedError(f"reduction {op} has no C++ form")


def render_cpp_library(program: Program) -> RenderedLibrary:
    """The whole C++ kernel library of a program: prelude, then each distinct kernel once."""
    return render_library(CppRenderer(program))



_ASSIGNMENT = re.compile(r"const [\w:<>]+ (\w+) = (.*);")
_PER_ELEMENT = frozenset({"j", "e2", "tile", "dst"})  # what the float template's epilogue varies along a row


def _assignment(line: str) -> tuple[str, str] | None:
    match = _ASSIGNMENT.fullmatch(line)
    return match.groups() if match else None


def _split_row_invariant(lines: list[str]) -> tuple[list[str], list[str]]:
    """An epilogue's statements split into those that depend only on the row (a folded norm's scale from the
    row's sums), computed once per row before the loop over its columns, and the rest."""
    return split_independent(lines, _PER_ELEMENT, _assignment)


def _split_invariant(lines: list[str], loop_var: frozenset[str]) -> tuple[list[str], list[str]]:
    """A loop body's statements split into those that do not depend on `loop_var` and the rest. g++ leaves
    the first kind in a loop it cannot prove free of aliasing (restrict is lost inside the kernel's lambda),
    and recomputes a channel's 1 / sqrt(var + eps) for every vector of a batch norm's row."""
    return split_independent(lines, loop_var, _assignment)
