"""Constant matmul operands laid out at export the way the CPU matmul kernel reads them.

The kernel (templates/cpp/matmul.cpp.jinja) multiplies 16-column panels of b, k-major. For a weight
that layout can be made once at export instead of on every run: panel j holds columns 16j..16j+15 of
b = weight viewed as [K, N], zero-padded to a multiple of 16 columns, as a [ceil(N/16), K, 16] tensor.
A weight that other ops also read (a tied embedding) is left as it is: storing it twice would cost more
than packing it at run time.
"""

from __future__ import annotations

import dataclasses

import torch

from ...ir.kernels import MatmulKernel, StridedView

PANEL = 16  # columns per panel: the micro-kernel's width (AOTPACK_NR)


def pack_panels(weight: torch.Tensor, view: StridedView, k: int, n: int) -> torch.Tensor:
    dense = torch.as_strided(weight, (k, n), (int(view.strides[1]), int(view.strides[2])), int(view.offset))
    strips = -(-n // PANEL)
    padded = torch.zeros(k, strips * PANEL, dtype=weight.dtype)
    padded[:, :n] = dense
    return padded.reshape(k, strips, PANEL).permute(1, 0, 2).contiguous()


def can_prepack(kernel: MatmulKernel, b_dtype: str, b_kind: str) -> bool:
    static = all(getattr(e, "is_number", False) for e in (kernel.k, kernel.n, kernel.b.offset, *kernel.b.strides))
    return b_kind == "weight" and b_dtype == "float32" and kernel.dtype == "float32" and static \
        and (kernel.b.strides[0] == 0 or kernel.batch == 1)


def unpack_shared(program_steps: list, read_elsewhere: set[str]) -> list:
    """Matmuls whose packed weight's source is also read by other kernels go back to packing at run time."""
    out = []
    for step in program_steps:
        if isinstance(step, MatmulKernel) and step.b_packed and step.b_source.buffer in read_elsewhere:
            step = dataclasses.replace(step, b=step.b_source, b_packed=False, b_source=None)
        out.append(step)
    return out

