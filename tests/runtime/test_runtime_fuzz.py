"""Corrupt packages never crash the loader: random byte flips and truncations give AotpackError or a model."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

from runtime_helpers import member_data_offset

SCRIPT = textwrap.dedent(
    """
    import random, sys
    from pathlib import Path
    from aotpack import runtime as rt

    src, work, seed, verify, regions = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1", sys.argv[5]
    spans = [tuple(map(int, r.split(":"))) for r in regions.split(",")]
    data = Path(src).read_bytes()
    rng = random.Random(seed)
    outcomes = {"loaded": 0, "error": 0}
    for i in range(150):
        buf = bytearray(data)
        if rng.random() < 0.15:
            buf = buf[: rng.randrange(len(buf))]
        else:
            for _ in range(rng.randint(1, 4)):
                lo, hi = rng.choice(spans)
                buf[rng.randrange(lo, hi)] = rng.randrange(256)
        path = work / f"f{i}.aotpack"
        path.write_bytes(bytes(buf))
        try:
            rt.Model(path, verify_digests=verify)
            outcomes["loaded"] += 1
        except rt.AotpackError as e:
            assert e.message and e.code in set(rt.StatusCode) - {rt.StatusCode.OK, rt.StatusCode.INTERNAL}, e
            outcomes["error"] += 1
        path.unlink()
    print(outcomes)
    """
)


def structure_regions(path: Path) -> str:
    """Byte ranges outside the digest-covered member data: headers, manifest, central directory."""
    size = path.stat().st_size
    regions, pos = [], 0
    with zipfile.ZipFile(path) as zf:
        infos = zf.infolist()
    for info in infos:
        start = member_data_offset(path, info.filename)
        if info.filename == "manifest.json":
            start += info.file_size
        if start > pos:
            regions.append(f"{pos}:{start}")
        pos = member_data_offset(path, info.filename) + info.file_size
    regions.append(f"{pos}:{size}")
    return ",".join(regions)


def fuzz(runtime_build, package: Path, tmp_path: Path, seed: int, verify: bool, regions: str) -> str:
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            SCRIPT,
            str(package),
            str(tmp_path),
            str(seed),
            "1" if verify else "0",
            regions,
        ],
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, (
        f"the loader crashed or failed (rc {result.returncode}): {result.stderr[-2000:]}"
    )
    return result.stdout


def test_fuzz_structure_with_digests(runtime_build, mlp_package, tmp_path):
    out = fuzz(runtime_build, mlp_package, tmp_path, 1, True, structure_regions(mlp_package))
    assert "'error'" in out


def test_fuzz_whole_file_with_digests(runtime_build, embed_package, tmp_path):
    size = embed_package.stat().st_size
    fuzz(runtime_build, embed_package, tmp_path, 2, True, f"0:{size}")


def test_fuzz_json_and_headers_without_digests(runtime_build, mlp_package, tmp_path):
    """Without digests the parsers still see every corrupt structure; only the kernel binary is spared."""
    with zipfile.ZipFile(mlp_package) as zf:
        program = zf.getinfo("program.json")
        weights = zf.getinfo("weights.safetensors")
    p0 = member_data_offset(mlp_package, "program.json")
    w0 = member_data_offset(mlp_package, "weights.safetensors")
    header = int.from_bytes(mlp_package.read_bytes()[w0 : w0 + 8], "little") + 8
    regions = f"{structure_regions(mlp_package)},{p0}:{p0 + program.file_size},{w0}:{w0 + min(header, weights.file_size)}"
    fuzz(runtime_build, mlp_package, tmp_path, 3, False, regions)
