"""Tile configurations of the Triton matrix product, per bucket of its rows (M) and per GPU architecture.

Without a GPU at export the configuration comes from this table, so a cross-compiled package is tuned too.
The rule aims at the two regimes a declared range spans:

- Few rows (up to 16): the product reads each weight once and is bound by memory and by how many SMs take
  part. 16-row tiles (tl.dot's smallest), as wide as still gives the grid a program per two SMs, with a deep
  K step (128) to keep bytes in flight. The full-range tile (128 x 128) at M = 1 gives GPT-2's 768-column
  products 6 programs on a 132-SM H200: the weights then stream through 6 SMs. Where even the narrowest
  tile leaves the grid short of that (768 or 1024 columns), each program streams a longer slice of the
  weights, and its K loop's serial load latency dominates: a deeper K step (256, or 512 past K = 1024)
  halves or quarters the loop's trips.
- More rows: the largest tile (up to 128 x 256, 8 warps, 3 stages: the tensor cores' regime) that still
  gives the grid a program per two SMs.
- Hopper (sm_90 and later, every target architecture), products whose operands the tensor memory
  accelerator (TMA) can read (render.py `tma_operands`): persistent programs that load through TMA
  descriptors (templates/triton/matmul_persistent.py.jinja), one program per SM walking the output tiles.
  The table chooses them where they measured faster (`_persistent_tiles`: from 2048 rows, and vocabulary
  products from 129); tuning times them from TMA_MIN_ROWS rows, and tiled programs loading through TMA
  too (TILED_TMA_CANDIDATES, which no table chooses: slower than their pointer-load twins alone on the
  H200, chosen by tuning in a few buckets where they measured faster in the model; session 30).

SM counts per architecture size the grid target; an unknown architecture gets the smallest listed.
scripts/gpu_matmul_bench.py measures these choices against other tiles and against cuBLAS.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

SM_COUNT = {80: 108, 86: 84, 89: 128, 90: 132, 100: 148, 120: 170}


@dataclass(frozen=True)
class MatmulConfig:
    bm: int
    bn: int
    bk: int
    group_m: int
    num_warps: int
    num_stages: int
    # one program per SM walking the tiles, operands loaded through TMA descriptors (sm_90+); with
    # warp_specialize, Triton splits each program into producer (loads) and consumer (tensor core) warps
    persistent: bool = False
    warp_specialize: bool = False
    # split-K: SPLIT_K programs per output tile, each summing one slice of the depth; the last of them to
    # finish adds their partial sums in a fixed order and stores the tile (templates/triton/matmul.py.jinja)
    split_k: int = 1
    # a tiled program (one tile each) loading its operands through TMA descriptors, as the persistent ones do
    # (sm_90+; tuning's candidates only: TILED_TMA_CANDIDATES)
    tma: bool = False
    # a persistent program storing each output tile through a TMA descriptor: an asynchronous copy from shared
    # memory that Triton's pipeliner leaves in flight while the program loads and multiplies its next tile
    # (sm_90+; tuning's candidates only: PERSISTENT_TMA_STORE_CANDIDATES)
    tma_store: bool = False


def _pow2(n: int) -> int:
    return 1 if n <= 1 else 1 << (int(n) - 1).bit_length()


def _tiles(m: int, n: int, bm: int, bn: int) -> int:
    return -(-m // bm) * -(-n // bn)


# (BM, BN, BK, warps, stages) from the largest tile down. Measured on an H200 (bf16; scripts/gpu_matmul_bench.py
# --sweep over GPT-2's, BERT's and the Llama shape's projections at M = 1 .. 16384, docs/performance.md): the
# first tile of this order that gives the grid at least half as many programs as the GPU has SMs came within
# 1.02x on average (1.18x at worst) of the fastest of 12 tile configurations at each point. 16-row tiles only
# for up to 16 rows, where they are the tiles that read the weights once; taller products never use them.
HALF_TILES = ((128, 256, 64, 8, 3), (128, 128, 64, 8, 3), (64, 128, 64, 4, 4), (64, 64, 64, 4, 4),
              (64, 32, 128, 4, 4), (16, 64, 128, 4, 4), (16, 32, 128, 4, 4), (16, 16, 128, 4, 4))
# float32 operands take twice the shared memory and registers per element: half the tile area, not measured.
WIDE_TILES = ((64, 64, 32, 4, 3), (64, 32, 64, 4, 4), (32, 64, 64, 4, 4), (32, 32, 64, 4, 4), (16, 32, 64, 4, 4),
              (16, 16, 64, 4, 4))


def matmul_config(m: int, n: int, k: int, dtype: str, arch: int | None, tma: bool = False,
                  store_bytes: int = 4) -> MatmulConfig:
    """The tiles for a product of at most m rows, n columns and depth k (the bucket's largest sizes); `tma`:
    the renderer's word that every target is sm_90+ and TMA can read both operands; `store_bytes`: the bytes
    per element of the output tile as its store stages it (4 with an epilogue, which works on the float32
    accumulator; else the output's)."""
    wide = dtype in ("float32", "float64")
    persistent = _persistent_tiles(m, n, k, arch, store_bytes) if tma and not wide else None
    if persistent is not None:
        bm, bn, bk, warps, stages = persistent
        return MatmulConfig(bm, bn, min(bk, _pow2(k)), 8, warps, stages, persistent=True)
    sms = SM_COUNT.get(arch, min(SM_COUNT.values())) if arch is not None else min(SM_COUNT.values())
    # no taller or wider than the product (rounded up to a power of two, at least tl.dot's 16); 16-row tiles
    # exactly when there are at most 16 rows
    tiles = WIDE_TILES if wide else HALF_TILES
    fits = [t for t in tiles if t[0] <= max(16, _pow2(m)) and t[1] <= max(16, _pow2(n)) and (t[0] == 16) == (m <= 16)]
    fits = fits or [t for t in tiles if t[1] <= max(16, _pow2(n))]  # fewer than 32 columns: 16-wide tiles
    enough = [t for t in fits if _tiles(m, n, t[0], t[1]) >= sms / 2]
    bm, bn, bk, warps, stages = enough[0] if enough else fits[-1]
    if bm == 16 and not enough and not wide and k >= SPLIT_MIN_DEPTH and _tiles(m, n, *SPLIT_TABLE[:2]) * SPLIT_TABLE[5] <= 2 * sms:
        return MatmulConfig(*SPLIT_TABLE[:3], 8, *SPLIT_TABLE[3:5], split_k=SPLIT_TABLE[5])
    if (SPLIT_ROWS_TABLE_MIN < m and not wide and k >= SPLIT_MIN_DEPTH
            and _tiles(m, n, *SPLIT_ROWS_TABLE[:2]) * SPLIT_ROWS_TABLE[5] <= sms):
        return MatmulConfig(*SPLIT_ROWS_TABLE[:3], 8, *SPLIT_ROWS_TABLE[3:5], split_k=SPLIT_ROWS_TABLE[5])
    if bm == 16 and not enough and not wide:
        # H200, scripts/gpu_matmul_bench.py --sweep --rows 1,16 (weights read from DRAM): GPT-2's MLP down
        # (768 x 3072) 9.2 -> 7.1 us at BK 512, its attention output (768 x 768) 3.5 -> 3.4 and the Llama
        # shape's q (1024 x 1024) 4.0 -> 3.7 at BK 256; tiles with enough programs were as fast at BK 128.
        bk, stages = (256, 4) if k <= 1024 else (512, 3)
    return MatmulConfig(bm, bn, min(bk, max(16, _pow2(k))), 8, warps, stages)


# Tiles tuning times besides the table's choice (half operands): the table's own tiles, taller and deeper
# variants of the large ones (the Hopper regime between 512 and 16384 rows, where the table's tiles ran at
# 62-94% of cuBLAS), 4-warp versions of the medium ones, and deeper K steps of the few-row ones (the
# fastest at 5 of the sweep's 12 few-row points). (BM, BN, BK, warps, stages).
HALF_CANDIDATES = (*HALF_TILES, (128, 256, 64, 8, 4), (256, 128, 64, 8, 3), (128, 128, 64, 4, 4),
                   (128, 128, 128, 8, 3), (128, 64, 64, 4, 4), (64, 256, 64, 8, 3), (64, 128, 64, 4, 3),
                   (16, 16, 256, 4, 4), (16, 16, 512, 4, 3), (16, 32, 256, 4, 4), (16, 32, 512, 4, 3))


# The table's split-K program for few-row products at least SPLIT_MIN_DEPTH deep whose tiles fill less than
# half the SMs: (BM, BN, BK, warps, stages, SPLIT_K). H200, session 18, `scripts/gpu_matmul_bench.py --split
# --rows 1,16` (weights read from DRAM): within 1.04x of the fastest of 24 split configurations on GPT-2's,
# BERT's and the Llama shape's MLP down products (K 3072 and 2816) at 1 and 16 rows, 5.2-6.4 us against the
# unsplit table's 7.0-8.4; no split was faster at K <= 1024 (GPT-2's qkv, attention output and MLP up, Llama's q).
SPLIT_TABLE = (16, 32, 128, 4, 4, 4)
SPLIT_MIN_DEPTH = 2048
# The same for products of more than SPLIT_ROWS_TABLE_MIN rows whose 64 x 128 tiles, split, still fill at most
# a wave. H200, session 19 run E (`scripts/gpu_matmul_bench.py --split --rows 512`): GPT-2's, BERT's and the
# Llama shape's MLP down products at 512 rows 11.8-12.3 us split in 2, against the unsplit table's 64 x 64
# tiles' 13.4-14.0 and the same tiles unsplit 14.5-15.4; 128 x 128 tiles split in 4, 15.2-15.6.
SPLIT_ROWS_TABLE = (64, 128, 64, 4, 4, 2)
SPLIT_ROWS_TABLE_MIN = 128

# Split-K programs tuning times for products of at most 16 rows whose 16-row tiles leave most SMs idle: a
# few-row product is bound by the latency of its serial loads of k, so SPLIT_K programs a tile, each loading
# a slice, finish sooner. (BM, BN, BK, warps, stages), times each of SPLIT_KS slices.
SPLIT_TILES = ((16, 16, 128, 4, 4), (16, 32, 128, 4, 4), (16, 16, 256, 4, 4), (16, 32, 256, 4, 4))
SPLIT_KS = (2, 4, 8)
# And for more rows, products at least SPLIT_MIN_DEPTH deep whose tiles fill less than a wave: 64-row tiles,
# whose accumulator leaves the registers to add the partial sums in (H200, session 19 run E: 128 x 128 and
# 128 x 256 tiles split were 1.2-2.4x slower than whole at 512-4096 rows; 64 x 128 in 2 the fastest at 512
# rows of the three MLP down products, 9-12% under the table; at K = 768 and 1024 no split gained).
SPLIT_ROW_TILES = ((64, 128, 64, 4, 4), (64, 64, 64, 4, 4))
SPLIT_ROW_KS = (2, 4)


def split_candidates(m: int, n: int, k: int, arch: int | None) -> list[MatmulConfig]:
    """Split-K programs for a product whose unsplit tiles fill less than a wave, with at most two waves of
    programs split and at least a BK step a slice: 16-row tiles up to 16 rows, 64-row tiles above for products
    at least SPLIT_MIN_DEPTH deep."""
    sms = SM_COUNT.get(arch, min(SM_COUNT.values())) if arch is not None else min(SM_COUNT.values())
    tiles, ks = (SPLIT_TILES, SPLIT_KS) if m <= 16 else (SPLIT_ROW_TILES, SPLIT_ROW_KS) if k >= SPLIT_MIN_DEPTH \
        else ((), ())
    return [MatmulConfig(bm, bn, bk, 8, warps, stages, split_k=splits)
            for bm, bn, bk, warps, stages in tiles for splits in ks
            if bm <= max(16, _pow2(m)) and _tiles(m, n, bm, bn) < sms and _tiles(m, n, bm, bn) * splits <= 2 * sms
            and k >= splits * bk]


# The table's persistent programs (sm_90+): up to 2048 rows, then above. H200, Triton 3.6,
# `scripts/gpu_matmul_bench.py OUT --persistent --rows 2048,4096,16384` over GPT-2's and BERT-base's projections
# and 4096^3 (docs/data/matmul_persistent_h200.json, docs/performance.md): against the tiled table, 2048 rows
# 11-16% faster except BERT's 768 x 768 (2% slower); 4096 rows 2% faster summed over the six shapes; 16384 rows
# 3-12% faster (94-97% of cuBLAS, the tiled table 86-95%); 4096^3 at 100% of cuBLAS (95%). Smaller products
# (fewer than 2048 rows, or columns or depth outside 768..4096: vocabulary products) were not measured
# and keep the tiled table.
# Vocabulary products (more than 4096 columns) from 129 rows: the persistent 128 x 256 program was the fastest
# candidate tuning timed for GPT-2's (50257 x 768) and the Llama shape's (32000 x 1024) logits in every bucket
# from 129..512 up (H200, session 15's scripts/gpu_bench.py exports: 0.166 -> 0.138 ms at 129..512, 0.543 ->
# 0.465 at 513..2048 and 1.144 -> 0.951 at 2049..4096 for GPT-2, summed over each bucket's two sizes; 2-6%
# for the Llama shape's up to 2048 rows, whose 2049..4096 bucket kept the tiled table's tile).
PERSISTENT_TABLE = ((128, 128, 64, 8, 4), (128, 256, 64, 8, 3))


def _persistent_tiles(m: int, n: int, k: int, arch: int | None,
                      store_bytes: int) -> tuple[int, int, int, int, int] | None:
    """The table's persistent TMA program (BM, BN, BK, warps, stages) for a half product of at most m rows,
    n columns and depth k whose operands TMA reads, where it measured faster than the tiled table and its
    shared memory fits the architecture's block; else None (the tiled table)."""
    from .compile import SHARED_MEMORY_PER_BLOCK  # (compile.py imports the renderer, which imports this)

    if not 768 <= k <= 4096:
        choice = None
    elif n > 4096:
        choice = PERSISTENT_TABLE[1] if m >= 512 else None
    elif n >= 768 and m >= 2048:
        choice = PERSISTENT_TABLE[0 if m <= 2048 else 1]
    else:
        choice = None
    limit = SHARED_MEMORY_PER_BLOCK.get(arch, min(SHARED_MEMORY_PER_BLOCK.values()))
    return choice if choice is not None and persistent_shared_bytes(*choice, store_bytes) <= limit else None


def persistent_shared_bytes(bm: int, bn: int, bk: int, warps: int, stages: int, store_bytes: int) -> int:
    """Shared memory of a persistent program of half operands, as Triton 3.6 compiles it for sm_90: every stage's
    a and b tiles, and the output tile staged for the store apart from them (the flattened loop overlaps one
    tile's store with the next tile's loads, so the two cannot share), plus 1 KB for the pipeline's barriers
    (24 bytes at 3 stages). GPT-2's attention output product with its epilogue at 128 x 256 x 64, 3 stages:
    279552 by this count, 278552 compiled, over sm_90's 232448."""
    return stages * (bm * bk + bk * bn) * 2 + bm * bn * store_bytes + 1024


# Persistent TMA programs tuning times (sm_90+, half operands, at least TMA_MIN_ROWS rows): the tiles of
# Triton's persistent-matmul tutorial and Inductor's persistent TMA template for Hopper. (BM, BN, BK, warps,
# stages, warp specialisation: timed 0.97-1.05x without it on the H200, so not among them.)
TMA_MIN_ROWS = 256
PERSISTENT_CANDIDATES = ((128, 128, 64, 8, 3, False), (128, 256, 64, 8, 3, False), (128, 128, 64, 8, 4, False),
                         (128, 128, 128, 8, 3, False), (64, 128, 64, 4, 4, False))


# Persistent programs that store their tiles through TMA too (tma_store), for outputs a descriptor can write: the
# two largest tiles above, where an epilogue is longest. cuBLAS's Hopper kernels overlap a tile's store with the
# next tile's main loop; at 2048 rows the persistent programs here were at 76-95% of cuBLAS (docs/performance.md,
# "Persistent matrix products through TMA"). Not timed on a GPU yet (session 31).
PERSISTENT_TMA_STORE_CANDIDATES = ((128, 128, 64, 8, 3), (128, 256, 64, 8, 3))


# Tiled programs with TMA loads tuning times (sm_90+, half operands, at least TMA_MIN_ROWS rows, no split-K):
# the tile tuning chose for GPT-2's layers at 2048 rows (64 x 128, where the persistent programs, whose loads are
# TMA's too, were slower) and the table's large ones; three, to keep export time (every candidate is compiled).
# In the table nowhere: on the H200 (session 30, gpu_matmul_bench --persistent) each was 4-26% slower than its
# pointer-load twin alone, but tuning chose them in three of the Llama shape's buckets. (BM, BN, BK, warps, stages)
TILED_TMA_CANDIDATES = ((64, 128, 64, 4, 4), (128, 128, 64, 8, 3), (128, 256, 64, 8, 3))


# The fewest pipeline stages smaller_matmul_config gives a product: one step's tiles loading while the previous
# step's are multiplied. One stage would serialise every load with the multiply; a smaller tile costs less.
MIN_STAGES = 2


def smaller_matmul_config(config: MatmulConfig, stages: int | None = None) -> MatmulConfig | None:
    """The next smaller configuration than `config` in shared memory, for a product whose compiled block needs
    more than some target gives one (fit.py): a pipeline stage fewer (each holds an a and a b tile), down to
    MIN_STAGES; then the tile halved along its longer side (its rows on a tie), no side below tl.dot's 16, at
    most 4 warps below 128 x 128 as in the table; then the K step halved, down to 16. A smaller tile gets
    `stages` again (the stages of the configuration first shrunk; default: as many as now): where fewer stages
    did not help, the block is mostly the epilogue's (GPT-2's attention-output product took 262144 bytes at
    128 x 256 with 3 stages and with 2, Triton 3.6), and the half tile may have room for them. None when
    nothing is smaller. Everything else (persistent, split-K) stays."""
    if config.num_stages > MIN_STAGES:
        return replace(config, num_stages=config.num_stages - 1)
    stages = config.num_stages if stages is None else stages
    bm, bn, bk = config.bm, config.bn, config.bk
    if max(bm, bn) > 16:
        bm, bn = (bm // 2, bn) if bm >= bn else (bm, bn // 2)
        warps = config.num_warps if bm * bn >= 128 * 128 else min(config.num_warps, 4)
        return replace(config, bm=bm, bn=bn, num_warps=warps, num_stages=stages)
    return replace(config, bk=bk // 2, num_stages=stages) if bk > 16 else None


def matmul_candidates(m: int, n: int, k: int, dtype: str, arch: int | None, tma: bool = False,
                      store_bytes: int = 4, tma_store: bool = False) -> list[MatmulConfig]:
    """What tuning times for a product of at most m rows: the table's choice first, then the candidate
    tiles no taller or wider than the product (16-row tiles exactly when it has at most 16 rows, as in the
    table), split-K programs of the products whose tiles fill under a wave (split_candidates), then, where
    `tma` (the renderer's word that every target is sm_90+ and TMA can read both operands), persistent TMA
    programs, those storing through TMA as well where `tma_store` (TMA can write the output), and tiled ones
    loading through TMA. float32 and float64 products keep the table's choice."""
    chosen = matmul_config(m, n, k, dtype, arch, tma, store_bytes)
    if dtype in ("float32", "float64"):
        return [chosen]
    fits = [MatmulConfig(bm, bn, min(bk, max(16, _pow2(k))), 8, warps, stages)
            for bm, bn, bk, warps, stages in HALF_CANDIDATES
            if bm <= max(16, _pow2(m)) and bn <= max(16, _pow2(n)) and (bm == 16) == (m <= 16)]
    fits += split_candidates(m, n, k, arch)
    if tma and m >= TMA_MIN_ROWS:
        fits += [MatmulConfig(bm, bn, min(bk, max(16, _pow2(k))), 8, warps, stages, True, ws)
                 for bm, bn, bk, warps, stages, ws in PERSISTENT_CANDIDATES if bn <= max(16, _pow2(n))]
        if tma_store:
            fits += [MatmulConfig(bm, bn, min(bk, max(16, _pow2(k))), 8, warps, stages, True, tma_store=True)
                     for bm, bn, bk, warps, stages in PERSISTENT_TMA_STORE_CANDIDATES if bn <= max(16, _pow2(n))]
        fits += [MatmulConfig(bm, bn, min(bk, max(16, _pow2(k))), 8, warps, stages, tma=True)
                 for bm, bn, bk, warps, stages in TILED_TMA_CANDIDATES
                 if bm <= max(16, _pow2(m)) and bn <= max(16, _pow2(n))]
    return list(dict.fromkeys([chosen, *fits]))
