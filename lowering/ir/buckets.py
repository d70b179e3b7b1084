"""Buckets of a kernel's deciding size: the ranges of sizes that each get a kernel variant of their own.

A declared range is a contract no run leaves, so a kernel whose best configuration depends on a size (a
matrix product's rows, attention's query rows) can be specialised per part of that range, and the runtime
picks the part's variant from the bound symbol values with one comparison per step, no search.

The rule: a size's range [lo, hi] (over the declared ranges) is cut after 16, 128, 512, 2048 and then every
factor of 4 (8192, 32768, ...), the sizes where the best tile shapes change on the GPUs measured
(docs/performance.md): 1-16 rows stream the weights once, 17-128 fill the machine with small tiles, 129-512
with medium ones, and from 513 the large tiles of the full-size kernel win. Buckets outside [lo, hi] are
dropped, so a size of range 1..64 gets the buckets 1-16 and 17-64.
"""

from __future__ import annotations

FIRST_CUTS = (16, 128, 512, 2048)


def bucket_uppers(lo: int, hi: int) -> tuple[int, ...]:
    """The largest size of each bucket of [lo, hi], ascending; the last is always hi."""
    cuts = list(FIRST_CUTS)
    while cuts[-1] < hi:
        cuts.append(cuts[-1] * 4)
    return (*(c for c in cuts if lo <= c < hi), hi)
