"""A few-row product's epilogue loads (templates/triton/_matmul_store.py.jinja, render.py
_loads_epilogue_early): in a bucket of at most EARLY_EPILOGUE_ROWS rows, the loads of the epilogue that do not
need the product (a bias, a residual) and what is computed from them alone run before the k loop, so that their
latency overlaps it; what needs the product stays after the loop. Bigger buckets and persistent programs keep
the whole epilogue after the loop. The results are checked in Triton's interpreter by the split-K and paired
products' tests (their tiles and sizes fall in few-row buckets) and on the GPU by tests/gpu."""

from __future__ import annotations

import dataclasses

import sympy
from aotpack.lowering.backends.cuda import render
from aotpack.lowering.backends.cuda.matmul_config import MatmulConfig
from aotpack.lowering.backends.cuda.render import EARLY_EPILOGUE_ROWS, render_triton_library
from aotpack.lowering.codegen.library import render_library
from aotpack.lowering.ir.kernels import Buffer, epilogue_vars, product_value
from aotpack.lowering.ir.scalar import Load, Op, cast
from aotpack.lowering.ir.symbolic import size_symbol
from test_triton_buckets import _linear


def _with_bias_and_residual(hi: int = 2048):
    """out = x @ w^T + bias + residual, with the residual [rows, 2304] an input; rows 1..hi."""
    s = size_symbol("s")
    program = _linear(s, 2304, 768, "bfloat16", hi)
    bias = Buffer("bias", "bfloat16", (sympy.Integer(2304),), "weight", "bias")
    residual = Buffer("res", "bfloat16", (s, sympy.Integer(2304)), "input", "res")
    _, e1, e2 = epilogue_vars()
    def wide(node):
        return cast(node, "float32")

    value = Op("add", (Op("add", (wide(product_value("bfloat16")), wide(Load("bias", e2, "bfloat16"))), "float32"),
                       wide(Load("res", e1 * 2304 + e2, "bfloat16"))), "float32")
    step = dataclasses.replace(program.steps[0], epilogue=value)
    return dataclasses.replace(program, buffers={**program.buffers, "bias": bias, "res": residual}, steps=(step,),
                               inputs=("x", "res"), weights={"w": None, "bias": None})


def _bodies(library):
    kernels = {k.name: k.source for k in library.kernels}
    variants = library.variants_of(0)
    found = [(v.upto, kernels[v.kernel]) for v in variants.variants] if variants else []
    return [*found, (None, kernels[library.step_kernels[0]])]


def _loop_at(body: str) -> int:
    """Where the k loop starts: over k0, or over a split slice's k_step."""
    return min(at for at in (body.find("for k0 in range("), body.find("for k_step in range(")) if at >= 0)


def test_few_row_buckets_load_the_epilogue_before_the_k_loop_and_add_the_product_after():
    assert EARLY_EPILOGUE_ROWS == 128
    buckets = _bodies(render_triton_library(_with_bias_and_residual(), (90,)))
    assert [upto for upto, _ in buckets] == [16, 128, 512, None]
    for upto, body in buckets:
        # the kernel reads x, w, then the epilogue's residual and bias (in2, in3)
        residual, bias = body.index("tl.load(in2 + "), body.index("tl.load(in3 + ")
        assert body.index(" = acc.to(") > _loop_at(body)  # the product itself: after the loop
        if upto is not None and upto <= EARLY_EPILOGUE_ROWS:
            assert bias < _loop_at(body) and residual < _loop_at(body)
            assert body.index("tl.extra.cuda.gdc_wait()") < residual  # an activation: read after the wait
            assert body.count("omask = ") == 1 and body.index("omask = ") < _loop_at(body)
        else:
            assert bias > _loop_at(body) and residual > _loop_at(body)


def test_a_tile_too_big_to_hold_its_epilogue_across_the_loop_loads_it_after(monkeypatch):
    program = _with_bias_and_residual(hi=128)  # one bucket: the step's own kernel is a few-row one
    for config, early in ((MatmulConfig(64, 64, 64, 8, 4, 4), True), (MatmulConfig(64, 128, 64, 8, 4, 4), False),
                          (MatmulConfig(16, 32, 128, 8, 4, 4, split_k=4), True)):
        monkeypatch.setattr(render, "matmul_config", lambda *args, config=config, **kwargs: config)
        body = render_library(render.TritonRenderer(program, 90, pdl=True)).kernels[0].source
        assert (body.index("tl.load(in2 + ") < _loop_at(body)) == early, config
