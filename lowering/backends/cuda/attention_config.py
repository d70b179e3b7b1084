"""Block configurations of the Triton attention kernel: the table's choice, and the candidates export tunes.

Without a GPU at export the table chooses (matmul_config.py's counterpart). Half operands: 64 x 64 blocks,
4 warps, 3 stages was the fastest of the configurations that scripts/gpu_attention_bench.py tries on an H200,
at head dims 64 and 128, causal or masked: at seq 2048, 1.3-1.4x faster than 128-row blocks with 8 warps for
causal attention, level with them for a padding mask. float32 operands take twice the shared memory and
registers: at head dims above 64, 32 keys per block.

The kernel can also load its blocks of keys and values through the tensor memory accelerator (`tma`:
descriptors the kernel makes in its global scratch, out-of-bounds elements read as zero) instead of masked
pointer loads, where the layout allows it (render.py `attention_tma`). Neither the table nor tuning offers
it: on the H200 (session 30, scripts/gpu_attention_bench.py at seq 2048) each of TMA_CANDIDATES was 8-24%
slower than the same blocks with pointer loads for BERT's padded, GPT-2's causal and the Llama shape's GQA
attention, with identical outputs, and a candidate that never wins only costs export time (each is compiled).
The benchmark still times them ("tma" lines).
"""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class AttentionConfig:
    bm: int  # query rows per program
    bn: int  # keys per block of the loop
    num_warps: int
    num_stages: int
    tma: bool = False  # keys and values loaded through TMA descriptors (Hopper; see the module's docstring)


def _pow2(n: int) -> int:
    return 1 if n <= 1 else 1 << (int(n) - 1).bit_length()


def attention_config(q_max: int, kv_max: int, head_dim: int, wide: bool) -> AttentionConfig:
    """The table's blocks for at most q_max query rows and kv_max keys."""
    bd = max(16, _pow2(head_dim))
    bm = min(64, max(16, _pow2(q_max)))
    bn = min(32 if wide and bd > 64 else 64, max(16, _pow2(kv_max)))
    return AttentionConfig(bm, bn, 4, 2 if wide else 3)


# The fewest pipeline stages smaller_attention_config gives: the next block of keys and values loading while
# the previous one is used (float32 attention's table has two).
MIN_STAGES = 2


def smaller_attention_config(config: AttentionConfig, stages: int | None = None) -> AttentionConfig | None:
    """The next smaller configuration than `config` in shared memory, for attention whose compiled block needs
    more than some target gives one (fit.py): a pipeline stage fewer (each holds a block of keys and one of
    values), down to MIN_STAGES; then the block halved along its longer side (the keys on a tie: they are what
    every stage holds), no side below tl.dot's 16, at most 4 warps below 128 query rows as in the table, with
    `stages` again (the stages of the configuration first shrunk; default: as many as now). None when nothing
    is smaller."""
    if config.num_stages > MIN_STAGES:
        return replace(config, num_stages=config.num_stages - 1)
    if max(config.bm, config.bn) <= 16:
        return None
    bm, bn = (config.bm // 2, config.bn) if config.bm > config.bn else (config.bm, config.bn // 2)
    return replace(config, bm=bm, bn=bn, num_warps=config.num_warps if bm >= 128 else min(config.num_warps, 4),
                   num_stages=config.num_stages if stages is None else stages)


# (BM, BN, warps, stages) that scripts/gpu_attention_bench.py found competitive on an H200 for some shape
HALF_CANDIDATES = ((64, 64, 4, 3), (64, 64, 4, 2), (64, 64, 4, 4), (128, 64, 8, 2), (128, 64, 4, 3),
                   (128, 64, 8, 3), (128, 128, 8, 3), (64, 32, 4, 3), (64, 128, 4, 3))


# The blocks scripts/gpu_attention_bench.py times with TMA loads: the table's, its deeper pipeline, and the
# 128-row shape (two warp groups) that was nearest to it with pointer loads.
TMA_CANDIDATES = ((64, 64, 4, 3), (64, 64, 4, 4), (128, 64, 8, 2))


def attention_candidates(q_max: int, kv_max: int, head_dim: int, wide: bool) -> list[AttentionConfig]:
    """What tuning times: the table's choice first, then the other blocks that fit the sizes (pointer loads: see
    the module's docstring on TMA). float32 attention keeps the table's choice (its blocks are bounded by shared
    memory, not tuned)."""
    chosen = attention_config(q_max, kv_max, head_dim, wide)
    if wide:
        return [chosen]

    def fit(c: tuple[int, ...]) -> bool:
        return c[0] <= max(16, _pow2(q_max)) and c[1] <= max(16, _pow2(kv_max)) and not (head_dim > 128 and c[1] > 64)

    fits = [AttentionConfig(*c) for c in HALF_CANDIDATES if fit(c)]
    return list(dict.fromkeys([chosen, *fits]))
