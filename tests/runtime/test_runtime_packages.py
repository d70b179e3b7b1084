"""Broken packages: each is refused at load with a code and a message that names what and where."""

from __future__ import annotations

import json
import struct
import zipfile
from pathlib import Path

import numpy as np
import pytest
from aotpack.packages.writer import canonical_json
from runtime_helpers import (
    LIBRARY,
    MLP_KERNELS,
    SOURCE,
    flip_byte,
    mlp_program,
    package_members,
    read_entries,
    rewrite,
    write_raw_package,
    write_test_package,
)
from safetensors.numpy import save as save_safetensors

MEMBERS = ["program.json", "weights.safetensors", LIBRARY, SOURCE]


def load_error(rt, path, **kwargs):
    with pytest.raises(rt.AotpackError) as info:
        rt.Model(path, **kwargs)
    return info.value


def test_missing_file(rt, tmp_path):
    e = load_error(rt, tmp_path / "nope.aotpack")
    assert e.code == rt.StatusCode.NOT_FOUND
    assert str(e) == f"package {tmp_path / 'nope.aotpack'}: no such file"


@pytest.mark.parametrize("keep", ["empty", 10, "half", "minus1"])
def test_truncated_file(rt, mlp_package, tmp_path, keep):
    data = mlp_package.read_bytes()
    size = {"empty": 0, "half": len(data) // 2, "minus1": len(data) - 1}.get(keep, keep)
    path = tmp_path / "truncated.aotpack"
    path.write_bytes(data[:size])
    e = load_error(rt, path)
    assert e.code == rt.StatusCode.DATA_LOSS
    assert str(e).startswith(f"package {path}: ")
    assert "empty" in str(e) or "end-of-central-directory" in str(e) or "too short" in str(e)


def test_not_a_zip(rt, tmp_path):
    path = tmp_path / "junk.aotpack"
    path.write_bytes(b"hello, this is not a zip file at all" * 10)
    e = load_error(rt, path)
    assert e.code == rt.StatusCode.DATA_LOSS and "not a zip archive" in str(e)


def test_listed_member_missing(rt, mlp_package, tmp_path):
    path = rewrite(mlp_package, tmp_path / "p.aotpack", drop=["weights.safetensors"])
    e = load_error(rt, path)
    assert e.code == rt.StatusCode.NOT_FOUND
    assert str(e) == (
        f"package {path}: member weights.safetensors is listed in manifest.json but missing from the package"
    )
    # Also without digest checks.
    assert load_error(rt, path, verify_digests=False).code == rt.StatusCode.NOT_FOUND


def test_required_member_missing_and_unlisted(rt, mlp_package, tmp_path):
    def unlist(m):
        del m["members"]["program.json"]

    path = rewrite(mlp_package, tmp_path / "p.aotpack", manifest=unlist, drop=["program.json"])
    e = load_error(rt, path)
    assert e.code == rt.StatusCode.NOT_FOUND and str(e) == f"package {path}: member program.json is missing"


def test_unlisted_member_is_refused(rt, mlp_package, tmp_path):
    entries = read_entries(mlp_package) + [("extra.bin", b"surprise")]
    path = write_raw_package(tmp_path / "p.aotpack", entries)
    e = load_error(rt, path)
    assert e.code == rt.StatusCode.DATA_LOSS
    assert "member extra.bin is not listed in manifest.json" in str(e)


@pytest.mark.parametrize("member", MEMBERS)
@pytest.mark.parametrize("where", ["start", "end"])
def test_flipped_byte_is_caught_by_digests(rt, mlp_package, tmp_path, member, where):
    size = dict(read_entries(mlp_package))[member].__len__()
    path = flip_byte(mlp_package, tmp_path / "p.aotpack", member, 0 if where == "start" else size - 1)
    e = load_error(rt, path)
    assert e.code == rt.StatusCode.DATA_LOSS
    assert str(e) == (
        f"package {path}: member {member} does not match its sha256 digest in manifest.json (the file is corrupt "
        "or was modified); re-export it, or pass verify_digests=0 only for trusted files"
    )


def test_verify_digests_false_skips_the_check(rt, mlp_package, mlp_weights_np, tmp_path):
    # The kernel source is never loaded: with checks off, the package loads and runs normally.
    size = len(dict(read_entries(mlp_package))[SOURCE])
    path = flip_byte(mlp_package, tmp_path / "src.aotpack", SOURCE, size // 2)
    x = np.random.default_rng(3).uniform(-1, 1, (4, 32)).astype(np.float32)
    (y,) = rt.Model(path, verify_digests=False).session().run([x])
    (expected,) = rt.Model(mlp_package).session().run([x])
    np.testing.assert_array_equal(y, expected)
    # A flipped bit in the last weight value goes unnoticed too, and changes the result.
    weights_size = len(dict(read_entries(mlp_package))["weights.safetensors"])
    path = flip_byte(mlp_package, tmp_path / "w.aotpack", "weights.safetensors", weights_size - 2)
    (y,) = rt.Model(path, verify_digests=False).session().run([x])
    assert not np.array_equal(y, expected)


def test_size_mismatch(rt, mlp_package, tmp_path):
    def grow(m):
        m["members"]["program.json"]["size"] += 1

    path = rewrite(mlp_package, tmp_path / "p.aotpack", manifest=grow)
    e = load_error(rt, path)
    assert e.code == rt.StatusCode.DATA_LOSS
    assert "member program.json is" in str(e) and "but manifest.json says" in str(e)


@pytest.mark.parametrize("version", [2, 0])
def test_unknown_format_version(rt, mlp_package, tmp_path, version):
    def bump(m):
        m["format_version"] = version

    path = rewrite(mlp_package, tmp_path / "p.aotpack", manifest=bump)
    e = load_error(rt, path)
    assert e.code == rt.StatusCode.UNSUPPORTED
    assert str(e).startswith(
        f"package {path}: format_version {version} is not supported: this runtime loads format_version 1 only"
    )
    # Which side to move: a newer package needs a newer runtime; an older one, a re-export or an older runtime.
    if version > 1:
        assert f"the package is newer than this runtime (aotpack {rt.version()}): upgrade the runtime" in str(e)
        assert f"loads format_version {version}" in str(e)
    else:
        assert f"re-export the model with this release (aotpack {rt.version()})" in str(e)


def test_wrong_format_name(rt, mlp_package, tmp_path):
    def rename(m):
        m["format"] = "gguf"

    e = load_error(rt, rewrite(mlp_package, tmp_path / "p.aotpack", manifest=rename))
    assert e.code == rt.StatusCode.UNSUPPORTED and '"format" is "gguf", not "aotpack"' in str(e)


def test_bad_json_in_program(rt, mlp_package, tmp_path):
    text = canonical_json(mlp_program()).replace(b'"arena_bytes": 16384', b'"arena_bytes": 16384,,')
    path = rewrite(mlp_package, tmp_path / "p.aotpack", members={"program.json": text})
    e = load_error(rt, path)
    assert e.code == rt.StatusCode.DATA_LOSS
    assert str(e).startswith(f"package {path}: program.json: invalid JSON at line ")


def test_bad_json_in_manifest(rt, mlp_package, tmp_path):
    entries = read_entries(mlp_package)
    entries[0] = ("manifest.json", entries[0][1][:-10])
    e = load_error(rt, write_raw_package(tmp_path / "p.aotpack", entries))
    assert e.code == rt.StatusCode.DATA_LOSS and "manifest.json: invalid JSON at line" in str(e)


def test_no_manifest(rt, mlp_package, tmp_path):
    entries = read_entries(mlp_package)[1:]
    e = load_error(rt, write_raw_package(tmp_path / "p.aotpack", entries))
    assert e.code == rt.StatusCode.DATA_LOSS and "no manifest.json member" in str(e)


def weights_with(mlp_weights_np, **changes):
    w = dict(mlp_weights_np)
    w.update(changes)
    return {"weights.safetensors": save_safetensors(w)}


def test_weight_shape_mismatch(rt, mlp_package, mlp_weights_np, tmp_path):
    members = weights_with(
        mlp_weights_np, **{"fc1.weight": np.ascontiguousarray(mlp_weights_np["fc1.weight"].T)}
    )
    path = rewrite(mlp_package, tmp_path / "p.aotpack", members=members)
    e = load_error(rt, path)
    assert e.code == rt.StatusCode.DATA_LOSS
    assert str(e) == (
        f'package {path}: program.json: buffers[1]: weight "fc1.weight" is float32 [64, 32] in '
        "weights.safetensors, but the program expects float32 [32, 64]"
    )


def test_weight_dtype_mismatch(rt, mlp_package, mlp_weights_np, tmp_path):
    members = weights_with(mlp_weights_np, **{"fc1.bias": mlp_weights_np["fc1.bias"].astype(np.float64)})
    e = load_error(rt, rewrite(mlp_package, tmp_path / "p.aotpack", members=members))
    assert (
        'weight "fc1.bias" is float64 [64] in weights.safetensors, but the program expects float32 [64]'
        in str(e)
    )


def test_weight_missing(rt, mlp_package, mlp_weights_np, tmp_path):
    w = dict(mlp_weights_np)
    del w["fc2.bias"]
    e = load_error(
        rt, rewrite(mlp_package, tmp_path / "p.aotpack", members={"weights.safetensors": save_safetensors(w)})
    )
    assert e.code == rt.StatusCode.DATA_LOSS
    assert 'buffers[5].weight: weight "fc2.bias" is not in weights.safetensors' in str(e)


def test_corrupt_safetensors_header(rt, mlp_package, tmp_path):
    data = bytearray(dict(read_entries(mlp_package))["weights.safetensors"])
    data[0:8] = struct.pack("<Q", len(data) * 2)
    e = load_error(
        rt, rewrite(mlp_package, tmp_path / "p.aotpack", members={"weights.safetensors": bytes(data)})
    )
    assert (
        e.code == rt.StatusCode.DATA_LOSS
        and "member weights.safetensors: safetensors header length" in str(e)
    )


def test_missing_kernel_symbol(rt, mlp_package, tmp_path):
    program = mlp_program()
    program["steps"][1]["kernel"] = "k_nope"
    path = rewrite(mlp_package, tmp_path / "p.aotpack", members={"program.json": canonical_json(program)})
    e = load_error(rt, path)
    assert e.code == rt.StatusCode.NOT_FOUND
    assert str(e) == (
        f"package {path}: program.json steps[1]: kernel k_nope is not in the kernel table of the CPU kernel "
        f"library {LIBRARY}"
    )


def test_kernel_abi_version_mismatch(rt, mlp_weights_np, tmp_path):
    path = write_test_package(
        tmp_path / "p.aotpack", mlp_program(), MLP_KERNELS, mlp_weights_np, abi_version=2
    )
    e = load_error(rt, path)
    assert e.code == rt.StatusCode.UNSUPPORTED
    assert "was built for kernel ABI version 2, but this runtime implements version 1" in str(e)


def test_library_not_an_elf(rt, mlp_package, tmp_path):
    e = load_error(
        rt, rewrite(mlp_package, tmp_path / "p.aotpack", members={LIBRARY: b"\x7fELF garbage" * 100})
    )
    assert e.code == rt.StatusCode.DATA_LOSS
    assert str(e).endswith(f"{LIBRARY} is not a whole kernel library: ELF class 32 and data encoding 103 are not ELF's")


def _host_has(flag: str) -> bool:
    return flag in Path("/proc/cpuinfo").read_text().split()


@pytest.mark.skipif(_host_has("avx512f"), reason="the host has AVX-512")
def test_isa_the_host_lacks(rt, mlp_package, tmp_path):
    def v4(m):
        m["targets"][0]["isa"] = "x86-64-v4"

    e = load_error(rt, rewrite(mlp_package, tmp_path / "p.aotpack", manifest=v4))
    assert e.code == rt.StatusCode.UNSUPPORTED
    assert "the kernels are built for x86-64-v4, but this CPU lacks avx512f" in str(e)


def test_best_supported_target_is_chosen(rt, mlp_package, tmp_path):
    def two(m):
        m["targets"] = [
            {"kind": "cuda", "arch": "sm_90", "library": "cuda/none"},
            # Never runnable here, whatever this CPU has (an x86-64-v4 entry was chosen on AVX-512 hosts and then
            # failed on its missing library).
            {"kind": "cpu", "arch": "aarch64", "isa": "generic", "library": "cpu/generic/kernels.so"},
            dict(m["targets"][0]),
        ]

    model = rt.Model(rewrite(mlp_package, tmp_path / "p.aotpack", manifest=two))
    assert model.session().run([np.ones((1, 32), np.float32)])[0].shape == (1, 10)


@pytest.mark.parametrize(
    "targets,message",
    [
        ([], 'no CPU kernel library: manifest.json "targets" has no entry of kind "cpu"'),
        (
            [{"kind": "cpu", "arch": "x86_64", "isa": "x86-64-v9", "library": LIBRARY}],
            'unknown isa "x86-64-v9"',
        ),
        ([{"kind": "cpu", "arch": "aarch64", "isa": "generic", "library": LIBRARY}], 'built for "aarch64"'),
        (
            [{"kind": "cpu", "arch": "x86_64", "isa": "generic", "library": "cpu/generic/kernels.so"}],
            "member cpu/generic/kernels.so is missing",
        ),
    ],
)
def test_bad_targets(rt, mlp_package, tmp_path, targets, message):
    def set_targets(m):
        m["targets"] = targets

    e = load_error(rt, rewrite(mlp_package, tmp_path / "p.aotpack", manifest=set_targets))
    assert message in str(e)


def test_compressed_member(rt, mlp_package, tmp_path):
    path = write_raw_package(tmp_path / "p.aotpack", read_entries(mlp_package), compress=True)
    e = load_error(rt, path)
    assert e.code == rt.StatusCode.UNSUPPORTED
    assert "is compressed (method 8); aotpack packages store every member uncompressed" in str(e)


def test_zip64_is_unsupported(rt, mlp_package, tmp_path):
    data = bytearray(mlp_package.read_bytes())
    eocd = data.rfind(b"PK\x05\x06")
    data[eocd + 8 : eocd + 12] = b"\xff\xff\xff\xff"  # entry counts that only zip64 uses
    path = tmp_path / "p.aotpack"
    path.write_bytes(bytes(data))
    e = load_error(rt, path)
    assert e.code == rt.StatusCode.UNSUPPORTED and "zip64" in str(e)


def test_unaligned_members(rt, mlp_package, tmp_path):
    path = tmp_path / "p.aotpack"
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in read_entries(mlp_package):
            zf.writestr(name, data)
    e = load_error(rt, path)
    assert e.code == rt.StatusCode.DATA_LOSS and "not a multiple of 64" in str(e)


def test_local_header_corrupt(rt, mlp_package, tmp_path):
    data = bytearray(mlp_package.read_bytes())
    data[0:4] = b"XXXX"  # the first local header's signature
    path = tmp_path / "p.aotpack"
    path.write_bytes(bytes(data))
    e = load_error(rt, path)
    assert e.code == rt.StatusCode.DATA_LOSS and 'zip member "manifest.json": no valid local header' in str(e)


def _edit(program_edit):
    program = mlp_program()
    program_edit(program)
    return program


PROGRAM_ERRORS = [
    (
        "arena offset",
        lambda p: p["buffers"][3].update(offset=32),
        "buffers[3].offset: buffer 3: arena offset 32 is not a non-negative multiple of 64",
    ),
    (
        "arena overflow",
        lambda p: p["buffers"][3].update(offset=64),
        "buffers[3]: buffer 3: offset 64 + max_bytes 16384 is past the end of the arena (arena_bytes 16384)",
    ),
    (
        "step arg",
        lambda p: p["steps"][0]["args"].__setitem__(1, 99),
        "steps[0].args[1]: buffer id 99 does not exist",
    ),
    (
        "unknown symbol",
        lambda p: p["buffers"][6].update(shape=["seq", 10]),
        'buffers[6].shape[0]: size expression names "seq", which is not a symbol of the program',
    ),
    (
        "unbound symbol",
        lambda p: p["symbols"].append({"name": "extra", "min": 1, "max": 2}),
        'symbols[1]: symbol "extra" is not a whole dim of any input, so a run could not bind it',
    ),
    (
        "bad operator",
        lambda p: p["buffers"][6].update(shape=[["^", "batch", 2], 10]),
        'buffers[6].shape[0]: unknown size operator "^"',
    ),
    (
        "bad arity",
        lambda p: p["buffers"][6].update(shape=[["//", "batch"], 10]),
        'buffers[6].shape[0]: operator "//" takes exactly 2 arguments, got 1',
    ),
    (
        "input expression",
        lambda p: p["buffers"][0].update(shape=[["+", "batch", 1], 32]),
        "buffers[0].shape[0]: an input's dim must be an integer or a symbol name",
    ),
    (
        "input index",
        lambda p: p["buffers"][0].update(input=3),
        "buffers[0].input: input index 3 is out of range (the program has 1 inputs)",
    ),
    ("duplicate id", lambda p: p["buffers"][2].update(id=1), "buffers[2].id: buffer id 1 is used twice"),
    ("missing field", lambda p: p["buffers"][3].pop("max_bytes"), 'buffers[3]: missing field "max_bytes"'),
    ("wrong type", lambda p: p.update(arena_bytes="big"), "arena_bytes: expected an integer, got a string"),
    (
        "unknown dtype",
        lambda p: p["buffers"][3].update(dtype="float8"),
        'buffers[3].dtype: unknown dtype "float8"',
    ),
    ("unknown kind", lambda p: p["buffers"][3].update(kind="scratch"), 'unknown buffer kind "scratch"'),
    (
        "port buffer",
        lambda p: p["outputs"][0].update(buffer=3),
        "outputs[0].buffer: buffer 3 is not the output buffer",
    ),
    ("bad range", lambda p: p["symbols"][0].update(min=5, max=2), 'symbol "batch" has range 5..2'),
    (
        "kernel name",
        lambda p: p["steps"][0].update(kernel="../evil"),
        'steps[0].kernel: "../evil" is not a C identifier',
    ),
    (
        "rank",
        lambda p: p["buffers"][3].update(shape=[1] * 9),
        "rank 9 is more than this runtime's maximum, 8",
    ),
]


@pytest.mark.parametrize("name,edit,message", PROGRAM_ERRORS, ids=[e[0] for e in PROGRAM_ERRORS])
def test_program_validation(rt, mlp_package, tmp_path, name, edit, message):
    program = _edit(edit)
    path = rewrite(
        mlp_package,
        tmp_path / "p.aotpack",
        members={"program.json": canonical_json(program)},
        manifest=lambda m: m["signature"].update(symbols=program["symbols"]),
    )
    e = load_error(rt, path)
    assert e.code == rt.StatusCode.DATA_LOSS
    assert str(e) == f"package {path}: program.json: {message}" or message in str(e), str(e)
    assert str(e).startswith(f"package {path}: program.json: ")


def test_signature_disagrees_with_program(rt, mlp_package, tmp_path):
    def rename(m):
        m["signature"]["inputs"][0]["name"] = "y"

    e = load_error(rt, rewrite(mlp_package, tmp_path / "p.aotpack", manifest=rename))
    assert e.code == rt.StatusCode.DATA_LOSS
    assert (
        'manifest.json signature disagrees with program.json: inputs[0] is "y" float32 ["batch", 32] in the '
        'manifest, "x" float32 ["batch", 32] in the program'
    ) in str(e)


def test_members_written_by_the_project_writer_load(rt, mlp_weights_np, tmp_path):
    """The exporter's writer and this runtime agree on the container (guards against format drift)."""
    from aotpack.packages.writer import write_package
    from runtime_helpers import base_manifest

    members = package_members(mlp_program(), MLP_KERNELS, mlp_weights_np)
    manifest = write_package(tmp_path / "w.aotpack", base_manifest(mlp_program()), members)
    model = rt.Model(tmp_path / "w.aotpack")
    assert model.manifest == json.loads(canonical_json(manifest))
