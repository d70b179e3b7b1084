"""The op lowerings, one module per family of ATen ops; importing this package registers them all."""

from . import (  # noqa: F401  (registration)
    attention,
    distance,
    embedding_bag,
    grid_sample,
    index,
    linalg,
    norm,
    pointwise,
    pool,
    reduce,
    resample,
    scatter,
    sort,
    special,
    views,
)
