"""Corrupted packages of every kind issue 13's corpus found crashing the runtime, made from one exported package.

Each mutant edits the plan, the manifest, the weights or the kernel library consistently (the digests are
recomputed, so only the runtime's own checks stand between the edit and a kernel), or damages the container
(the digests left as they were). `mutants` returns (kind, what the one-line error must say, the file's bytes).
"""

from __future__ import annotations

import copy
import hashlib
import io
import json
import struct
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aotpack.packages import layout
from aotpack.packages.writer import canonical_json, write_zip

Entries = dict[str, bytes]


@dataclass(frozen=True)
class Mutant:
    kind: str
    expect: str  # a part of the error message that names what is wrong
    data: bytes


def read_entries(data: bytes) -> Entries:
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        return {i.filename: zf.read(i) for i in zf.infolist()}


def pack(entries: Entries, recompute: bool = True) -> bytes:
    entries = dict(entries)
    manifest = json.loads(entries.pop(layout.MANIFEST))
    if recompute:
        manifest["members"] = {n: {"sha256": hashlib.sha256(d).hexdigest(), "size": len(d)} for n, d in entries.items()}
    raw = io.BytesIO()
    write_zip(raw, [(layout.MANIFEST, canonical_json(manifest)), *entries.items()])
    return raw.getvalue()


def _edit_json(entries: Entries, member: str, edit: Callable[[dict[str, Any]], None]) -> Entries:
    value = json.loads(entries[member])
    edit(value)
    return {**entries, member: canonical_json(value)}


def _library(entries: Entries) -> str:
    return next(n for n in entries if n.endswith("/kernels.so"))


def _live_overlap_target(program: dict[str, Any]) -> tuple[int, int] | None:
    """Two arena buffers (ids) live at one step: moving the second onto the first makes them overlap."""
    first: dict[int, int] = {}
    last: dict[int, int] = {}
    for t, step in enumerate(program["steps"]):
        for a in step["args"]:
            first.setdefault(a, t)
            last[a] = t
    arena = [b["id"] for b in program["buffers"] if b["kind"] == "arena" and b["id"] in first]
    for i, a in enumerate(arena):
        for b in arena[i + 1:]:
            if not (last[a] < first[b] or last[b] < first[a]):
                return a, b
    return None


def _safetensors_with(data: bytes, edit: Callable[[dict[str, Any], int], None]) -> bytes:
    """The safetensors file with its header edited (`edit(header, data_bytes)`), the data kept."""
    (length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + length])
    body = data[8 + length:]
    edit(header, len(body))
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + body


