"""Registers, spills, shared memory, SASS instruction count and wgmma pipelining of every CUDA kernel in a
package, with no GPU.

    python scripts/kernel_resources.py PACKAGE [--arch 90] [--match SUBSTRING]

Reads each cubin the package holds for the architecture (cuda/sm_<arch>/kernels.json) and runs `cuobjdump
-res-usage` and `-sass` on it: cuobjdump from PATH, else the copy Triton ships. A kernel's instructions after
its k loop (a fused epilogue) or its registers (programs an SM) are what this counts; `aotpack inspect PACKAGE`
says which step and bucket each kernel name serves. The counts are static: a loop's body counts once.

The wgmma column is for Hopper's asynchronous matrix instructions (HGMMA): how many there are and in how many
commit groups. ptxas serializes them (its infos C7514, C7515, which Triton does not show) when it judges the
pipeline unsafe, and then each HGMMA is its own group, waited for before the next: "serialized" below. On the
H200, products so compiled took 1.6-2x their time (docs/performance.md, "Folded norms on the H200, and wgmma
that ptxas serialized").
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from aotpack.packages.reader import read_package

_INSTRUCTION = re.compile(r"^\s+/\*[0-9a-f]{4,}\*/\s+\S")  # "/*0af0*/  FFMA R1, ..." lines of -sass
_HGMMA = re.compile(r"\bHGMMA\.\S+ [^;]*;")  # "HGMMA.64x32x16.F32.BF16 R24, gdesc[UR8], R24, gsb0 ;"


def cuobjdump() -> str:
    found = shutil.which("cuobjdump")
    if found:
        return found
    try:
        import triton
    except ImportError:
        sys.exit("kernel_resources: no cuobjdump on PATH and no Triton to take its copy from")
    bundled = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    if not bundled.exists():
        sys.exit(f"kernel_resources: no cuobjdump on PATH or at {bundled}")
    return str(bundled)


def resources(cubin: bytes, tool: str) -> dict[str, int]:
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        usage = subprocess.run([tool, "-res-usage", f.name], capture_output=True, text=True, check=True).stdout
        sass = subprocess.run([tool, "-sass", f.name], capture_output=True, text=True, check=True).stdout
    fields = dict(re.findall(r"(REG|SHARED|LOCAL|STACK):(\d+)", usage))
    return {"registers": int(fields.get("REG", 0)), "local_bytes": int(fields.get("LOCAL", 0)),
            "instructions": sum(1 for line in sass.splitlines() if _INSTRUCTION.match(line)),
            "wgmma": wgmma_pipelining(sass)}


def wgmma_pipelining(sass: str) -> str:
    """"-" without HGMMA; else "N in G groups", "serialized" where every HGMMA closes a group of its own (the
    last of a commit group names the scoreboard gsb0)."""
    found = _HGMMA.findall(sass)
    if not found:
        return "-"
    groups = sum(1 for instruction in found if "gsb0" in instruction)
    return f"{len(found)} in {groups} groups" + (", serialized" if len(found) > 1 and groups == len(found) else "")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("package", type=Path)
    parser.add_argument("--arch", default="90")
    parser.add_argument("--match", default="", help="only kernels whose name contains this")
    args = parser.parse_args()
    package = read_package(args.package)
    listing = f"cuda/sm_{args.arch}/kernels.json"
    if listing not in package.members:
        archs = sorted({m.split("/")[1] for m in package.members if m.startswith("cuda/sm_")})
        sys.exit(f"kernel_resources: {args.package} has no kernels for sm_{args.arch} (it has: {archs or 'none'})")
    tool = cuobjdump()
    print("kernel | warps | shared bytes | registers | spilled bytes | SASS instructions | wgmma")
    for kernel in json.loads(package.members[listing])["kernels"]:
        if args.match not in kernel["name"]:
            continue
        found = resources(package.members[kernel["cubin"]], tool)
        print(f"{kernel['name']} | {kernel['num_warps']} | {kernel['shared']} | {found['registers']} | "
              f"{found['local_bytes']} | {found['instructions']} | {found['wgmma']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
