"""Runs a program's Triton kernels in Python, one step after another, with torch tensors as buffers.

With TRITON_INTERPRET=1 (set before the kernel module is loaded) Triton executes kernels on the CPU with
numpy, so the Triton templates can be checked against eager PyTorch on a machine with no GPU; on a GPU
machine the same harness launches the kernels through Triton's JIT. The C++ runtime is the product; this
is a test oracle for the generated kernels only.
"""

from __future__ import annotations

import atexit
import functools
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import sympy
import torch
from aotpack.lowering.codegen.library import RenderedLibrary
from aotpack.lowering.ir.kernels import Program
from aotpack.lowering.ir.symbolic import evaluate

TORCH_DTYPE = {"float32": torch.float32, "float64": torch.float64, "float16": torch.float16,
               "bfloat16": torch.bfloat16, "int64": torch.int64, "int32": torch.int32, "int16": torch.int16,
               "int8": torch.int8, "uint8": torch.uint8, "bool": torch.int8}


def _rint(tl, x):
    """CUDA's rint: to the nearest integer, ties to even (grid_sample's nearest mode lands on ties). floor(x + 0.5)
    rounds ties up, and x + 0.5 itself rounds for |x| >= 2^23; x - floor(x) is exact."""
    down = tl.floor(x)
    frac = x - down
    odd = (down - 2.0 * tl.floor(down * 0.5)) != 0
    return tl.where(frac > 0.5, down + 1.0, tl.where(frac < 0.5, down, tl.where(odd, down + 1.0, down)))


class _InterpretedLibdevice:
    """libdevice for the interpreter, which patches only triton.language's own math functions."""

    def __init__(self, tl) -> None:
        self.tl = tl

    def __getattr__(self, name: str):
        tl = self.tl
        direct = {"exp": tl.exp, "exp2": tl.exp2, "log": tl.log, "log2": tl.log2, "erf": tl.erf, "floor": tl.floor,
                  "ceil": tl.ceil, "sin": tl.sin, "cos": tl.cos, "sqrt": tl.sqrt}
        if name in direct:
            return direct[name]
        derived = {
            "tanh": lambda x: 2.0 / (1.0 + tl.exp(-2.0 * x)) - 1.0,
            "expm1": lambda x: tl.exp(x) - 1.0,
            "log1p": lambda x: tl.log(1.0 + x),
            "log10": lambda x: tl.log(x) * 0.4342944819032518,
            "erfc": lambda x: 1.0 - tl.erf(x),
            "tan": lambda x: tl.sin(x) / tl.cos(x),
            "trunc": lambda x: tl.where(x < 0, tl.ceil(x), tl.floor(x)),
            "rint": lambda x: _rint(tl, x),
            "fmax": lambda a, b: tl.maximum(a, b),
            "fmin": lambda a, b: tl.minimum(a, b),
            "pow": lambda a, b: tl.exp(b * tl.log(a)),
            "fmod": lambda a, b: a - b * tl.where(a / b < 0, tl.ceil(a / b), tl.floor(a / b)),
            "signbit": lambda x: (x < 0).to(tl.int32),
        }
        if name in derived:
            return derived[name]
        raise AttributeError(f"libdevice.{name} has no interpreter stand-in")


@functools.cache
def _module_dir() -> Path:
    """One folder a process for the kernel modules' files, removed when the process ends: Triton's JIT reads a
    kernel's source from its file, so each file must outlive its module's loading, but a folder per load left
    thousands behind in the temporary directory after each test run."""
    path = Path(tempfile.mkdtemp(prefix="aotpack-interp-"))
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path


