"""Antialiased resizing (F.interpolate with antialias=True, lowering/frontend/ops/resample.py) over a dynamic
batch, height and width: SigLIP-2's position embeddings (a static 16 x 16 table resized to the image's dynamic
patch grid, bilinear without align_corners: down- and up-sampling), the feature map shrunk to a fixed size
(bilinear and bicubic, windows of up to 17 and 33 taps), bicubic to a dynamic size (half the height, a wider
width), both modes with align_corners, and explicit scale factors (of the static table and of the dynamic map). Run by tests/e2e/test_ops.py through the C++
runtime and by tests/codegen/test_triton_compile.py in the Triton interpreter."""

import torch
import torch.nn.functional as F
from torch import nn


class Resized(nn.Module):
    def __init__(self, dim: int = 8, grid: int = 16) -> None:
        super().__init__()
        self.grid = grid
        self.position_embedding = nn.Embedding(grid * grid, dim)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        _, dim, h, w = x.shape
        # Siglip2VisionEmbeddings.resize_positional_embeddings: (grid, grid, dim) -> (1, dim, grid, grid), resized
        table = self.position_embedding.weight.reshape(self.grid, self.grid, dim).permute(2, 0, 1).unsqueeze(0)
        positions = F.interpolate(table, size=(h, w), mode="bilinear", align_corners=False, antialias=True)
        embedded = x + positions
        small = F.interpolate(x, size=(3, 5), mode="bilinear", antialias=True)
        small_cubic = F.interpolate(x, size=(3, 5), mode="bicubic", antialias=True)
        half = F.interpolate(x, size=(h // 2 + 1, w + 3), mode="bicubic", antialias=True)
        corners = F.interpolate(x, size=(5, w * 2 - 1), mode="bilinear", align_corners=True, antialias=True)
        corners_cubic = F.interpolate(x, size=(h + 2, 4), mode="bicubic", align_corners=True, antialias=True)
        scaled = F.interpolate(table, scale_factor=(0.37, 1.3), mode="bicubic", antialias=True)
        scaled_dynamic = F.interpolate(x, scale_factor=(2, 3), mode="bicubic", antialias=True)
        return embedded, small, small_cubic, half, corners, corners_cubic, scaled, scaled_dynamic


def model() -> nn.Module:
    torch.manual_seed(0)
    return Resized()


example_inputs = (torch.randn(2, 8, 10, 12),)
dynamic_axes = {"x": {0: "batch", 2: "h", 3: "w"}}
dynamic_ranges = {"batch": (1, 3), "h": (2, 24), "w": (2, 24)}
