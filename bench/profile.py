"""Time every step of a package's CPU plan, to see which kernels a model's latency goes to.

    .venv/bin/python -m bench.profile model.aotpack --sym seq=128 [--top 15]

A development tool: it loads the package's kernel library with ctypes and calls the kernels itself through
the kernel ABI (single-threaded, scratch and arena from numpy), in the order of program.json, on random
inputs. The C++ runtime is not involved, so there is no per-step hook to add there.
"""

from __future__ import annotations

import argparse
import collections
import ctypes
import json
import re
import tempfile
import time
import zipfile
from pathlib import Path

import numpy as np
from aotpack.packages.program import evaluate_size
from safetensors.numpy import load as load_safetensors

NUMPY = {"float32": np.float32, "float64": np.float64, "float16": np.float16, "bfloat16": np.uint16,
         "int64": np.int64, "int32": np.int32, "int16": np.int16, "int8": np.int8, "uint8": np.uint8, "bool": np.bool_}

RANGE_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)


class KernelCtx(ctypes.Structure):
    pass


PARALLEL_FOR = ctypes.CFUNCTYPE(None, ctypes.POINTER(KernelCtx), ctypes.c_int64, ctypes.c_int64, RANGE_FN,
                                ctypes.c_void_p)
REPORT_ERROR = ctypes.CFUNCTYPE(None, ctypes.POINTER(KernelCtx), ctypes.c_char_p)
THREAD_SCRATCH = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.POINTER(KernelCtx))
KernelCtx._fields_ = [("abi_version", ctypes.c_int32), ("num_threads", ctypes.c_int32),
                      ("parallel_for", PARALLEL_FOR), ("report_error", REPORT_ERROR), ("runtime", ctypes.c_void_p),
                      ("thread_scratch", THREAD_SCRATCH)]
KERNEL = ctypes.CFUNCTYPE(None, ctypes.POINTER(KernelCtx), ctypes.POINTER(ctypes.c_void_p),
                          ctypes.POINTER(ctypes.c_int64))


def families(source: str) -> dict[str, str]:
    """kernel name -> the template it came from, read from the generated source's header lines."""
    found = re.findall(r"templates/cpp/(\w+)\.cpp\.jinja.*?\n(?:.*\n)*?extern \"C\" void (k_\w+)", source)
    return {name: family for family, name in found}


def profile(path: Path, symbol_values: dict[str, int], repeat: int) -> list[tuple[str, str, float]]:
    with zipfile.ZipFile(path) as zf:
        program = json.loads(zf.read("program.json"))
        manifest = json.loads(zf.read("manifest.json"))
        weights = load_safetensors(zf.read("weights.safetensors"))
        target = next(t for t in manifest["targets"] if t["kind"] == "cpu")
        library_bytes = zf.read(target["library"])
        source = zf.read(target["library"].replace(".so", ".cpp")).decode()
    symbols = {s["name"]: symbol_values.get(s["name"], s["max"]) for s in program["symbols"]}
    with tempfile.NamedTemporaryFile(suffix=".so") as f:
        f.write(library_bytes)
        f.flush()
        lib = ctypes.CDLL(f.name)
    scratch_fn = getattr(lib, "aotpack_kernel_scratch_bytes", None)
    scratch = np.zeros(max(scratch_fn() if scratch_fn else 0, 64) // 4 + 16, np.float32)
    scratch_ptr = (scratch.ctypes.data + 63) // 64 * 64
    arena = np.zeros(program["arena_bytes"] // 8 + 16, np.float64)
    arena_ptr = (arena.ctypes.data + 63) // 64 * 64
    rng = np.random.default_rng(0)
    keep, pointers = [], {}
    for b in program["buffers"]:
        shape = [evaluate_size(d, symbols) for d in b["shape"]]
        if b["kind"] == "input":
            dtype = NUMPY[b["dtype"]]
            array = (rng.standard_normal(shape).astype(dtype) if np.issubdtype(dtype, np.floating)
                     else np.ones(shape, dtype))
        elif b["kind"] == "weight":
            array = np.ascontiguousarray(weights[b["weight"]])
        elif b["kind"] == "output":
            array = np.zeros(b["max_bytes"] + 64, np.uint8)
        else:
            pointers[b["id"]] = arena_ptr + b["offset"]
            continue
        keep.append(array)
        pointers[b["id"]] = array.ctypes.data

    ctx = KernelCtx(1, 1, PARALLEL_FOR(lambda c, n, grain, fn, closure: fn(closure, 0, n)),
                    REPORT_ERROR(lambda c, message: None), None, THREAD_SCRATCH(lambda c: scratch_ptr))
    symbol_array = (ctypes.c_int64 * (len(program["symbols"]) + 1))(*[symbols[s["name"]] for s in program["symbols"]])
    steps = []
    for step in program["steps"]:
        args = (ctypes.c_void_p * len(step["args"]))(*[pointers[a] for a in step["args"]])
        steps.append((step["kernel"], KERNEL((step["kernel"], lib)), args))
    kind = families(source)
    timings = collections.defaultdict(float)
    for _ in range(repeat + 1):  # the first pass warms caches and is not counted
        for i, (name, fn, args) in enumerate(steps):
            start = time.perf_counter()
            fn(ctypes.byref(ctx), args, symbol_array)
            timings[i] += (time.perf_counter() - start) if _ else 0.0
    return [(name, kind.get(name, "?"), timings[i] / repeat) for i, (name, _, _) in enumerate(steps)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("package", type=Path)
    parser.add_argument("--sym", action="append", default=[], metavar="NAME=VALUE")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--top", type=int, default=15)
    args = parser.parse_args()
    values = {k: int(v) for k, v in (s.split("=") for s in args.sym)}
    steps = profile(args.package, values, args.repeat)
    total = sum(t for _, _, t in steps)
    by_family = collections.Counter()
    for _, family, t in steps:
        by_family[family] += t
    print(f"{len(steps)} steps, {total * 1e3:.1f} ms in kernels (1 thread)")
    for family, t in by_family.most_common():
        print(f"  {family:<16} {t * 1e3:8.1f} ms  {100 * t / total:5.1f}%")
    print(f"slowest {args.top} steps:")
    for i, (name, family, t) in sorted(enumerate(steps), key=lambda x: -x[1][2])[: args.top]:
        print(f"  step {i:4d} {name} {family:<10} {t * 1e3:8.2f} ms")


if __name__ == "__main__":
    main()
