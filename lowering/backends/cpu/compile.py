"""Compiles a rendered kernel library with the host C++ compiler, cached by the hash of what went in."""

from __future__ import annotations

import hashlib
import subprocess
import tempfile
from pathlib import Path

from .... import knobs, runtime_files
from ....errors import AotpackError
from ..cache_file import write_cache_file

# aotpack_kernel_abi.h: installed with the runtime in a wheel, in runtime_cpp/include in a source checkout.
ABI_INCLUDE = runtime_files.include_dir()

# -ffp-contract=off keeps a*b+c as two roundings, as eager PyTorch computes it. -fno-trapping-math lets
# the compiler turn the selects in elementwise code (NaN checks, clamps) into vector blends: no result
# changes, only floating-point exception flags, which nothing reads. -s strips the symbol table (kernels
# are found through the dynamic one), which also keeps temporary paths out of the file.
BASE_FLAGS = ["-std=c++17", "-O3", "-shared", "-fPIC", "-fno-math-errno", "-fno-trapping-math", "-ffp-contract=off", "-s",
              "-fvisibility=default", "-Wno-unused-variable", "-Wno-unused-but-set-variable"]


class CompileError(AotpackError):
    pass


def compiler_version(cxx: str) -> str:
    try:
        out = subprocess.run([cxx, "--version"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        raise CompileError(f"the C++ compiler {cxx!r} is not usable ({e}); install g++ or set AOTPACK_CXX") from e
    return out.splitlines()[0].strip()


def compile_cpp_library(source: str, isa: str) -> bytes:
    cxx = knobs.cxx()
    flags = [*BASE_FLAGS, f"-march={isa}", f"-I{ABI_INCLUDE}"]
    abi_header = (ABI_INCLUDE / "aotpack_kernel_abi.h").read_bytes()
    key = hashlib.sha256("\0".join([source, *flags, compiler_version(cxx)]).encode() + abi_header).hexdigest()
    cached = knobs.cache_dir() / "cpu" / f"{key}.so"
    if cached.exists():
        return cached.read_bytes()
    with tempfile.TemporaryDirectory(prefix="aotpack-cc-") as tmp:
        (Path(tmp) / "kernels.cpp").write_text(source)
        result = subprocess.run([cxx, *flags, "kernels.cpp", "-o", "kernels.so"], cwd=tmp, capture_output=True,
                                text=True)
        if result.returncode != 0:
            raise CompileError(
                "compiling the generated CPU kernels failed; this is an aotpack bug, please report it with the "
                f"model. Compiler output:\n{result.stderr[-4000:]}"
            )
        data = (Path(tmp) / "kernels.so").read_bytes()
    write_cache_file(cached, data)
    return data
