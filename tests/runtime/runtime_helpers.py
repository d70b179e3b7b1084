"""Hand-made packages for the runtime tests: program.json, kernels.cpp compiled with g++, weights.

Packages are written with aotpack.packages.writer.write_package; `write_raw_package` writes the same
container with a manifest given as is, to build broken packages.
"""

from __future__ import annotations

import copy
import hashlib
import json
import struct
import subprocess
import tempfile
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
from aotpack.packages import layout
from aotpack.packages.writer import canonical_json, write_package
from safetensors.numpy import save as save_safetensors

REPO = Path(__file__).resolve().parents[2]
ISA = "x86-64-v3"
LIBRARY = layout.cpu_library(ISA)
SOURCE = layout.cpu_source(ISA)
_KERNEL_CACHE = Path(tempfile.gettempdir()) / "aotpack-test-kernels"

KERNEL_PRELUDE = """\
// Hand-written test kernels for the aotpack runtime tests.
#include <stdint.h>
#include <stdio.h>
#include "aotpack_kernel_abi.h"

extern "C" int32_t aotpack_kernel_abi_version(void) { return ABI_VERSION; }
"""


def compile_kernels(source: str, abi_version: int | None = None) -> bytes:
    """g++ -O2 -shared of `source` (with the prelude), cached by content across test runs."""
    text = KERNEL_PRELUDE.replace(
        "ABI_VERSION", str(abi_version) if abi_version is not None else "AOTPACK_KERNEL_ABI_VERSION"
    )
    text += source
    key = hashlib.sha256(text.encode()).hexdigest()[:16]
    _KERNEL_CACHE.mkdir(parents=True, exist_ok=True)
    out = _KERNEL_CACHE / f"{key}.so"
    if not out.exists():
        src = _KERNEL_CACHE / f"{key}.cpp"
        src.write_text(text)
        tmp = _KERNEL_CACHE / f"{key}.so.tmp"
        subprocess.run(
            [
                "g++",
                "-O2",
                "-std=c++17",
                "-shared",
                "-fPIC",
                "-I",
                str(REPO / "runtime_cpp" / "include"),
                "-o",
                str(tmp),
                str(src),
                "-lpthread",
            ],
            check=True,
        )
        tmp.rename(out)
    return out.read_bytes()


def signature_of(program: dict[str, Any]) -> dict[str, Any]:
    buffers = {b["id"]: b for b in program["buffers"]}

    def ports(kind: str) -> list[dict[str, Any]]:
        return [
            {
                "name": p["name"],
                "dtype": buffers[p["buffer"]]["dtype"],
                "shape": buffers[p["buffer"]]["shape"],
            }
            for p in program[kind]
        ]

    return {"symbols": program["symbols"], "inputs": ports("inputs"), "outputs": ports("outputs")}


def base_manifest(program: dict[str, Any], name: str = "test") -> dict[str, Any]:
    return {
        "name": name,
        "version": "0.1.0",
        "producer": {"aotpack": "0.1.0", "test": "tests/runtime"},
        "targets": [{"kind": "cpu", "arch": "x86_64", "isa": ISA, "library": LIBRARY}],
        "signature": signature_of(program),
        "verification": {"points": [], "max_rel_error": 0.0},
        "metadata": {},
    }


# The arguments the hand-written kernels below write, where that is not just the last one.
KERNEL_WRITES = {"k_double": {1, 2}, "k_widen": {2, 3}}


