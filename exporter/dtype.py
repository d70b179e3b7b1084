"""`aotpack export --dtype`: a model and its example inputs cast to one floating dtype before capture."""

from __future__ import annotations

import copy
import dataclasses

import torch

from ..errors import ModelFileError
from .model_file import ModelSpec

DTYPES = {"fp32": torch.float32, "float32": torch.float32, "bf16": torch.bfloat16, "bfloat16": torch.bfloat16,
          "fp16": torch.float16, "float16": torch.float16}


def parse_dtype(name: str) -> torch.dtype:
    try:
        return DTYPES[name]
    except KeyError:
        raise ModelFileError(f"--dtype {name}: expected one of {', '.join(DTYPES)}") from None


def with_dtype(spec: ModelSpec, dtype: torch.dtype) -> ModelSpec:
    """Floating weights, buffers and example inputs cast to `dtype`; integer and boolean ones kept (indices,
    masks). The package then stores and takes that dtype; kernels compute in float32 internally. The model as
    it was is kept (not cast in place) as verification's float32 reference."""
    model = copy.deepcopy(spec.model).to(dtype)
    examples = tuple(x.to(dtype) if x.is_floating_point() else x for x in spec.example_inputs)
    reference = spec.model if dtype != torch.float32 else None
    return dataclasses.replace(spec, model=model, example_inputs=examples, float32_model=reference)
