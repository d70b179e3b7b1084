"""program.json's schema (packages/program.py): what the writer writes, the reader reads back."""

from __future__ import annotations

import pytest
from aotpack.packages.program import (
    Binding,
    BufferEntry,
    ProgramDoc,
    ProgramError,
    StepEntry,
    SymbolEntry,
    program_json,
    read_program,
)

DOC = ProgramDoc(
    symbols=(SymbolEntry("batch", 1, 64),),
    inputs=(Binding("x", 0),),
    outputs=(Binding("output", 2),),
    buffers=(BufferEntry(0, "input", "float32", ("batch", 32), {"input": 0}),
             BufferEntry(1, "weight", "float32", (64, 32), {"weight": "fc1.weight"}),
             BufferEntry(2, "output", "float32", ("batch", 64), {"output": 0, "max_bytes": 16384})),
    arena_bytes=0,
    steps=(StepEntry("k_3f2a9c1b", (0, 1, 2)),),
    sections={"cuda": {"kernels": [], "steps": []}},
)


def test_written_program_reads_back():
    value = program_json(DOC)
    assert value["buffers"][2] == {"id": 2, "kind": "output", "dtype": "float32", "shape": ["batch", 64], "output": 0,
                                   "max_bytes": 16384}
    assert value["cuda"] == {"kernels": [], "steps": []}
    assert read_program(value) == DOC


def test_a_broken_program_names_the_path():
    value = program_json(DOC)
    value["steps"][0].pop("kernel")
    with pytest.raises(ProgramError, match=r"\$\.steps\[0\]\.kernel is missing"):
        read_program(value)