def kernel_table_source(program: dict[str, Any], writes: dict[str, set[int]] | None = None) -> str:
    """The kernel table (aotpack_kernel_abi.h) of the kernels `program`'s steps name, each argument described
    by the buffer its first step passes: what the exporter's templates/cpp/kernel_table.cpp.jinja writes."""
    writes = {**KERNEL_WRITES, **(writes or {})}
    buffers = {b["id"]: b for b in program["buffers"]}
    first: dict[str, list[int]] = {}
    for step in program["steps"]:
        first.setdefault(step["kernel"], step["args"])
    from aotpack.lowering.ir.dtypes import code

    out = ["\nnamespace {"]
    for name, args in first.items():
        written = writes.get(name, {len(args) - 1})
        rows = [
            f'  {{{"AOTPACK_ACCESS_WRITE" if i in written else "AOTPACK_ACCESS_READ"}, '
            f"{code(buffers[a]['dtype'])}, {json.dumps(json.dumps(buffers[a]['shape'], separators=(',', ':')))}}},"
            for i, a in enumerate(args)
        ]
        out += [f"const aotpack_kernel_arg_t {name}_args[] = {{", *(rows or ['  {0, 0, "[]"},']), "};"]
    out.append("const aotpack_kernel_entry_t entries[] = {")
    out += [f'  {{"{n}", &{n}, {len(a)}, {n}_args, 0}},' for n, a in first.items()]
    out += ["  {nullptr, nullptr, 0, nullptr, 0},", "};", "const aotpack_kernel_symbol_t symbols[] = {"]
    out += [f'  {{"{s["name"]}", {s["min"]}, {s["max"]}}},' for s in program["symbols"]]
    out += ['  {"", 0, 0},', "};", "}  // namespace"]
    out.append(
        "extern \"C\" const aotpack_kernel_table_t aotpack_kernel_table = {AOTPACK_KERNEL_TABLE_VERSION, "
        f"{len(first)}, entries, {len(program['symbols'])}, symbols}};"
    )
    return "\n".join(out) + "\n"


def package_members(
    program, kernels_source: str, weights: dict[str, np.ndarray], abi_version=None, table=True
) -> dict[str, bytes]:
    """table: the kernel table made from the program (kernel_table_source), or False for a library without
    one, as packages exported before tables are."""
    source = kernels_source + (kernel_table_source(program) if table else "")
    return {
        layout.PROGRAM: canonical_json(program),
        layout.WEIGHTS: save_safetensors(weights) if weights else save_safetensors({}),
        LIBRARY: compile_kernels(source, abi_version),
        SOURCE: (KERNEL_PRELUDE + source).encode(),
    }


def write_test_package(
    path, program, kernels_source, weights, *, manifest_update=None, abi_version=None, table=True
) -> Path:
    """A valid package (unless the arguments make it otherwise) written by the project's writer."""
    manifest = base_manifest(program)
    if manifest_update:
        manifest.update(manifest_update)
    write_package(path, manifest, package_members(program, kernels_source, weights, abi_version, table))
    return Path(path)


def _padding_extra(offset: int, name: bytes) -> bytes:
    pad = -(offset + 30 + len(name) + 4) % layout.ALIGNMENT
    return struct.pack("<HH", layout.PADDING_EXTRA_ID, pad) + b"\0" * pad


def write_raw_package(path, entries: list[tuple[str, bytes]], compress: bool = False) -> Path:
    """The container of write_package around `entries` given as is (manifest.json included)."""
    with open(path, "wb") as raw, zipfile.ZipFile(raw, "w", allowZip64=False) as zf:
        for name, data in entries:
            info = zipfile.ZipInfo(name, date_time=layout.ZIP_EPOCH)
            info.compress_type = zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED
            info.extra = _padding_extra(raw.tell(), name.encode())
            zf.writestr(info, data)
    return Path(path)


def read_entries(path) -> list[tuple[str, bytes]]:
    with zipfile.ZipFile(path) as zf:
        return [(i.filename, zf.read(i)) for i in zf.infolist()]


def rewrite(src, dst, *, manifest=None, members=None, drop=(), recompute_digests=True) -> Path:
    """A copy of package `src` with the manifest edited by `manifest(dict)`, members replaced or dropped."""
    entries = dict(read_entries(src))
    man = json.loads(entries.pop(layout.MANIFEST))
    for name, data in (members or {}).items():
        entries[name] = data
    if recompute_digests:
        man["members"] = {
            n: {"sha256": hashlib.sha256(d).hexdigest(), "size": len(d)} for n, d in entries.items()
        }
    if manifest:
        edited = copy.deepcopy(man)
        result = manifest(edited)
        man = edited if result is None else result
    for name in drop:
        entries.pop(name)
    return write_raw_package(dst, [(layout.MANIFEST, canonical_json(man)), *entries.items()])


def member_data_offset(path, member: str) -> int:
    with zipfile.ZipFile(path) as zf:
        info = zf.getinfo(member)
    with open(path, "rb") as f:
        f.seek(info.header_offset)
        header = f.read(30)
    name_len, extra_len = struct.unpack("<HH", header[26:30])
    return info.header_offset + 30 + name_len + extra_len


