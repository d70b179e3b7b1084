"""3-d convolutions and 3-d pooling (video models, 3-d U-Nets) over a dynamic batch, depth, height and width:
a kernel == stride patch embedding (VideoMAE, ViViT), Conv3d with stride, padding, dilation, groups and no bias,
a (1, 3, 3) + (3, 1, 1) factorised block (R(2+1)D), ConvTranspose3d with output_padding, and average, max and
adaptive pooling with padding, ceil_mode (on a second input of a fixed shape), count_include_pad=False and
divisor_override, and max pooling's indices (ties among rounded values). Run by tests/e2e/test_ops_3d.py through
the C++ runtime and by tests/codegen/test_triton_3d.py in the Triton interpreter."""

import torch
import torch.nn.functional as F
from torch import nn


class Video(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.patch = nn.Conv3d(3, 8, (2, 2, 2), stride=(2, 2, 2))
        self.conv = nn.Conv3d(3, 6, 3, stride=(1, 2, 1), padding=(1, 0, 2), dilation=(2, 1, 1))
        self.grouped = nn.Conv3d(6, 4, (2, 3, 1), padding=1, groups=2, bias=False)
        self.spatial = nn.Conv3d(3, 5, (1, 3, 3), padding=(0, 1, 1))
        self.temporal = nn.Conv3d(5, 4, (3, 1, 1), padding=(1, 0, 0))
        self.up = nn.ConvTranspose3d(4, 3, 3, stride=(2, 1, 2), padding=1, output_padding=(1, 0, 1))

    def forward(self, x: torch.Tensor, clip: torch.Tensor) -> tuple[torch.Tensor, ...]:
        tokens = self.patch(x).flatten(2).transpose(1, 2)  # [batch, patches, dim] as a video transformer
        y = self.grouped(torch.relu(self.conv(x)))
        z = self.temporal(torch.relu(self.spatial(x)))
        return (
            tokens,
            y,
            self.up(z),
            F.avg_pool3d(x, 3, stride=2, padding=1, count_include_pad=False),
            F.avg_pool3d(x, 3, stride=1, padding=1, ceil_mode=True, count_include_pad=False),
            F.avg_pool3d(clip, 3, stride=2, padding=1, ceil_mode=True, count_include_pad=False),
            F.avg_pool3d(clip, (2, 3, 2), stride=(2, 2, 3), padding=(1, 1, 0), ceil_mode=True),
            F.avg_pool3d(z, (2, 3, 2), stride=(1, 2, 2), padding=(1, 1, 0)),
            F.avg_pool3d(x, 2, divisor_override=3),
            F.max_pool3d(y, (3, 2, 3), stride=(2, 1, 2), padding=1),
            F.max_pool3d(clip, (3, 2, 3), stride=(2, 1, 2), padding=1, ceil_mode=True),
            F.max_pool3d(x, (1, 3, 3), stride=(1, 2, 2), padding=(0, 1, 1)),
            F.max_pool3d(x, 2, dilation=(2, 1, 1)),
            *F.max_pool3d(x.round(), (2, 3, 3), stride=(1, 2, 2), padding=(1, 1, 1), return_indices=True),  # ties
            F.max_pool3d(clip, 2, stride=2, dilation=(2, 1, 1), ceil_mode=True, return_indices=True)[1],
            F.adaptive_avg_pool3d(z, (2, 3, 2)),
            F.adaptive_avg_pool3d(x, 1),
            F.adaptive_max_pool3d(z, (3, 2, 1)),
        )


def model() -> nn.Module:
    torch.manual_seed(0)
    return Video()


# torch.export cannot keep a size dynamic through ceil_mode with a stride above 1 (its guard that the last window
# starts inside is not proved), so those poolings read `clip`, of a fixed shape.
example_inputs = (torch.randn(2, 3, 6, 7, 8), torch.randn(2, 3, 5, 7, 6))
dynamic_axes = {"x": {0: "batch", 2: "frames", 3: "h", 4: "w"}}
dynamic_ranges = {"batch": (1, 3), "frames": (5, 9), "h": (5, 10), "w": (4, 11)}
