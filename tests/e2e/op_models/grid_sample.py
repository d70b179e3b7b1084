"""grid_sample over a dynamic batch, input height and width and output height and width: a small spatial
transformer (a predicted affine theta through F.affine_grid, bilinear with zeros padding), a flow warp (a base
grid plus a convolution's predicted flow, scaled so that points leave [-1, 1]: nearest with border padding,
bilinear with reflection), and bicubic with reflection and border on a grid stretched past the edges. Run by
tests/e2e/test_grid_sample.py through the C++ runtime and by tests/codegen/test_triton_grid_sample.py in the
Triton interpreter."""

import torch
import torch.nn.functional as F
from torch import nn


def _centres(size: int, dtype: torch.dtype) -> torch.Tensor:
    """Pixel centres in [-1, 1] (align_corners=False), from an arange: F.affine_grid and linspace make
    their sizes constants under torch.export."""
    return (torch.arange(size, dtype=dtype) * 2 + 1) / size - 1


def _affine_grid(theta: torch.Tensor, h: int, w: int) -> torch.Tensor:
    """F.affine_grid(theta, [n, c, h, w], align_corners=False), written out: [x, y, 1] @ theta^T."""
    n = theta.shape[0]
    ys = _centres(h, theta.dtype).view(h, 1).expand(h, w)
    xs = _centres(w, theta.dtype).view(1, w).expand(h, w)
    base = torch.stack((xs, ys, torch.ones_like(xs)), -1).reshape(1, h * w, 3).expand(n, h * w, 3)
    return torch.bmm(base, theta.transpose(1, 2)).view(n, h, w, 2)


class Warps(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.localize = nn.Linear(3, 6)
        self.flow = nn.Conv2d(3, 2, 3, padding=1)

    def forward(self, x: torch.Tensor, grid: torch.Tensor) -> tuple[torch.Tensor, ...]:
        n = x.shape[0]
        # Spatial transformer: theta from pooled features, near the identity but scaled past it.
        theta = self.localize(x.mean((2, 3))).view(n, 2, 3) * 0.5
        theta = theta + torch.tensor([[1.3, 0.0, 0.0], [0.0, 1.3, 0.0]])
        affine = _affine_grid(theta, grid.shape[1], grid.shape[2])
        stn = F.grid_sample(x, affine, mode="bilinear", padding_mode="zeros", align_corners=False)
        # Flow warp: base grid over the output plus a predicted flow, large enough to leave the image.
        h, w = x.shape[2], x.shape[3]
        ys = _centres(h, x.dtype).view(1, h, 1).expand(n, h, w)
        xs = _centres(w, x.dtype).view(1, 1, w).expand(n, h, w)
        flow = self.flow(x).permute(0, 2, 3, 1)
        warp_grid = torch.stack((xs, ys), -1) + 0.8 * flow
        nearest = F.grid_sample(x, warp_grid, mode="nearest", padding_mode="border", align_corners=True)
        reflected = F.grid_sample(x, warp_grid, mode="bilinear", padding_mode="reflection", align_corners=False)
        # The input grid stretched to [-2.5, 2.5]: bicubic's taps through reflection and border.
        bicubic = F.grid_sample(x, grid * 2.5, mode="bicubic", padding_mode="reflection", align_corners=True)
        bicubic_border = F.grid_sample(x, grid * 2.5, mode="bicubic", padding_mode="border", align_corners=False)
        return stn, nearest, reflected, bicubic, bicubic_border


def model() -> nn.Module:
    torch.manual_seed(0)
    return Warps()


example_inputs = (torch.randn(2, 3, 5, 6), torch.rand(2, 4, 7, 2) * 2 - 1)
dynamic_axes = {"x": {0: "batch", 2: "h", 3: "w"}, "grid": {0: "batch", 1: "ho", 2: "wo"}}
dynamic_ranges = {"batch": (1, 3), "h": (2, 12), "w": (2, 12), "ho": (1, 9), "wo": (1, 9)}
