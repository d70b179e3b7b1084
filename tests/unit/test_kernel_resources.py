"""scripts/kernel_resources.py on a cross-compiled CUDA package (no GPU needed): a row per kernel with the
registers and SASS instructions cuobjdump finds, and a one-line error for an architecture the package lacks."""

from __future__ import annotations

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
    model = nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 16)).eval()
    result = export(model, (torch.randn(4, 32),), tmp_path / "mlp.aotpack", target="cuda", cuda_arch=(90,),
                    dynamic_shapes={"input": {0: "n"}}, ranges={"n": (1, 64)})
    done = subprocess.run([sys.executable, str(SCRIPT), str(result.path)], capture_output=True, text=True, check=True)
    header, *rows = done.stdout.strip().splitlines()
    assert header == "kernel | warps | shared bytes | registers | spilled bytes | SASS instructions"
    assert rows, done.stdout
    for row in rows:
        name, warps, shared, registers, spilled, instructions = (cell.strip() for cell in row.split("|"))
        assert name.startswith("t_") and int(warps) > 0 and int(shared) >= 0 and int(spilled) >= 0
        assert 0 < int(registers) <= 255 and int(instructions) > 10, row
    missing = subprocess.run([sys.executable, str(SCRIPT), str(result.path), "--arch", "80"], check=False,
                             capture_output=True, text=True)
    assert missing.returncode != 0
    assert missing.stderr.strip() == f"kernel_resources: {result.path} has no kernels for sm_80 (it has: ['sm_90'])"
