"""The tensors of a package's weights.safetensors, by name, without torch (packages/ must not know torch).

Read by hand from the safetensors layout (an 8-byte little-endian header length, a JSON header of
name -> dtype, shape, data_offsets, then the data): the safetensors library's numpy loader refuses
bfloat16, which numpy lacks, and `diff`/`refit` need every dtype a package may hold. Values come out as
float64 (bfloat16 widened from its bits), which is all a comparison needs.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass

import numpy as np

from ..errors import AotpackError

_NUMPY = {"F64": np.float64, "F32": np.float32, "F16": np.float16, "I64": np.int64, "I32": np.int32,
          "I16": np.int16, "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_, "U16": np.uint16, "U32": np.uint32,
          "U64": np.uint64}
# The spellings of program.json and the manifest (float32, bfloat16, ...) for safetensors' dtype codes.
DTYPE_NAMES = {"F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16", "I64": "int64",
               "I32": "int32", "I16": "int16", "I8": "int8", "U8": "uint8", "BOOL": "bool", "U16": "uint16",
               "U32": "uint32", "U64": "uint64"}


class WeightsError(AotpackError):
    """A weights file that is not valid safetensors."""


@dataclass(frozen=True)
class Tensor:
    name: str
    dtype: str  # program.json's spelling: float32, bfloat16, ...
    shape: tuple[int, ...]
    data: bytes

    def values(self) -> np.ndarray:
        """The elements as float64 (integers and booleans too), in the tensor's shape."""
        code = next(c for c, n in DTYPE_NAMES.items() if n == self.dtype)
        if code == "BF16":
            bits = np.frombuffer(self.data, dtype="<u2").astype(np.uint32) << 16
            flat = bits.view(np.float32)
        else:
            flat = np.frombuffer(self.data, dtype=np.dtype(_NUMPY[code]).newbyteorder("<"))
        return flat.astype(np.float64).reshape(self.shape)

    def describe(self) -> str:
        return f"{self.dtype}[{', '.join(map(str, self.shape))}]"


def read_tensors(data: bytes, where: str = "weights") -> dict[str, Tensor]:
    """Every tensor of a safetensors file's bytes, by name, with its offsets checked against the file."""
    if len(data) < 8:
        raise WeightsError(f"{where}: {len(data)} bytes is too short for a safetensors file")
    (header_len,) = struct.unpack("<Q", data[:8])
    if 8 + header_len > len(data):
        raise WeightsError(f"{where}: the safetensors header claims {header_len} bytes, past the end of the file")
    try:
        header = json.loads(data[8:8 + header_len])
    except ValueError as e:
        raise WeightsError(f"{where}: the safetensors header is not JSON ({e})") from e
    body = data[8 + header_len:]
    tensors = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        try:
            code, shape, (begin, end) = entry["dtype"], tuple(int(d) for d in entry["shape"]), entry["data_offsets"]
        except (KeyError, TypeError, ValueError) as e:
            raise WeightsError(f"{where}: tensor {name!r} has a malformed header entry {entry!r}") from e
        if code not in DTYPE_NAMES:
            raise WeightsError(f"{where}: tensor {name!r} has dtype {code}, which aotpack packages do not use")
        itemsize = 2 if code == "BF16" else np.dtype(_NUMPY[code]).itemsize
        if not (0 <= begin <= end <= len(body)) or end - begin != itemsize * int(np.prod(shape, dtype=np.int64)):
            raise WeightsError(f"{where}: tensor {name!r} has data offsets {begin}..{end} that do not fit "
                               f"its {code}{list(shape)} or the file")
        tensors[name] = Tensor(name, DTYPE_NAMES[code], shape, body[begin:end])
    return tensors


def mismatches(expected: dict[str, Tensor], given: dict[str, Tensor]) -> list[str]:
    """Every name, dtype or shape by which `given` differs from `expected`, one line each."""
    lines = [f"{n}: missing (expected {expected[n].describe()})" for n in sorted(expected) if n not in given]
    lines += [f"{n}: not in the package (given {given[n].describe()})" for n in sorted(given) if n not in expected]
    for n in sorted(set(expected) & set(given)):
        e, g = expected[n], given[n]
        if e.dtype != g.dtype:
            lines.append(f"{n}: dtype {g.dtype}, expected {e.dtype}")
        if e.shape != g.shape:
            lines.append(f"{n}: shape [{', '.join(map(str, g.shape))}], expected [{', '.join(map(str, e.shape))}]")
    return lines
