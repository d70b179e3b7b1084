"""Buckets of a kernel's deciding size: the ranges of sizes that each get a kernel variant of their own.

A declared range is a contract no run leaves, so a kernel whose best configuration depends on a size (a
matrix product's rows, attention's query rows) can be specialised per part of that range, and the runtime
picks the part's variant from the bound symbol values with one comparison per step, no search.

The rule: a size's range [lo, hi] (over the declared ranges) is cut after 16, 128, 512, 2048 and then every
factor of 2 (4096, 8192, 16384, ...), the sizes where the best tile shapes change on the GPUs measured
(docs/performance.md): 1-16 rows stream the weights once, 17-128 fill the machine with small tiles, 129-512
with medium ones, and from 513 the large tiles of the full-size kernel win. Above 2048 rows a grid of large
tiles fills a whole number of waves or not depending on the rows (768 columns at 4096 rows in 128 x 128 tiles
are 1.45 waves of the H200's 132 SMs, at 8192 rows 2.9), so each doubling is tuned on its own; until session
20 the cuts were every factor of 4 there, which timed BERT's 4096 rows (batch 8 x 512) at 5120 and 8192.
Buckets outside [lo, hi] are dropped, so a size of range 1..64 gets the buckets 1-16 and 17-64.
"""

from __future__ import annotations

FIRST_CUTS = (16, 128, 512, 2048)
LATER_FACTOR = 2  # the cuts after the last of FIRST_CUTS: each this many times the one before


def bucket_uppers(lo: int, hi: int) -> tuple[int, ...]:
    """The largest size of each bucket of [lo, hi], ascending; the last is always hi."""
    cuts = list(FIRST_CUTS)
    while cuts[-1] < hi:
        cuts.append(cuts[-1] * LATER_FACTOR)
    return (*(c for c in cuts if lo <= c < hi), hi)
