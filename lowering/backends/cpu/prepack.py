"""The CPU's layout pass: constant matmul operands laid out at export the way its matmul kernel reads them.

The kernel (templates/cpp/matmul.cpp.jinja) multiplies 16-column panels of b, k-major. For a weight
that layout can be made once at export instead of on every run: panel j holds columns 16j..16j+15 of
b = weight viewed as [K, N], zero-padded to a multiple of 16 columns, as a [ceil(N/16), K, 16] tensor
(ir.kernels.PanelView). A weight that other kernels also read (a tied embedding) is left as it is:
storing it twice would cost more than packing it at run time.

The pass runs only for packages with a CPU target. In a package for both CPU and CUDA the CUDA kernels
read the same panels (the package holds one copy of each weight); a CUDA-only package keeps plain weights.
"""

from __future__ import annotations

import dataclasses

import sympy
import torch

from ...ir.kernels import Buffer, MatmulKernel, PanelView, Program, StridedView, operand_buffers

PANEL = 16  # columns per panel: the micro-kernel's width (AOTPACK_NR)


def pack_panels(weight: torch.Tensor, view: StridedView, k: int, n: int) -> torch.Tensor:
    dense = torch.as_strided(weight, (k, n), (int(view.strides[1]), int(view.strides[2])), int(view.offset))
    strips = -(-n // PANEL)
    padded = torch.zeros(k, strips * PANEL, dtype=weight.dtype)
    padded[:, :n] = dense
    return padded.reshape(k, strips, PANEL).permute(1, 0, 2).contiguous()


def _packable(program: Program, step: object) -> bool:
    if not isinstance(step, MatmulKernel) or not isinstance(step.b, StridedView):
        return False
    b = program.buffers[step.b.buffer]
    static = all(getattr(e, "is_number", False) for e in (step.k, step.n, step.b.offset, *step.b.strides))
    return b.kind == "weight" and b.dtype == "float32" and step.dtype == "float32" and static \
        and (step.b.strides[0] == 0 or step.batch == 1)


def prepack_weights(program: Program) -> Program:
    """Every float32 weight that is a matmul's b and read by nothing else, replaced by its panels."""
    candidates = [t for t, step in enumerate(program.steps) if _packable(program, step)]
    # What each step reads once its b is packed: a weight read by any other kernel stays as it is.
    read = {name for t, step in enumerate(program.steps)
            for name in (operand_buffers(step.a) if t in candidates else step.reads())}
    packed = [t for t in candidates if program.steps[t].b.buffer not in read]
    if not packed:
        return program
    order = {name: i for i, name in enumerate(program.buffers)}
    steps = list(program.steps)
    weights = dict(program.weights)
    inserted: dict[str, list[Buffer]] = {}  # buffer -> the panels listed right after it
    slices: dict[str, int] = {}  # source weight -> products packed from it so far
    for number, t in enumerate(packed):
        step = steps[t]
        source = program.buffers[step.b.buffer].source
        k, n = int(step.k), int(step.n)
        # Products can read different slices of one weight (nn.MultiheadAttention's in_proj_weight split into
        # q and kv when the query is not the key): each slice's panels are a weight of their own.
        slices[source] = slices.get(source, 0) + 1
        name = f"{source}.panels{PANEL}" + (f".{slices[source] - 1}" if slices[source] > 1 else "")
        weights[name] = pack_panels(program.weights[source], step.b, k, n)
        buffer = Buffer(f"{step.b.buffer}.panels{number}", "float32", tuple(sympy.Integer(d) for d in weights[name].shape),
                        "weight", name)
        # The panels are listed after the last buffer their matmul's step uses (its output, or an operand
        # computed for it), which is where the walk over the graph reaches that step: buffer ids keep
        # following the order in which the steps need their buffers.
        after = max((*step.reads(), step.output), key=order.__getitem__)
        inserted.setdefault(after, []).append(buffer)
        steps[t] = dataclasses.replace(step, b=PanelView(buffer.name, PANEL, k))
    unread = {step.b.buffer for step in (program.steps[t] for t in packed)}
    buffers = {}
    for name, buf in program.buffers.items():
        if name not in unread:
            buffers[name] = buf
        else:
            weights.pop(buf.source, None)
        for panels in inserted.get(name, ()):
            buffers[panels.name] = panels
    return dataclasses.replace(program, buffers=buffers, steps=tuple(steps), weights=weights)
