"""Scatters on CUDA with many updates of the same targets: folds must match eager (integers exactly)."""

from __future__ import annotations

import pytest
import torch
from aotpack.exporter import ModelSpec
from aotpack.verification import to_numpy
from gpu_helpers import HERE, compare, export_cuda
from torch import nn


class Accumulate(nn.Module):
    def forward(self, x, i, v):
        return (x.scatter_add(0, i, v), x.scatter_reduce(0, i, v, "amax", include_self=False),
                torch.index_put(x, (i[:, 0],), v, accumulate=True), x.index_fill(1, i[0, :2] % 16, 7))


@pytest.mark.parametrize("dtype", [torch.int64, torch.float32])
def test_repeated_targets_fold_like_eager(dtype, tmp_path, rt, cuda_arch):
    def inputs(n: int) -> list[torch.Tensor]:
        # 4n updates of n rows: every target is hit about four times per column.
        x, v = (torch.randint(-50, 50, (k, 16)).to(dtype) for k in (n, 4 * n))
        return [x, torch.randint(0, n, (4 * n, 16)), v]

    torch.manual_seed(0)
    spec = ModelSpec(HERE, Accumulate().eval(), tuple(inputs(8)), ("x", "i", "v"),
                     {"x": {0: "n"}, "i": {0: "m"}, "v": {0: "m"}}, {"n": (1, 2048), "m": (1, 8192)})
    result = export_cuda(spec, tmp_path / "scatter.aotpack", cuda_arch)
    session = rt.Model(result.path).session(device="cuda")
    for n in (1, 37, 2048):
        args = inputs(n)
        with torch.no_grad():
            expected = list(spec.model(*args))
        outputs = session.run([to_numpy(a) for a in args])
        compare(outputs, expected, result.manifest["signature"], f"{dtype} n={n}")


def test_bad_scatter_index_is_reported_not_written(tmp_path, rt, cuda_arch):
    module = Accumulate().eval()
    args = (torch.zeros(4, 16), torch.randint(0, 4, (8, 16)), torch.ones(8, 16))
    spec = ModelSpec(HERE, module, args, ("x", "i", "v"), {}, {})
    session = rt.Model(export_cuda(spec, tmp_path / "bad.aotpack", cuda_arch).path).session(device="cuda")
    bad = args[1].clone()
    bad[3, 5] = 4
    with pytest.raises(rt.AotpackError, match="outside the dimension"):
        session.run([to_numpy(args[0]), to_numpy(bad), to_numpy(args[2])])
