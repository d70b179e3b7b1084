"""The dtype vocabulary, in one table: what the IR, the memory plan and every backend know of a dtype.

Dtypes are torch's names ("float32", "bfloat16", "bool"): plain data for the templates, and
`getattr(torch, name)` is the torch dtype. A backend spells each one in its language
(backends/*/spelling.py) from these facts; nothing else lists the dtypes.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DType:
    name: str
    itemsize: int  # bytes per stored element
    kind: str  # "float", "int" or "bool"
    signed: bool = True
    # What kernels compute a value of this dtype in: half types are stored narrow and computed in float32
    # (a cast to one still rounds), everything else in itself.
    compute: str = ""

    @property
    def int_range(self) -> tuple[int, int]:
        """The smallest and largest value of an integer (or bool) dtype."""
        if self.kind == "bool":
            return 0, 1
        bits = 8 * self.itemsize
        return (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1) if self.signed else (0, 2 ** bits - 1)


# In the order of the C API's aotpack_dtype_t codes (runtime_cpp/include/aotpack.h): a dtype's code is its
# position here (runtime.py passes dtypes by code; tests/unit/test_dtype_table.py checks the header agrees).
DTYPES: dict[str, DType] = {d.name: d for d in (
    DType("float32", 4, "float"),
    DType("float64", 8, "float"),
    DType("float16", 2, "float", compute="float32"),
    DType("bfloat16", 2, "float", compute="float32"),
    DType("int64", 8, "int"),
    DType("int32", 4, "int"),
    DType("int16", 2, "int"),
    DType("int8", 1, "int"),
    DType("uint8", 1, "int", signed=False),
    DType("bool", 1, "bool", signed=False),
)}


def code(dtype: str) -> int:
    """The dtype's aotpack_dtype_t value."""
    return list(DTYPES).index(dtype)


def is_float(dtype: str) -> bool:
    return DTYPES[dtype].kind == "float"


def is_int(dtype: str) -> bool:
    return DTYPES[dtype].kind == "int"


def compute_dtype(dtype: str) -> str:
    """The dtype a kernel computes a value of `dtype` in (float32 for the half types)."""
    return DTYPES[dtype].compute or dtype


def itemsize(dtype: str) -> int:
    return DTYPES[dtype].itemsize
