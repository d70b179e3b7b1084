"""scripts/kernel_resources.py on a cross-compiled CUDA package (no GPU needed): a row per kernel with the
registers and SASS instructions cuobjdump finds, and a one-line error for an architecture the package lacks."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from aotpack import export
from torch import nn

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "kernel_resources.py"


def test_every_kernel_of_a_package_gets_its_registers_and_instructions(tmp_path):
    pytest.importorskip("triton", reason="Triton is not installed (pip install 'aotpack[cuda]')")
    # bfloat16 products of up to 512 rows: their larger buckets' tiles are Hopper's wgmma
    model = nn.Sequential(nn.Linear(256, 512), nn.GELU(), nn.Linear(512, 256)).to(torch.bfloat16).eval()
    result = export(model, (torch.randn(4, 256, dtype=torch.bfloat16),), tmp_path / "mlp.aotpack", target="cuda",
                    cuda_arch=(90,), dynamic_shapes={"input": {0: "n"}}, ranges={"n": (1, 512)})
    done = subprocess.run([sys.executable, str(SCRIPT), str(result.path)], capture_output=True, text=True, check=True)
    header, *rows = done.stdout.strip().splitlines()
    assert header == "kernel | warps | shared bytes | registers | spilled bytes | SASS instructions | wgmma"
    assert rows, done.stdout
    for row in rows:
        name, warps, shared, registers, spilled, instructions, wgmma = (cell.strip() for cell in row.split("|"))
        assert name.startswith("t_") and int(warps) > 0 and int(shared) >= 0 and int(spilled) >= 0
        assert 0 < int(registers) <= 255 and int(instructions) > 10, row
        assert wgmma == "-" or re.fullmatch(r"\d+ in \d+ groups", wgmma), row  # none serialized
    assert any(row.endswith("groups") for row in rows), "no product of 64 rows used wgmma"
    missing = subprocess.run([sys.executable, str(SCRIPT), str(result.path), "--arch", "80"], check=False,
                             capture_output=True, text=True)
    assert missing.returncode != 0
    assert missing.stderr.strip() == f"kernel_resources: {result.path} has no kernels for sm_80 (it has: ['sm_90'])"