def flip_byte(src, dst, member: str, offset_in_member: int) -> Path:
    data = bytearray(Path(src).read_bytes())
    pos = member_data_offset(src, member) + offset_in_member
    data[pos] ^= 0x01
    Path(dst).write_bytes(bytes(data))
    return Path(dst)


# ---- the MLP: y = relu(x @ W1 + b1) @ W2 + b2, dynamic batch ---------------------------------------------

MLP_KERNELS = """
template <int IN, int OUT, bool RELU>
struct Linear {
  const float* x; const float* w; const float* b; float* y;
  static void rows(void* closure, int64_t begin, int64_t end) {
    const Linear* a = static_cast<const Linear*>(closure);
    for (int64_t r = begin; r < end; ++r) {
      for (int o = 0; o < OUT; ++o) {
        float acc = a->b[o];
        for (int i = 0; i < IN; ++i) acc += a->x[r * IN + i] * a->w[i * OUT + o];
        a->y[r * OUT + o] = RELU && acc < 0 ? 0.0f : acc;
      }
    }
  }
};

extern "C" void k_linear_relu_32_64(const aotpack_kernel_ctx* ctx, void* const* buf, const int64_t* sym) {
  Linear<32, 64, true> a{(const float*)buf[0], (const float*)buf[1], (const float*)buf[2], (float*)buf[3]};
  ctx->parallel_for(ctx, sym[0], 4, &Linear<32, 64, true>::rows, &a);
}

extern "C" void k_linear_64_10(const aotpack_kernel_ctx* ctx, void* const* buf, const int64_t* sym) {
  Linear<64, 10, false> a{(const float*)buf[0], (const float*)buf[1], (const float*)buf[2], (float*)buf[3]};
  ctx->parallel_for(ctx, sym[0], 4, &Linear<64, 10, false>::rows, &a);
}
"""


def mlp_program() -> dict[str, Any]:
    return {
        "symbols": [{"name": "batch", "min": 1, "max": 64}],
        "inputs": [{"name": "x", "buffer": 0}],
        "outputs": [{"name": "output", "buffer": 5}],
        "buffers": [
            {"id": 0, "kind": "input", "dtype": "float32", "shape": ["batch", 32], "input": 0},
            {"id": 1, "kind": "weight", "dtype": "float32", "shape": [32, 64], "weight": "fc1.weight"},
            {"id": 2, "kind": "weight", "dtype": "float32", "shape": [64], "weight": "fc1.bias"},
            {
                "id": 3,
                "kind": "arena",
                "dtype": "float32",
                "shape": ["batch", 64],
                "offset": 0,
                "max_bytes": 16384,
            },
            {"id": 4, "kind": "weight", "dtype": "float32", "shape": [64, 10], "weight": "fc2.weight"},
            {"id": 6, "kind": "weight", "dtype": "float32", "shape": [10], "weight": "fc2.bias"},
            {
                "id": 5,
                "kind": "output",
                "dtype": "float32",
                "shape": ["batch", 10],
                "output": 0,
                "max_bytes": 2560,
            },
        ],
        "arena_bytes": 16384,
        "steps": [
            {"kernel": "k_linear_relu_32_64", "args": [0, 1, 2, 3]},
            {"kernel": "k_linear_64_10", "args": [3, 4, 6, 5]},
        ],
    }


def mlp_weights(rng: np.random.Generator) -> dict[str, np.ndarray]:
    return {
        "fc1.weight": rng.standard_normal((32, 64)).astype(np.float32) / 4,
        "fc1.bias": rng.standard_normal(64).astype(np.float32),
        "fc2.weight": rng.standard_normal((64, 10)).astype(np.float32) / 4,
        "fc2.bias": rng.standard_normal(10).astype(np.float32),
    }


def mlp_reference(x: np.ndarray, w: dict[str, np.ndarray]) -> np.ndarray:
    x64 = x.astype(np.float64)
    h = np.maximum(x64 @ w["fc1.weight"] + w["fc1.bias"], 0)
    return h @ w["fc2.weight"] + w["fc2.bias"]


# ---- embedding: out[b, s] = table[ids[b, s]] * mask[b, s]; flat = ids + 1, two symbols --------------------

