"""The CPU matmul's row tiles at row counts around its tile height, through the C++ runtime.

The kernel cuts the rows into tiles of about equal height (a multiple of 6, at most the template's MC of 192),
so that threads get equal work; every row count must still be covered exactly once, whatever the rounding does
(one tile, a partial 6-row strip, many tiles), on one thread and on several. Rows read in place and rows packed
from a transposed operand take different paths, so both run.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from aotpack.api import export_spec
from aotpack.exporter import ModelSpec
from aotpack.verification import relative_error, to_numpy
from torch import nn

HERE = Path(__file__).resolve()
MAX_ROWS = 7000
ROWS = (1, 5, 6, 7, 191, 192, 193, 385, 1024, 1153, 6145, MAX_ROWS)


class Products(nn.Module):
    """x @ w + bias with x's rows in place, and x's transpose @ w2 (a packed for the micro-kernel)."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(24, 40))
        self.bias = nn.Parameter(torch.randn(40))
        self.w2 = nn.Parameter(torch.randn(3, 17))

    def forward(self, x: torch.Tensor, xt: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x @ self.w + self.bias, xt.transpose(0, 1) @ self.w2


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, nn.Module]:
    torch.manual_seed(0)
    model = Products().eval()
    spec = ModelSpec(HERE, model, (torch.randn(300, 24), torch.randn(3, 300)), ("x", "xt"),
                     {"x": {0: "rows"}, "xt": {1: "rows"}}, {"rows": (1, MAX_ROWS)})
    return export_spec(spec, tmp_path_factory.mktemp("tiles") / "products.aotpack").path, model


@pytest.mark.parametrize("threads", [1, 3])
def test_every_row_count_matches_eager(exported, rt, threads):
    path, model = exported
    session = rt.Model(path).session(num_threads=threads)
    for rows in ROWS:
        gen = torch.Generator().manual_seed(rows)
        x, xt = torch.randn(rows, 24, generator=gen), torch.randn(3, rows, generator=gen)
        with torch.no_grad():
            expected = model(x, xt)
        got = session.run([to_numpy(x), to_numpy(xt)])
        for name, want, have in zip(("x @ w + bias", "xt.T @ w2"), expected, got):
            assert have.shape == tuple(want.shape), (rows, name)
            assert relative_error(have, want.numpy()) < 1e-5, (rows, name)