def plan_mutants(entries: Entries) -> list[tuple[str, str, Entries]]:
    """Consistent edits of program.json, manifest.json, the weights and kernels.so; digests recomputed."""
    program = json.loads(entries[layout.PROGRAM])
    buffers = {b["id"]: b for b in program["buffers"]}
    out_id = program["outputs"][0]["buffer"]
    weight_id = next(b["id"] for b in program["buffers"] if b["kind"] == "weight")
    writer = max(i for i, s in enumerate(program["steps"]) if out_id in s["args"])
    library = _library(entries)
    out: list[tuple[str, str, Entries]] = []

    def program_edit(kind: str, expect: str, edit: Callable[[dict[str, Any]], None]) -> None:
        out.append((kind, expect, _edit_json(entries, layout.PROGRAM, edit)))

    for name in ("abort", "exit", "free", "aotpack_kernel_abi_version"):
        program_edit(f"kernel={name}", f"kernel {name} is not in the kernel table",
                     lambda p, name=name: p["steps"][0].update(kernel=name))
    program_edit("args emptied", "takes", lambda p: p["steps"][0].update(args=[]))
    program_edit("args extra", "the step passes", lambda p: p["steps"][0]["args"].append(weight_id))
    program_edit("output pointed at a weight", "which is read-only",
                 lambda p: p["steps"][writer]["args"].__setitem__(-1, weight_id))
    # A read argument replaced by the step's written one where both have the same dtype and shape.
    for t, step in enumerate(program["steps"]):
        written = buffers[step["args"][-1]]
        same = [i for i, a in enumerate(step["args"][:-1])
                if (buffers[a]["dtype"], buffers[a]["shape"]) == (written["dtype"], written["shape"])]
        if same:
            program_edit("written argument aliases a read one", "must not alias",
                         lambda p, t=t, i=same[0]: p["steps"][t]["args"].__setitem__(i, p["steps"][t]["args"][-1]))
            break
    program_edit("steps: []", "is written by no step", lambda p: p.update(steps=[]))
    program_edit("last step dropped", "is written by no step", lambda p: p["steps"].pop(writer))
    program_edit("arena_bytes = 2^31", "arena_bytes 2147483648 is more than its buffers take",
                 lambda p: p.update(arena_bytes=2**31))
    arena_id = next(b["id"] for b in program["buffers"] if b["kind"] == "arena")

    def huge_buffer(p: dict[str, Any]) -> None:
        p["arena_bytes"] = 2**31
        next(b for b in p["buffers"] if b["id"] == arena_id)["max_bytes"] = 2**31 - 64

    program_edit("arena buffer max_bytes = 2^31", "is far more than", huge_buffer)
    program_edit("output max_bytes shrunk", "more than its max_bytes",
                 lambda p: next(b for b in p["buffers"] if b["id"] == out_id).update(max_bytes=4))
    overlap = _live_overlap_target(program)
    if overlap:
        a, b = overlap

        def overlapping(p: dict[str, Any]) -> None:
            # b moved onto a's bytes, and arena_bytes made what the buffers then take (as the planner computes it),
            # so that only the overlap is wrong
            next(x for x in p["buffers"] if x["id"] == b).update(offset=buffers[a]["offset"])
            p["arena_bytes"] = max(x["offset"] + -(-max(x["max_bytes"], 1) // 64) * 64
                                   for x in p["buffers"] if x["kind"] == "arena")

        program_edit("overlapping live buffers", "overlap while both are live", overlapping)
    program_edit("arg dtype changed (same size)", "but the step passes",
                 lambda p: next(b for b in p["buffers"] if b["id"] == arena_id).update(dtype="int32"))

    # The output shrunk in the plan and the signature alike: consistent everywhere but with its kernel.
    def shrink(p: dict[str, Any]) -> None:
        b = next(x for x in p["buffers"] if x["id"] == out_id)
        b["shape"][-1] = max(b["shape"][-1] // 2, 1)
        b["max_bytes"] //= 2

    shrunk = _edit_json(entries, layout.PROGRAM, shrink)
    new_shape = next(b for b in json.loads(shrunk[layout.PROGRAM])["buffers"] if b["id"] == out_id)["shape"]
    shrunk = _edit_json(shrunk, layout.MANIFEST, lambda m: m["signature"]["outputs"][0].update(shape=new_shape))
    out.append(("output shrunk in plan and signature", "but the step passes", shrunk))

    # A symbol's range widened (2^40) in the plan and the signature: the buffers no longer bound it.
    def widen(doc: dict[str, Any], key: str) -> None:
        symbols = doc["signature"]["symbols"] if key == "manifest" else doc["symbols"]
        symbols[0]["max"] = 2**40

    wide = _edit_json(_edit_json(entries, layout.PROGRAM, lambda p: widen(p, "program")), layout.MANIFEST,
                      lambda m: widen(m, "manifest"))
    out.append(("symbol range widened to 2^40", "takes", wide))

    # Weights: a tensor's data placed outside the data area, and two tensors' shapes swapped.
    def outside(header: dict[str, Any], size: int) -> None:
        name = next(k for k in header if k != "__metadata__")
        begin, end = header[name]["data_offsets"]
        header[name]["data_offsets"] = [size + 64, size + 64 + (end - begin)]

    out.append(("weight offsets outside the data", "run past",
                {**entries, layout.WEIGHTS: _safetensors_with(entries[layout.WEIGHTS], outside)}))

    def overflowing(header: dict[str, Any], size: int) -> None:
        name = next(k for k in header if k != "__metadata__")
        header[name]["data_offsets"] = [0, 2**63]

    out.append(("weight end offset 2^63", "data_offsets",
                {**entries, layout.WEIGHTS: _safetensors_with(entries[layout.WEIGHTS], overflowing)}))

    # kernels.so truncated (its digest recomputed): dlopen would map pages past the end of the file.
    so = entries[library]
    for cut in (len(so) - 1, len(so) * 3 // 4, len(so) // 2, 4096, 200, 63):
        out.append((f"kernels.so truncated to {cut} bytes", "is not a whole kernel library", {**entries, library: so[:cut]}))
    phoff = struct.unpack_from("<Q", so, 0x20)[0]
    bad_ph = bytearray(so)
    struct.pack_into("<Q", bad_ph, phoff + 8, len(so) * 16)  # the first program header's p_offset
    out.append(("kernels.so program header past the end", "is not a whole kernel library",
                {**entries, library: bytes(bad_ph)}))
    return out


def container_mutants(data: bytes) -> list[tuple[str, str, bytes]]:
    """Damage to the zip and to members, the manifest's digests left as they were."""
    entries = read_entries(data)
    out = [
        ("file truncated to half", "", data[: len(data) // 2]),
        ("file truncated by 100 bytes", "", data[:-100]),
        ("empty file", "", b""),
    ]
    flipped = bytearray(data)
    flipped[data.rindex(b"PK\x01\x02") + 20] ^= 0xFF  # a central directory entry's compressed size
    out.append(("central directory size edited", "", bytes(flipped)))
    renamed = dict(entries)
    renamed["program.jsoN"] = renamed.pop(layout.PROGRAM)
    out.append(("member renamed", "", pack(renamed, recompute=False)))
    library = _library(entries)
    changed = {**entries, library: entries[library][:-1] + bytes([entries[library][-1] ^ 1])}
    out.append(("kernels.so byte flipped, digest kept", "corrupt or was modified", pack(changed, recompute=False)))
    program = json.loads(entries[layout.PROGRAM])
    program["steps"][0]["kernel"] = "abort"
    out.append(("kernel=abort, digest kept", "corrupt or was modified",
                pack({**entries, layout.PROGRAM: canonical_json(program)}, recompute=False)))
    return out


def mutants(data: bytes) -> list[Mutant]:
    entries = read_entries(data)
    found = [Mutant(kind, expect, pack(e)) for kind, expect, e in plan_mutants(copy.deepcopy(entries))]
    found += [Mutant(kind, expect, d) for kind, expect, d in container_mutants(data)]
    return found
