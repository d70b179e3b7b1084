"""grid_sample (aten.grid_sampler_2d) through export -> package -> C++ runtime, against eager.

op_models/grid_sample.py (a spatial transformer and flow warps) over its declared ranges, then every
interpolation x padding x align_corners combination on adversarial grids: pixel centres and the half-way points
between pixels (nearest's ties, which eager rounds half to even), points far outside, 1e10 (whose unnormalised
coordinate must not wrap into an in-bounds index), infinities and NaN, at input sizes down to one pixel.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from aotpack.build import build_package
from aotpack.errors import UnsupportedError
from aotpack.exporter import ModelSpec, capture, resolve_symbols
from aotpack.lowering.frontend.decompositions import decompositions
from aotpack.verification import mismatch_report, relative_error, to_numpy
from exported import check_against_eager, export, make_inputs, range_points
from torch import nn

HERE = Path(__file__).resolve()
COMBOS = [(mode, padding, align) for mode in ("bilinear", "nearest", "bicubic")
          for padding in ("zeros", "border", "reflection") for align in (False, True)]
FAR = [1.0, 1.5, 3.7, 17.25, 1e5, 1e10, math.inf]
# (batch, h, w) of the input: single pixels (a reflection span of zero, align_corners' scale of zero), odd and
# even sizes.
POINTS = [(1, 1, 1), (2, 1, 5), (1, 6, 1), (2, 4, 7), (1, 7, 6)]


def test_op_model_file_matches_eager_over_its_ranges(tmp_path, rt):
    """A spatial transformer's affine grid and a conv-predicted flow warp (nearest, bilinear, bicubic; zeros,
    border and reflection padding; points outside [-1, 1]), exported as `aotpack export` does."""
    exported = export(HERE.parent / "op_models" / "grid_sample.py", tmp_path)
    session = rt.Model(exported.result.path).session(num_threads=2)
    for seed, point in enumerate(range_points(exported.signature["symbols"])):
        check_against_eager(exported, session, make_inputs(exported, point, seed))


class AllModes(nn.Module):
    def forward(self, x: torch.Tensor, grid: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return tuple(F.grid_sample(x, grid, mode=mode, padding_mode=padding, align_corners=align)
                     for mode, padding, align in COMBOS)


def axis_values(size: int, rng: np.random.Generator) -> list[float]:
    """Grid values along an axis of `size` pixels: centres and half-way points under both align_corners
    conventions, the edges, far outside, 1e10, infinities, NaN and a few random points."""
    values = [2 * k / size - 1 for k in range(size + 1)] + [(2 * k + 1) / size - 1 for k in range(size)]
    if size > 1:
        values += [2 * k / (size - 1) - 1 for k in range(size)]
        values += [(2 * k + 1) / (size - 1) - 1 for k in range(-1, size)]
    values += [s * v for v in FAR for s in (1, -1)] + [math.nan, 0.0, 1e-8]
    values += list(rng.uniform(-3, 3, 4))
    return values


def adversarial_grid(n: int, h: int, w: int, seed: int) -> torch.Tensor:
    """[n, len(ys), len(xs), 2]: every pair of the x and y axis values (x first, as grid_sample reads them)."""
    rng = np.random.default_rng(seed)
    xs, ys = axis_values(w, rng), axis_values(h, rng)
    grid = np.stack(np.meshgrid(np.array(xs), np.array(ys), indexing="xy"), -1)
    return torch.from_numpy(np.broadcast_to(grid, (n, *grid.shape)).copy()).float()


@pytest.fixture(scope="module")
def all_modes(rt, tmp_path_factory):
    """One package of AllModes, and its outputs and eager's at each of POINTS: (point, outputs, expected)."""
    x = torch.randn(2, 3, 4, 5)
    spec = ModelSpec(HERE, AllModes().eval(), (x, adversarial_grid(2, 4, 5, 0)), ("x", "grid"),
                     {"x": {0: "batch", 2: "h", 3: "w"}, "grid": {0: "batch", 1: "ho", 2: "wo"}},
                     {"batch": (1, 2), "h": (1, 7), "w": (1, 7), "ho": (1, 64), "wo": (1, 64)})
    plan = resolve_symbols(spec)
    captured = capture(spec, plan.symbols, plan.dynamic_shapes, decompositions())
    result = build_package(captured, tmp_path_factory.mktemp("grid_sample") / "all_modes.aotpack")
    session = rt.Model(result.path).session(num_threads=2)
    runs = []
    for seed, (n, h, w) in enumerate(POINTS):
        gen = torch.Generator().manual_seed(seed)
        inputs = [torch.randn(n, 3, h, w, generator=gen) * 4 + 1, adversarial_grid(n, h, w, seed)]
        with torch.no_grad():
            expected = [to_numpy(e) for e in spec.model(*inputs)]
        runs.append(((n, h, w), session.run([to_numpy(t) for t in inputs]), expected))
    return runs


@pytest.mark.parametrize("combo", range(len(COMBOS)), ids=[f"{m}-{p}-{'aligned' if a else 'unaligned'}"
                                                           for m, p, a in COMBOS])
def test_adversarial_grids_match_eager(all_modes, combo):
    """NaN exactly where eager has NaN (bilinear and bicubic read a NaN or infinite grid value as NaN weights),
    nearest bit for bit (its ties), the interpolating modes to fp32 tolerance."""
    mode = COMBOS[combo][0]
    for point, outputs, expected in all_modes:
        out, ref = outputs[combo], expected[combo]
        where = f"{COMBOS[combo]} at (batch, h, w) = {point}: "
        assert out.shape == ref.shape, where + mismatch_report("out", out, ref)
        nan = np.isnan(ref)
        assert (np.isnan(out) == nan).all(), where + f"NaN at {np.argwhere(np.isnan(out) != nan)[:5].tolist()}"
        finite, finite_ref = out[~nan], ref[~nan]
        assert np.abs(finite_ref).max() > 0, where + "the reference is all zeros"
        if mode == "nearest":
            assert (finite == finite_ref).all(), where + mismatch_report("out", finite, finite_ref)
        else:
            assert relative_error(finite, finite_ref) <= 1e-5, where + mismatch_report("out", finite, finite_ref)


def test_volumetric_grid_sample_is_refused_naming_what_is_supported(tmp_path):
    class Volume(nn.Module):
        def forward(self, x, grid):
            return F.grid_sample(x, grid, align_corners=False)

    spec = ModelSpec(HERE, Volume(), (torch.randn(1, 2, 3, 4, 5), torch.rand(1, 2, 2, 2, 3) * 2 - 1),
                     ("x", "grid"), {}, {})
    with pytest.raises(UnsupportedError, match=r"5-d input \(grid_sampler_3d.*4-d inputs"):
        build_package(capture(spec, (), None, decompositions()), tmp_path / "volume.aotpack")