def load_module(source: str, interpret: bool):
    old = os.environ.get("TRITON_INTERPRET")
    if interpret:
        os.environ["TRITON_INTERPRET"] = "1"
    try:
        import triton

        if interpret and hasattr(triton, "knobs"):
            triton.knobs.runtime.interpret = True
        path = _module_dir() / f"interp_{abs(hash(source))}.py"
        path.write_text(source)
        spec = importlib.util.spec_from_file_location(path.stem, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[path.stem] = module
        spec.loader.exec_module(module)
        if interpret:
            module.libdevice = _InterpretedLibdevice(module.tl)
            # A package for sm_90+ begins each kernel by waiting for its predecessor (programmatic dependent
            # launch); kernels run one after another here, so the wait is a no-op, as on a GPU without it.
            cuda = getattr(getattr(module.tl, "extra", None), "cuda", None)
            if cuda is not None and hasattr(cuda, "gdc_wait"):
                cuda.gdc_wait = lambda: None
        return module
    finally:
        if interpret:
            if old is None:
                os.environ.pop("TRITON_INTERPRET", None)
            else:
                os.environ["TRITON_INTERPRET"] = old
            if hasattr(triton, "knobs"):
                triton.knobs.runtime.interpret = old == "1"


def run_program(program: Program, library: RenderedLibrary, inputs: list[torch.Tensor], device: str = "cpu",
                interpret: bool = True, state: dict | None = None) -> tuple[list[torch.Tensor], list[str]]:
    """Outputs of the program on `inputs` and the messages of any failed checks. `state`, where given, receives
    the buffers ("buffers", by name), the symbols' values ("values") and the kernel symbol arguments
    ("sym_values"), so a caller can launch one step again (scripts/gpu_attention_bench.py times one)."""
    module = load_module(library.source, interpret)
    values: dict[sympy.Symbol, int] = {}
    buffers: dict[str, torch.Tensor] = {}
    for name, tensor in zip(program.inputs, inputs):
        buf = program.buffers[name]
        for size, actual in zip(buf.shape, tensor.shape):
            if sympy.sympify(size).is_Symbol:
                values[size] = int(actual)
        buffers[name] = (tensor.to(torch.int8) if tensor.dtype == torch.bool else tensor).contiguous().to(device)
    for name, buf in program.buffers.items():
        if buf.kind == "weight":
            w = program.weights[buf.source]
            buffers[name] = (w.to(torch.int8) if w.dtype == torch.bool else w).contiguous().to(device)
        elif buf.kind in ("arena", "output"):
            shape = [evaluate(s, values) for s in buf.shape]
            fill = float("nan") if buf.dtype in ("float32", "float64", "float16", "bfloat16") else 77
            buffers[name] = torch.full(shape, fill, dtype=TORCH_DTYPE[buf.dtype], device=device)
    kernels = {k.name: k for k in library.kernels}
    errors: list[str] = []
    sym_values = [values.get(s.expr, 0) for s in program.symbols]
    if state is not None:
        state.update(buffers=buffers, values=values, sym_values=sym_values)
    for step, (kname, args, grid) in enumerate(zip(library.step_kernels, library.step_args, library.step_launches)):
        variants = library.variants_of(step)
        if variants is not None:  # the runtime's choice: the first bucket the deciding size fits
            size = evaluate(variants.size, values)
            chosen = next((v for v in variants.variants if size <= v.upto), None)
            if chosen is not None:
                kname, grid = chosen.kernel, chosen.launch
        kernel = kernels[kname]
        grid = tuple(evaluate(g, values) for g in grid)
        if 0 in grid:
            continue
        call = [buffers[a] for a in args] + [sym_values[i] for i in kernel.symbols]
        flag = None
        if kernel.errors:
            flag = torch.zeros(1, dtype=torch.int32, device=device)
            call.append(flag)
        if kernel.split_programs:  # split-K: a zero count per program and its workspace, as the runtime passes
            counts = torch.zeros(kernel.split_programs, dtype=torch.int32, device=device)
            call += [counts, torch.full((kernel.split_programs * kernel.split_tile_bytes // 4,), float("nan"),
                                        dtype=torch.float32, device=device)]
            if state is not None:
                state.setdefault("split_counts", []).append(counts)
        getattr(module, kname)[grid](*call, **dict(kernel.constexprs), num_warps=kernel.num_warps)
        if flag is not None and int(flag[0]):
            errors.append(kernel.errors[int(flag[0]) - 1])
    outs = []
    for name in program.outputs:
        t = buffers[name]
        outs.append(t.bool() if program.buffers[name].dtype == "bool" else t)
    return outs, errors


def run_in_interpreter(script: str) -> dict:
    """Runs `script` in a child process under Triton's interpreter and returns the JSON report it prints last.
    TRITON_INTERPRET must be set before Triton is imported, so a test that compares a program there runs its
    comparison as a script; the script finds this folder (this module, the tests' models) as sys.argv[1]."""
    import pytest

    pytest.importorskip("triton", reason="Triton is not installed (pip install 'aotpack[cuda]')")
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    done = subprocess.run([sys.executable, "-c", script, str(Path(__file__).resolve().parent)], check=False, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])
