"""The one dtype table (lowering/ir/dtypes.py) against the C API's enum, whose codes are its positions."""

from __future__ import annotations

import re
from pathlib import Path

from aotpack.lowering.ir.dtypes import DTYPES, code

HEADER = Path(__file__).resolve().parents[2] / "runtime_cpp" / "include" / "aotpack.h"


def test_codes_are_the_c_apis():
    enum = dict(re.findall(r"AOTPACK_DTYPE_(\w+) = (\d+),", HEADER.read_text()))
    assert {name.lower(): int(value) for name, value in enum.items()} == {name: code(name) for name in DTYPES}