EMBED_KERNELS = """
extern "C" void k_embed(const aotpack_kernel_ctx* ctx, void* const* buf, const int64_t* sym) {
  const int64_t* ids = (const int64_t*)buf[0];
  const float* mask = (const float*)buf[1];
  const float* table = (const float*)buf[2];
  float* out = (float*)buf[3];
  int64_t n = sym[0] * sym[1];
  for (int64_t i = 0; i < n; ++i) {
    int64_t id = ids[i];
    if (id < 0 || id >= 16) {
      char message[128];
      snprintf(message, sizeof message, "index %lld is out of range for a table of 16 rows", (long long)id);
      ctx->report_error(ctx, message);
      id = id < 0 ? 0 : 15;
    }
    for (int d = 0; d < 8; ++d) out[i * 8 + d] = table[id * 8 + d] * mask[i];
  }
}

extern "C" void k_flat_plus_one(const aotpack_kernel_ctx* ctx, void* const* buf, const int64_t* sym) {
  const int64_t* ids = (const int64_t*)buf[0];
  int64_t* flat = (int64_t*)buf[1];
  for (int64_t i = 0; i < sym[0] * sym[1]; ++i) flat[i] = ids[i] + 1;
}
"""


def embed_program() -> dict[str, Any]:
    return {
        "symbols": [{"name": "batch", "min": 1, "max": 4}, {"name": "seq", "min": 1, "max": 2048}],
        "inputs": [{"name": "input_ids", "buffer": 0}, {"name": "mask", "buffer": 1}],
        "outputs": [{"name": "embeddings", "buffer": 3}, {"name": "flat", "buffer": 4}],
        "buffers": [
            {"id": 0, "kind": "input", "dtype": "int64", "shape": ["batch", "seq"], "input": 0},
            {"id": 1, "kind": "input", "dtype": "float32", "shape": ["batch", "seq"], "input": 1},
            {"id": 2, "kind": "weight", "dtype": "float32", "shape": [16, 8], "weight": "table"},
            {
                "id": 3,
                "kind": "output",
                "dtype": "float32",
                "shape": ["batch", "seq", 8],
                "output": 0,
                "max_bytes": 4 * 2048 * 8 * 4,
            },
            {
                "id": 4,
                "kind": "output",
                "dtype": "int64",
                "shape": [["*", "batch", "seq"]],
                "output": 1,
                "max_bytes": 4 * 2048 * 8,
            },
        ],
        "arena_bytes": 0,
        "steps": [{"kernel": "k_embed", "args": [0, 1, 2, 3]}, {"kernel": "k_flat_plus_one", "args": [0, 4]}],
    }


# ---- threads: y = 2x + 1 through parallel_for; also reports the threads it saw ---------------------------

THREADS_KERNELS = """
#include <mutex>
#include <set>
#include <thread>
#include <chrono>

struct Closure {
  const float* x; float* y;
  std::mutex mu; std::set<std::thread::id> seen;
};

static void chunk(void* c, int64_t begin, int64_t end) {
  Closure* a = static_cast<Closure*>(c);
  for (int64_t i = begin; i < end; ++i) a->y[i] = 2 * a->x[i] + 1;
  { std::lock_guard<std::mutex> lock(a->mu); a->seen.insert(std::this_thread::get_id()); }
  std::this_thread::sleep_for(std::chrono::milliseconds(2));
}

extern "C" void k_double(const aotpack_kernel_ctx* ctx, void* const* buf, const int64_t* sym) {
  Closure a;
  a.x = (const float*)buf[0];
  a.y = (float*)buf[1];
  ctx->parallel_for(ctx, sym[0], 1, chunk, &a);
  int64_t* info = (int64_t*)buf[2];
  info[0] = (int64_t)a.seen.size();
  info[1] = ctx->num_threads;
}
"""


def threads_program() -> dict[str, Any]:
    return {
        "symbols": [{"name": "n", "min": 1, "max": 4096}],
        "inputs": [{"name": "x", "buffer": 0}],
        "outputs": [{"name": "y", "buffer": 1}, {"name": "info", "buffer": 2}],
        "buffers": [
            {"id": 0, "kind": "input", "dtype": "float32", "shape": ["n"], "input": 0},
            {
                "id": 1,
                "kind": "output",
                "dtype": "float32",
                "shape": ["n"],
                "output": 0,
                "max_bytes": 4096 * 4,
            },
            {"id": 2, "kind": "output", "dtype": "int64", "shape": [2], "output": 1, "max_bytes": 16},
        ],
        "arena_bytes": 0,
        "steps": [{"kernel": "k_double", "args": [0, 1, 2]}],
    }
