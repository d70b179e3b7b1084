"""Tile configurations of the Triton matrix product, per bucket of its rows (M) and per GPU architecture.

Without a GPU at export the configuration comes from this table, so a cross-compiled package is tuned too.
The rule aims at the two regimes a declared range spans:

- Few rows (M up to 16-128): the product reads each weight once and is bound by memory and by how many
  SMs take part. The largest tile no taller than the rows (at least 16, tl.dot's smallest) that still gives
  the grid one tile per SM keeps every SM streaming weights; a deep K step (128) keeps enough bytes in
  flight per tile. The full-range tile (128 x 128) at M = 1 gives GPT-2's 768-column products 6 programs on
  a 132-SM H200: the weights then stream through 6 SMs.
- Many rows: 128 x 128 tiles (64 x 64 in float32), 8 warps, 3 stages, the tensor cores' regime, as soon as
  they give every SM a tile; narrower ones before that.

SM counts per architecture size the grid target; an unknown architecture gets the smallest listed.
scripts/gpu_matmul_bench.py measures these choices against other tiles and against cuBLAS.
"""

from __future__ import annotations

from dataclasses import dataclass

SM_COUNT = {80: 108, 86: 84, 89: 128, 90: 132, 100: 148, 120: 170}


@dataclass(frozen=True)
class MatmulConfig:
    bm: int
    bn: int
    bk: int
    group_m: int
    num_warps: int
    num_stages: int


def _pow2(n: int) -> int:
    return 1 if n <= 1 else 1 << (int(n) - 1).bit_length()


def _tiles(m: int, n: int, bm: int, bn: int) -> int:
    return -(-m // bm) * -(-n // bn)


# (BM, BN) from the largest tile down: the first that gives every SM a tile is chosen.
HALF_TILES = ((128, 128), (128, 64), (64, 128), (64, 64), (32, 64), (16, 64), (32, 32), (16, 32), (16, 16))
WIDE_TILES = ((64, 64), (64, 32), (32, 64), (32, 32), (16, 32), (16, 16))


def matmul_config(m: int, n: int, k: int, dtype: str, arch: int | None) -> MatmulConfig:
    """The tiles for a product of at most m rows, n columns and depth k (the bucket's largest sizes)."""
    wide = dtype in ("float32", "float64")
    sms = SM_COUNT.get(arch, min(SM_COUNT.values())) if arch is not None else min(SM_COUNT.values())
    # no taller or wider than the product (rounded up to a power of two, at least tl.dot's 16)
    fits = [(bm, bn) for bm, bn in (WIDE_TILES if wide else HALF_TILES)
            if bm <= max(16, _pow2(m)) and bn <= max(16, _pow2(n))]
    bm, bn = next((t for t in fits if _tiles(m, n, *t) >= sms), fits[-1])
    large = bm * bn >= (64 * 64 if wide else 128 * 128)
    if large:
        bk = 32 if wide else 64
    else:  # small tiles: a deeper step keeps more bytes in flight per program
        bk = 64 if wide else 128
    bk = min(bk, max(16, _pow2(k)))
    return MatmulConfig(bm, bn, bk, 8, 8 if bm * bn >= 128 * 128 else 4, 3 if large else 4)
