"""A Hopper attention kernel written in Triton's Gluon dialect, timed against torch's sdpa: a prototype.

    python scripts/gluon_attention_bench.py OUT_DIR [--kernels plain|ws]   # on a Hopper GPU: check, time variants
    python scripts/gluon_attention_bench.py --compile-only     # here: compile every variant for sm_90, no GPU

Why (docs/performance.md, "What issue 12's last targets need"): BERT's 7 ms at 8 x 2048 needs attention about 1.5x
faster than the template's (templates/triton/attention.py.jinja), which already runs BERT's padded shape 1.5x
faster than sdpa. The template's tl.dot loop leaves the tensor cores idle while the softmax of a block runs; on
Hopper, flash attention 3 overlaps them. Gluon states the overlap itself: the scores of block j + 1 are issued
as an asynchronous warpgroup MMA (wgmma) before the softmax of block j runs, and the product of block j's
probabilities with its values is in flight while the next block's softmax runs (`warpgroup_mma_wait(1)` keeps the
newest group outstanding). Keys and values come through TMA into a ring of shared-memory stages, each with its
own mbarrier. This script is the measurement that decides whether the template gets a Gluon twin; it is not on
the export path.

Shapes (--shapes): BERT's padded attention (8 x 12 heads x 2048, d64; sequence b keeps the benchmark's length,
keys past it masked), GPT-2's causal (1 x 12 x 2048, d64), the unpadded BERT shape and grouped-query causal
attention at head dim 128 (32 query heads, 8 key and value heads; the shape sdpa wins against the template). q, k
and v are read from one packed [B * S, (H + 2 * KVH) * D] tensor, as a fused qkv product leaves them, through 2D
TMA descriptors made in the kernel.

Written against Triton 3.6 and 3.9 alike (the GPU image has 3.6; this machine 3.9): the TMA load is looked up by
either name (renamed after 3.6), mbarrier.expect takes its byte count positionally (its keyword was renamed).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)

_tma_load = getattr(tma, "async_load", None) or tma.async_copy_global_to_shared
_cta_barrier = getattr(gl, "barrier", None) or gl.thread_barrier  # renamed after 3.6
_NEG_INF = gl.constexpr(float("-inf"))


@gluon.jit
def _masked(s, j0, kv_len, rows, BN: gl.constexpr, CAUSAL: gl.constexpr, s_layout: gl.constexpr):
    """The scores of the block of keys at j0 with keys past kv_len (and, causal, after the row) at -inf."""
    cols = j0 + gl.arange(0, BN, layout=gl.SliceLayout(0, s_layout))
    keep = gl.expand_dims(cols < kv_len, 0)
    if CAUSAL:
        keep = keep & (gl.expand_dims(cols, 0) <= gl.expand_dims(rows, 1))
    return gl.where(keep, s, _NEG_INF)


@gluon.jit
def _softmax_block(s, m_i, l_i, j0, unmasked_end, kv_end, rows, qk_scale_log2, BN: gl.constexpr,
                   CAUSAL: gl.constexpr, s_layout: gl.constexpr):
    """The block of keys at j0 folded into the online softmax: its probabilities (against the new row maximum),
    the factor that rescales what was summed before, the new row sums and maxima. Scores are raw dot products;
    the scale is folded into the exponent (exp2(x * c - max * c))."""
    if j0 + BN > unmasked_end:
        s = _masked(s, j0, kv_end, rows, BN, CAUSAL, s_layout)
    m_new = gl.maximum(m_i, gl.max(s, axis=1))
    m_safe = gl.where(m_new == _NEG_INF, 0.0, m_new) * qk_scale_log2  # every key masked so far: exp2(-inf) = 0
    alpha = gl.exp2(gl.where(m_i == _NEG_INF, 0.0, m_i) * qk_scale_log2 - m_safe)
    p = gl.exp2(s * qk_scale_log2 - gl.expand_dims(m_safe, 1))
    return p, alpha, l_i * alpha + gl.sum(p, axis=1), m_new


@gluon.jit
def _store_rows(acc, l_i, out_ptr, row0, m0, h, H, S, ROWS: gl.constexpr, D: gl.constexpr, o_layout: gl.constexpr):
    """acc / l_i into out[row0 + m0 + i, h, :] for the rows before S (a row with every key masked gets zeros)."""
    l_o = gl.convert_layout(l_i, gl.SliceLayout(1, o_layout))
    result = acc / gl.expand_dims(gl.where(l_o > 0, l_o, 1.0), 1)
    out_rows = m0 + gl.arange(0, ROWS, layout=gl.SliceLayout(1, o_layout))
    cols = gl.arange(0, D, layout=gl.SliceLayout(0, o_layout))
    offsets = ((row0 + gl.expand_dims(out_rows, 1)) * H + h) * D + gl.expand_dims(cols, 0)
    gl.store(out_ptr + offsets, result.to(out_ptr.dtype.element_ty), mask=gl.expand_dims(out_rows < S, 1))


@gluon.jit
def attention_fwd(qkv_ptr, out_ptr, lengths_ptr, total_rows, S, H, KVH, qk_scale_log2,
                  BM: gl.constexpr, BN: gl.constexpr, D: gl.constexpr, STAGES: gl.constexpr,
                  CAUSAL: gl.constexpr, OVERLAP: gl.constexpr):
    # the launch's num_warps (a launch option, not a parameter: Triton's launcher would bind it to the parameter
    # and compile for its default of 4)
    num_warps: gl.constexpr = gl.num_warps()
    dtype: gl.constexpr = gl.bfloat16
    if CAUSAL:
        pid_m = gl.num_programs(0) - 1 - gl.program_id(0)  # the longest rows first
    else:
        pid_m = gl.program_id(0)
    bh = gl.program_id(1)
    b = bh // H
    h = bh % H
    row0 = b * S  # this sequence's first row in the packed tensor
    m0 = pid_m * BM
    kv_len = gl.load(lengths_ptr + b)
    if CAUSAL:
        kv_end = gl.minimum(kv_len, m0 + BM)
        unmasked_end = gl.minimum(kv_len, m0) // BN * BN  # keys every row of the block sees, whole blocks
    else:
        kv_end = kv_len
        unmasked_end = kv_len // BN * BN
    n_blocks = gl.cdiv(kv_end, BN)

    smem_q: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BM, D], dtype)
    smem_kv: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BN, D], dtype)
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                       instr_shape=[16, BN, 16])
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                       instr_shape=[16, D, 16])
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    row_s: gl.constexpr = gl.SliceLayout(1, s_layout)
    row_o: gl.constexpr = gl.SliceLayout(1, o_layout)

    width = (H + 2 * KVH) * D  # q's H heads, then k's and v's KVH each (grouped-query attention: KVH < H)
    q_desc = tma.make_tensor_descriptor(qkv_ptr, [total_rows, width], [width, 1], [BM, D], smem_q)
    kv_desc = tma.make_tensor_descriptor(qkv_ptr, [total_rows, width], [width, 1], [BN, D], smem_kv)
    hk = h // (H // KVH)
    q_col = h * D
    k_col = H * D + hk * D
    v_col = (H + KVH) * D + hk * D

    q_smem = gl.allocate_shared_memory(dtype, [BM, D], smem_q)
    k_ring = gl.allocate_shared_memory(dtype, [STAGES, BN, D], smem_kv)
    v_ring = gl.allocate_shared_memory(dtype, [STAGES, BN, D], smem_kv)
    q_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    k_bars = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_bars = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    mbarrier.init(q_bar, count=1)
    for i in gl.static_range(STAGES):
        mbarrier.init(k_bars.index(i), count=1)
        mbarrier.init(v_bars.index(i), count=1)
    fence_async_shared()

    mbarrier.expect(q_bar, q_desc.block_type.nbytes)
    _tma_load(q_desc, [row0 + m0, q_col], q_bar, q_smem)
    for i in gl.static_range(STAGES):  # the first STAGES blocks of keys and values
        live = i < n_blocks
        mbarrier.expect(k_bars.index(i), kv_desc.block_type.nbytes, pred=live)
        _tma_load(kv_desc, [row0 + i * BN, k_col], k_bars.index(i), k_ring.index(i), pred=live)
        mbarrier.expect(v_bars.index(i), kv_desc.block_type.nbytes, pred=live)
        _tma_load(kv_desc, [row0 + i * BN, v_col], v_bars.index(i), v_ring.index(i), pred=live)

    rows = m0 + gl.arange(0, BM, layout=row_s)
    zero_s = gl.zeros([BM, BN], gl.float32, s_layout)
    acc = gl.zeros([BM, D], gl.float32, o_layout)
    mbarrier.wait(q_bar, 0)

    # block 0's scores and probabilities
    mbarrier.wait(k_bars.index(0), 0)
    s = warpgroup_mma(q_smem, k_ring.index(0).permute((1, 0)), zero_s, use_acc=False, is_async=True)
    s = warpgroup_mma_wait(0, deps=(s,))
    p, alpha, l_i, m_i = _softmax_block(s, gl.full([BM], _NEG_INF, gl.float32, row_s),
                                        gl.zeros([BM], gl.float32, row_s), 0, unmasked_end, kv_end, rows,
                                        qk_scale_log2, BN, CAUSAL, s_layout)

    for j in range(1, n_blocks):
        stage = j % STAGES
        prev = (j - 1) % STAGES
        mbarrier.wait(k_bars.index(stage), (j // STAGES) & 1)
        s = warpgroup_mma(q_smem, k_ring.index(stage).permute((1, 0)), zero_s, use_acc=False, is_async=True)
        mbarrier.wait(v_bars.index(prev), ((j - 1) // STAGES) & 1)
        p_op = gl.convert_layout(p.to(dtype), p_layout)
        acc = warpgroup_mma(p_op, v_ring.index(prev), acc, is_async=True)
        if OVERLAP:
            s = warpgroup_mma_wait(1, deps=(s,))  # the scores; the previous block's product stays in flight
        else:
            s, acc = warpgroup_mma_wait(0, deps=(s, acc))
        p, alpha, l_i, m_i = _softmax_block(s, m_i, l_i, j * BN, unmasked_end, kv_end, rows, qk_scale_log2, BN,
                                            CAUSAL, s_layout)
        if OVERLAP:
            acc = warpgroup_mma_wait(0, deps=(acc,))
        acc = acc * gl.expand_dims(gl.convert_layout(alpha, row_o), 1)
        # the previous block's stage is free (its scores and its product are done): the block STAGES on goes there.
        # With two warp groups, the other one may still be reading it: the load waits for every warp.
        if num_warps > 4:
            _cta_barrier()
        nxt = j - 1 + STAGES
        live = nxt < n_blocks
        mbarrier.expect(k_bars.index(prev), kv_desc.block_type.nbytes, pred=live)
        _tma_load(kv_desc, [row0 + nxt * BN, k_col], k_bars.index(prev), k_ring.index(prev), pred=live)
        mbarrier.expect(v_bars.index(prev), kv_desc.block_type.nbytes, pred=live)
        _tma_load(kv_desc, [row0 + nxt * BN, v_col], v_bars.index(prev), v_ring.index(prev), pred=live)

    last = (n_blocks - 1) % STAGES
    mbarrier.wait(v_bars.index(last), ((n_blocks - 1) // STAGES) & 1)
    p_op = gl.convert_layout(p.to(dtype), p_layout)
    acc = warpgroup_mma(p_op, v_ring.index(last), acc, is_async=True)
    acc = warpgroup_mma_wait(0, deps=(acc,))
    for i in gl.static_range(STAGES):
        mbarrier.invalidate(k_bars.index(i))
        mbarrier.invalidate(v_bars.index(i))
    mbarrier.invalidate(q_bar)
    _store_rows(acc, l_i, out_ptr, row0, m0, h, H, S, BM, D, o_layout)


# Warp-specialised: a one-warp producer partition issues every TMA load into the ring and waits for a stage to be
# released before refilling it; two consumer warp groups (the default partition and a 4-warp worker) each own 64 of
# the block's 128 rows and run the overlapped loop above, releasing each stage's keys once their scores are done
# and its values once their product is. The consumers never wait for each other, so one's softmax can run while
# the other's products hold the tensor cores (flash attention 3's ping-pong, here left to the warp schedulers).
@gluon.jit
def _ws_producer(q_desc, kv_desc, q_smem, k_ring, v_ring, q_bar, k_ready, v_ready, k_empty, v_empty,
                 row0, m0, q_col, k_col, v_col, n_blocks, HALF: gl.constexpr, BN: gl.constexpr,
                 STAGES: gl.constexpr):
    mbarrier.expect(q_bar, 2 * q_desc.block_type.nbytes)
    _tma_load(q_desc, [row0 + m0, q_col], q_bar, q_smem.index(0))
    _tma_load(q_desc, [row0 + m0 + HALF, q_col], q_bar, q_smem.index(1))
    for j in range(n_blocks):
        stage = j % STAGES
        free = ((j // STAGES) & 1) ^ 1  # a fresh barrier's phase 1 counts as complete: the first pass does not wait
        mbarrier.wait(k_empty.index(stage), free)
        mbarrier.expect(k_ready.index(stage), kv_desc.block_type.nbytes)
        _tma_load(kv_desc, [row0 + j * BN, k_col], k_ready.index(stage), k_ring.index(stage))
        mbarrier.wait(v_empty.index(stage), free)
        mbarrier.expect(v_ready.index(stage), kv_desc.block_type.nbytes)
        _tma_load(kv_desc, [row0 + j * BN, v_col], v_ready.index(stage), v_ring.index(stage))


@gluon.jit
def _ws_consumer(q_smem, k_ring, v_ring, q_bar, k_ready, v_ready, k_empty, v_empty, my_turn, other_turn, out_ptr,
                 row0, m0, h, H, S, kv_end, unmasked_end, n_blocks, qk_scale_log2, HALF: gl.constexpr,
                 BN: gl.constexpr, D: gl.constexpr, STAGES: gl.constexpr, CAUSAL: gl.constexpr,
                 PINGPONG: gl.constexpr, FIRST: gl.constexpr):
    dtype: gl.constexpr = gl.bfloat16
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BN, 16])
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, D, 16])
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    row_s: gl.constexpr = gl.SliceLayout(1, s_layout)
    row_o: gl.constexpr = gl.SliceLayout(1, o_layout)
    rows = m0 + gl.arange(0, HALF, layout=row_s)
    zero_s = gl.zeros([HALF, BN], gl.float32, s_layout)
    acc = gl.zeros([HALF, D], gl.float32, o_layout)
    mbarrier.wait(q_bar, 0)

    mbarrier.wait(k_ready.index(0), 0)
    s = warpgroup_mma(q_smem, k_ring.index(0).permute((1, 0)), zero_s, use_acc=False, is_async=True)
    s = warpgroup_mma_wait(0, deps=(s,))
    mbarrier.arrive(k_empty.index(0), count=1)
    p, alpha, l_i, m_i = _softmax_block(s, gl.full([HALF], _NEG_INF, gl.float32, row_s),
                                        gl.zeros([HALF], gl.float32, row_s), 0, unmasked_end, kv_end, rows,
                                        qk_scale_log2, BN, CAUSAL, s_layout)
    for j in range(1, n_blocks):
        stage = j % STAGES
        prev = (j - 1) % STAGES
        mbarrier.wait(k_ready.index(stage), (j // STAGES) & 1)
        mbarrier.wait(v_ready.index(prev), ((j - 1) // STAGES) & 1)
        p_op = gl.convert_layout(p.to(dtype), p_layout)
        if PINGPONG:  # the two consumers take turns at issuing their products (FIRST goes first)
            mbarrier.wait(my_turn, ((j - 1) & 1) ^ FIRST)
        s = warpgroup_mma(q_smem, k_ring.index(stage).permute((1, 0)), zero_s, use_acc=False, is_async=True)
        acc = warpgroup_mma(p_op, v_ring.index(prev), acc, is_async=True)
        if PINGPONG:
            mbarrier.arrive(other_turn, count=1)
        s = warpgroup_mma_wait(1, deps=(s,))
        mbarrier.arrive(k_empty.index(stage), count=1)
        p, alpha, l_i, m_i = _softmax_block(s, m_i, l_i, j * BN, unmasked_end, kv_end, rows, qk_scale_log2, BN,
                                            CAUSAL, s_layout)
        acc = warpgroup_mma_wait(0, deps=(acc,))
        mbarrier.arrive(v_empty.index(prev), count=1)
        acc = acc * gl.expand_dims(gl.convert_layout(alpha, row_o), 1)
    last = (n_blocks - 1) % STAGES
    mbarrier.wait(v_ready.index(last), ((n_blocks - 1) // STAGES) & 1)
    p_op = gl.convert_layout(p.to(dtype), p_layout)
    acc = warpgroup_mma(p_op, v_ring.index(last), acc, is_async=True)
    acc = warpgroup_mma_wait(0, deps=(acc,))
    mbarrier.arrive(v_empty.index(last), count=1)
    _store_rows(acc, l_i, out_ptr, row0, m0, h, H, S, HALF, D, o_layout)


@gluon.jit
def attention_fwd_ws(qkv_ptr, out_ptr, lengths_ptr, total_rows, S, H, KVH, qk_scale_log2,
                     BM: gl.constexpr, BN: gl.constexpr, D: gl.constexpr, STAGES: gl.constexpr,
                     CAUSAL: gl.constexpr, PINGPONG: gl.constexpr):
    dtype: gl.constexpr = gl.bfloat16
    HALF: gl.constexpr = BM // 2
    if CAUSAL:
        pid_m = gl.num_programs(0) - 1 - gl.program_id(0)
    else:
        pid_m = gl.program_id(0)
    bh = gl.program_id(1)
    b = bh // H
    h = bh % H
    row0 = b * S
    m0 = pid_m * BM
    kv_len = gl.load(lengths_ptr + b)
    if CAUSAL:
        kv_end = gl.minimum(kv_len, m0 + BM)
        unmasked_end = gl.minimum(kv_len, m0) // BN * BN
    else:
        kv_end = kv_len
        unmasked_end = kv_len // BN * BN
    n_blocks = gl.cdiv(kv_end, BN)
    smem_q: gl.constexpr = gl.NVMMASharedLayout.get_default_for([HALF, D], dtype)
    smem_kv: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BN, D], dtype)
    width = (H + 2 * KVH) * D
    q_desc = tma.make_tensor_descriptor(qkv_ptr, [total_rows, width], [width, 1], [HALF, D], smem_q)
    kv_desc = tma.make_tensor_descriptor(qkv_ptr, [total_rows, width], [width, 1], [BN, D], smem_kv)
    q_smem = gl.allocate_shared_memory(dtype, [2, HALF, D], smem_q)
    k_ring = gl.allocate_shared_memory(dtype, [STAGES, BN, D], smem_kv)
    v_ring = gl.allocate_shared_memory(dtype, [STAGES, BN, D], smem_kv)
    q_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    k_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    k_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    mbarrier.init(q_bar, count=1)
    for i in gl.static_range(STAGES):
        mbarrier.init(k_ready.index(i), count=1)
        mbarrier.init(v_ready.index(i), count=1)
        mbarrier.init(k_empty.index(i), count=2)  # both consumers release a stage
        mbarrier.init(v_empty.index(i), count=2)
    turns = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    mbarrier.init(turns.index(0), count=1)
    mbarrier.init(turns.index(1), count=1)
    fence_async_shared()
    hk = h // (H // KVH)
    q_col = h * D
    k_col = H * D + hk * D
    v_col = (H + KVH) * D + hk * D
    gl.warp_specialize([
        (_ws_consumer, (q_smem.index(0), k_ring, v_ring, q_bar, k_ready, v_ready, k_empty, v_empty, turns.index(0),
                        turns.index(1), out_ptr, row0, m0, h, H, S, kv_end, unmasked_end, n_blocks, qk_scale_log2,
                        HALF, BN, D, STAGES, CAUSAL, PINGPONG, 1)),
        (_ws_consumer, (q_smem.index(1), k_ring, v_ring, q_bar, k_ready, v_ready, k_empty, v_empty, turns.index(1),
                        turns.index(0), out_ptr, row0, m0 + HALF, h, H, S, kv_end, unmasked_end, n_blocks,
                        qk_scale_log2, HALF, BN, D, STAGES, CAUSAL, PINGPONG, 0)),
        (_ws_producer, (q_desc, kv_desc, q_smem, k_ring, v_ring, q_bar, k_ready, v_ready, k_empty, v_empty, row0, m0,
                        q_col, k_col, v_col, n_blocks, HALF, BN, STAGES)),
    ], [4, 1], [232, 24])


# (BM, BN, stages, warps, overlap): 64 rows a warp group
VARIANTS = [(64, 64, 2, 4, False), (64, 64, 2, 4, True), (64, 64, 3, 4, True), (64, 128, 2, 4, True),
            (128, 64, 3, 8, True), (128, 128, 2, 8, True), (128, 64, 2, 8, False)]
# the warp-specialised kernel: (BM, BN, stages); 4 warps a consumer, one producer warp
WS_VARIANTS = [(128, 64, 2, False), (128, 128, 2, False), (128, 64, 2, True), (128, 128, 2, True),
               (128, 128, 3, True)]

SHAPES = {  # name: (batch, heads, key and value heads, seq, head dim, causal, padded)
    "bert_padded_b8": (8, 12, 12, 2048, 64, False, True),
    "bert_b8": (8, 12, 12, 2048, 64, False, False),
    "gpt2_causal_b1": (1, 12, 12, 2048, 64, True, False),
    # scripts/gpu_attention_bench.py's gqa_causal_b1_d128: the shape where sdpa beats the template (0.82x, H100)
    "gqa_causal_b1_d128": (1, 32, 8, 2048, 128, True, False),
}

SIGNATURE = {"qkv_ptr": "*bf16", "out_ptr": "*bf16", "lengths_ptr": "*i32", "total_rows": "i32", "S": "i32",
             "H": "i32", "KVH": "i32", "qk_scale_log2": "fp32", "BM": "constexpr", "BN": "constexpr", "D": "constexpr",
             "STAGES": "constexpr", "CAUSAL": "constexpr", "OVERLAP": "constexpr"}

SIGNATURE_WS = {("PINGPONG" if k == "OVERLAP" else k): v for k, v in SIGNATURE.items()}


def kernels(which: str = "all") -> list[tuple[str, object, dict]]:
    """(label, kernel, launch constants) of the variants timed: "plain", "ws" (warp-specialised) or "all"."""
    out = []
    for bm, bn, stages, warps, overlap in VARIANTS if which in ("plain", "all") else ():
        label = f"{'overlapped' if overlap else 'serial'} {bm}x{bn}, {stages} stages, {warps} warps"
        out.append((label, attention_fwd, {"BM": bm, "BN": bn, "STAGES": stages, "OVERLAP": overlap, "num_warps": warps}))
    for bm, bn, stages, pingpong in WS_VARIANTS if which in ("ws", "all") else ():
        label = f"warp-specialised{' ping-pong' if pingpong else ''} {bm}x{bn}, {stages} stages, 2 x 4 + 1 warps"
        out.append((label, attention_fwd_ws, {"BM": bm, "BN": bn, "STAGES": stages, "PINGPONG": pingpong, "num_warps": 4}))
    return out


def compile_for_sm90(kernel, constants: dict, d: int, causal: bool):
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

    constants = dict(constants, D=d, CAUSAL=causal)
    warps = constants.pop("num_warps")
    attrs = {(0,): [["tt.divisibility", 16]], (1,): [["tt.divisibility", 16]]}
    signature = SIGNATURE_WS if kernel is attention_fwd_ws else SIGNATURE
    source = GluonASTSource(kernel, signature, constants, attrs)
    return triton.compile(source, target=GPUTarget("cuda", 90, 32), options={"num_warps": warps})


def registers(kernel) -> str:
    import os
    import re
    import subprocess
    import tempfile

    from triton.backends.nvidia import compiler as nvidia

    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(kernel.asm["cubin"])
        f.flush()
        tool = os.path.join(os.path.dirname(nvidia.__file__), "bin", "cuobjdump")
        usage = subprocess.run([tool, "--dump-resource-usage", f.name], capture_output=True, text=True, check=True).stdout
    return " ".join(re.findall(r"REG:\d+|LOCAL:\d+", usage))


def compile_only() -> int:
    for d, causal in ((64, False), (64, True), (128, True)):
        for label, kernel, constants in kernels():
            start = time.perf_counter()
            try:
                compiled = compile_for_sm90(kernel, constants, d, causal)
            except Exception as error:  # noqa: BLE001 (too much shared memory at d128, say: reported, not fatal)
                print(f"triton {triton.__version__} d={d} causal={causal} {label}: {type(error).__name__}: "
                      f"{str(error)[:200]}", flush=True)
                continue
            print(f"triton {triton.__version__} d={d} causal={causal} {label}: {compiled.metadata.num_warps} warps, shared "
                  f"{compiled.metadata.shared} B, {registers(compiled)}, {time.perf_counter() - start:.1f} s",
                  flush=True)
    return 0


def bert_lengths(batch: int, seq: int) -> list[int]:
    """examples/bert/model.py padded_inputs' lengths, which the GPU benchmark runs."""
    return [max(1, seq - (b + 1) * seq // (2 * batch)) for b in range(batch)]


def split_heads(qkv, batch, heads, kv_heads, seq, d):
    """q [B, H, S, D] and k, v [B, KVH, S, D] of the packed tensor (views)."""
    q, k, v = qkv.view(batch, seq, heads + 2 * kv_heads, d).split([heads, kv_heads, kv_heads], dim=2)
    return q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)


def reference(qkv, lengths, batch, heads, kv_heads, seq, d, causal):
    import torch

    q, k, v = split_heads(qkv.float(), batch, heads, kv_heads, seq, d)
    k, v = k.repeat_interleave(heads // kv_heads, dim=1), v.repeat_interleave(heads // kv_heads, dim=1)
    scores = (q @ k.transpose(-1, -2)) / math.sqrt(d)
    keep = torch.arange(seq, device=qkv.device)[None, :] < lengths[:, None].to(qkv.device)  # [B, S] keys
    keep = keep[:, None, None, :]
    if causal:
        keep = keep & torch.ones(seq, seq, dtype=torch.bool, device=qkv.device).tril()
    probs = torch.softmax(scores.masked_fill(~keep, float("-inf")), dim=-1)
    return (probs @ v).permute(0, 2, 1, 3)  # [B, S, H, D]


def run_gpu(out_dir: Path, which: str, shapes: list[str]) -> int:
    import torch

    triton.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8, device="cuda"))
    results = []
    out_dir.mkdir(parents=True, exist_ok=True)
    for name in shapes:
        batch, heads, kv_heads, seq, d, causal, padded = SHAPES[name]
        torch.manual_seed(0)
        qkv = torch.randn(batch * seq, (heads + 2 * kv_heads) * d, device="cuda", dtype=torch.bfloat16)
        lengths = torch.tensor(bert_lengths(batch, seq) if padded else [seq] * batch, dtype=torch.int32,
                               device="cuda")
        want = reference(qkv, lengths, batch, heads, kv_heads, seq, d, causal)
        q, k, v = split_heads(qkv, batch, heads, kv_heads, seq, d)
        mask = None
        if padded:
            mask = (torch.arange(seq, device="cuda")[None, :] < lengths[:, None])[:, None, None, :]

        def sdpa(q=q, k=k, v=v, mask=mask, causal=causal):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal,
                                                                    enable_gqa=k.shape[1] != q.shape[1])

        sdpa_err = (sdpa().float().permute(0, 2, 1, 3) - want).abs().max().item()
        sdpa_ms = triton.testing.do_bench_cudagraph(sdpa, rep=200)
        row = {"shape": name, "sdpa_ms": round(sdpa_ms, 4), "sdpa_max_err": sdpa_err, "variants": []}
        print(f"{name}: sdpa {sdpa_ms:.4f} ms (max err {sdpa_err:.2e})", flush=True)
        for label, kernel, constants in kernels(which):
            out = torch.empty(batch, seq, heads, d, device="cuda", dtype=torch.bfloat16)
            grid = (triton.cdiv(seq, constants["BM"]), batch * heads)

            def launch(out=out, kernel=kernel, constants=constants, grid=grid, qkv=qkv, lengths=lengths, rows=batch * seq,
                       seq=seq, heads=heads, kv_heads=kv_heads, d=d, causal=causal):
                kernel[grid](qkv, out, lengths, rows, seq, heads, kv_heads, math.log2(math.e) / math.sqrt(d), D=d,
                             CAUSAL=causal, **constants)

            entry = {"variant": label}
            try:
                out.fill_(float("nan"))
                launch()
                torch.cuda.synchronize()
                err = (out.float() - want).abs().max().item()
                entry["max_err"] = err
                entry["ms"] = round(triton.testing.do_bench_cudagraph(launch, rep=200), 4)
                entry["vs_sdpa"] = round(sdpa_ms / entry["ms"], 3)
                print(f"  {label}: {entry['ms']:.4f} ms, {entry['vs_sdpa']:.2f}x sdpa's speed, max err {err:.2e}",
                      flush=True)
            except Exception as error:  # noqa: BLE001 (a variant that fails to compile or launch is reported, not fatal)
                entry["error"] = f"{type(error).__name__}: {error}"[:500]
                print(f"  {label}: {entry['error']}", flush=True)
            row["variants"].append(entry)
        results.append(row)
        (out_dir / f"gluon_attention_{which}.json").write_text(json.dumps(
            {"gpu": torch.cuda.get_device_name(), "triton": triton.__version__, "torch": torch.__version__,
             "results": results}, indent=1))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out_dir", nargs="?", type=Path)
    parser.add_argument("--compile-only", action="store_true", help="compile every variant for sm_90 (no GPU)")
    parser.add_argument("--kernels", choices=("plain", "ws", "all"), default="all",
                        help="which variants to time (a hang in one group, under a timeout, spares the other's results)")
    parser.add_argument("--shapes", default=",".join(SHAPES), help=f"comma-separated, of {', '.join(SHAPES)}")
    args = parser.parse_args(argv)
    if args.compile_only:
        return compile_only()
    if args.out_dir is None:
        parser.error("OUT_DIR is needed to run on a GPU")
    return run_gpu(args.out_dir, args.kernels, args.shapes.split(","))


if __name__ == "__main__":
    sys.exit(main())
