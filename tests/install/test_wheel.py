"""The runtime as a C++ user gets it: a wheel built by `pip wheel .`, installed into a fresh venv, found by
CMake through `aotpack --cmake-dir` alone, running examples/cpp_service; and `cmake --install` of runtime_cpp
giving the same layout.

The wheel is built once per session into build/wheel (scikit-build-core's build folder, so a second run of
these tests only relinks). The fresh venv gets the wheel without its dependencies, then only click and numpy,
which its CLI and Python binding import: the runtime pieces need no torch. The package is exported with the
dev venv's toolchain, the way a service receives one.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
HEADERS = ("aotpack.h", "aotpack.hpp", "aotpack_kernel_abi.h")
CMAKE_FILES = ("aotpackConfig.cmake", "aotpackConfigVersion.cmake", "aotpackTargets.cmake")
# Top-level packages of the repository that are not part of the installed package.
NOT_SHIPPED = {"bench", "tests", "examples", "scripts", "docs", "runtime_cpp", "build"}


def run(args, env=None, cwd=None, check=True) -> subprocess.CompletedProcess:
    done = subprocess.run([str(a) for a in args], check=False, capture_output=True, text=True, env=env, cwd=cwd)
    if check:
        assert done.returncode == 0, f"{args} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}"
    return done


def bare_env(*bin_dirs: Path) -> dict[str, str]:
    """An environment with nothing of aotpack's or of the dev venv's in it: no AOTPACK_RUNTIME_LIB, no
    CMAKE_PREFIX_PATH, no LD_LIBRARY_PATH; PATH is the given folders and the system's."""
    return {"PATH": os.pathsep.join([*map(str, bin_dirs), "/usr/local/bin", "/usr/bin", "/bin"]),
            "HOME": os.environ.get("HOME", "/root"), "CMAKE_BUILD_PARALLEL_LEVEL": "2", "LANG": "C.UTF-8"}


@pytest.fixture(scope="session")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    env = {k: v for k, v in os.environ.items() if not k.startswith("AOTPACK_")}
    env["CMAKE_BUILD_PARALLEL_LEVEL"] = "2"
    run([sys.executable, "-m", "pip", "wheel", REPO, "--no-deps", "--quiet", "-w", out,
         "-C", f"build-dir={REPO / 'build' / 'wheel'}"], env=env)
    (built,) = out.glob("aotpack-*.whl")
    return built


@pytest.fixture(scope="session")
def venv(wheel, tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("venv") / "venv"
    run([sys.executable, "-m", "venv", root])
    env = {k: v for k, v in os.environ.items() if not k.startswith("AOTPACK_")}
    run([root / "bin" / "pip", "install", "--quiet", "--no-deps", wheel], env=env)
    run([root / "bin" / "pip", "install", "--quiet", "click>=8.1", "numpy>=1.24"], env=env)
    return root


@pytest.fixture(scope="session")
def site_package(venv) -> Path:
    (package,) = venv.glob("lib/python3*/site-packages/aotpack")
    return package


@pytest.fixture(scope="session")
def mlp_package(tmp_path_factory, runtime_build) -> Path:
    path = tmp_path_factory.mktemp("install") / "mlp.aotpack"
    run([sys.executable, "-m", "aotpack.cli", "export", "examples/mlp/model.py", "--dynamic", "batch=1..64",
         "-o", path, "-q"], cwd=REPO)
    return path


def test_wheel_holds_the_runtime_and_every_part_of_the_package(wheel):
    assert wheel.name == "aotpack-0.1.0-py3-none-linux_x86_64.whl"
    names = set(zipfile.ZipFile(wheel).namelist())
    runtime = {"aotpack/lib/libaotpack.so.0", "aotpack/bin/aotpack-run",
               *(f"aotpack/include/{h}" for h in HEADERS), *(f"aotpack/lib/cmake/aotpack/{c}" for c in CMAKE_FILES)}
    assert runtime <= names, runtime - names
    # Every top-level module and package of the checkout is in the wheel (pyproject.toml lists each one).
    modules = {f"aotpack/{p.name}" for p in REPO.glob("*.py")}
    packages = {f"aotpack/{p.parent.name}/__init__.py" for p in REPO.glob("*/__init__.py")
                if p.parent.name not in NOT_SHIPPED}
    assert modules | packages <= names, (modules | packages) - names
    assert "aotpack/templates/cpp/matmul.cpp.jinja" in names
    shipped_roots = {n.split("/")[1] for n in names if n.startswith("aotpack/")}
    assert not shipped_roots & NOT_SHIPPED, shipped_roots & NOT_SHIPPED


def test_wheel_ships_the_triton_backend(venv, site_package):
    """libtriton_aotpack.so beside a copy of the runtime named by its SONAME, found through RUNPATH $ORIGIN, in
    the folder `aotpack --triton-backend-dir` prints (docs/serving.md)."""
    backend = site_package / "triton_backends" / "aotpack"
    assert (backend / "libtriton_aotpack.so").is_file() and (backend / "libaotpack.so.0").is_file()
    dynamic = run(["readelf", "-d", backend / "libtriton_aotpack.so"]).stdout
    assert "Shared library: [libaotpack.so.0]" in dynamic and "$ORIGIN" in dynamic, dynamic
    assert "not found" not in run(["ldd", backend / "libtriton_aotpack.so"]).stdout
    printed = run(["aotpack", "--triton-backend-dir"], env=bare_env(venv / "bin")).stdout.strip()
    assert printed == str(site_package / "triton_backends")


def test_soname_is_versioned(site_package):
    dynamic = run(["readelf", "-d", site_package / "lib" / "libaotpack.so.0"]).stdout
    assert "Library soname: [libaotpack.so.0]" in dynamic
    assert "libcuda" not in dynamic  # opened at run time, so the wheel serves hosts without CUDA


def test_fresh_venv_finds_its_runtime(venv, site_package, mlp_package, runtime_build):
    env = bare_env(venv / "bin")
    cmake_dir = run(["aotpack", "--cmake-dir"], env=env).stdout.strip()
    assert cmake_dir == str(site_package / "lib" / "cmake" / "aotpack")
    python = run([venv / "bin" / "python", "-c", "import aotpack; print(aotpack.cmake_prefix_path)"], env=env)
    assert python.stdout.strip() == cmake_dir
    probe = ("import sys, numpy as np, aotpack; from aotpack import runtime, runtime_files; print(aotpack.__file__); "
             "print(runtime.library_path()); print(runtime_files.include_dir()); "
             "print(runtime.version()); m = runtime.Model(sys.argv[1]); s = m.session(); "
             "x = np.linspace(-2, 2, 3 * 32, dtype=np.float32).reshape(3, 32); np.save(sys.argv[2], s.run([x])[0])")
    out = mlp_package.parent / "fresh_venv_out.npy"
    found = run([venv / "bin" / "python", "-c", probe, mlp_package, out], env=env).stdout.split()
    # The wheel's own package (not the checkout), its own library, its own headers (the CPU compiler's kernel
    # ABI header at export), of the header's version.
    assert found[:4] == [str(site_package / "__init__.py"), str(site_package / "lib" / "libaotpack.so.0"),
                         str(site_package / "include"), "0.1.0"]
    # The same kernels run by the dev tree's runtime give the same bits.
    from aotpack import runtime

    x = np.linspace(-2, 2, 3 * 32, dtype=np.float32).reshape(3, 32)
    expected = runtime.Model(mlp_package).session().run([x])[0]
    got = np.load(out)
    assert got.shape == (3, 10) and np.unique(got).size > 10
    np.testing.assert_array_equal(got, expected)


def test_aotpack_run_is_on_path(venv, mlp_package):
    ran = run(["aotpack-run", mlp_package, "--sym", "batch=7"], env=bare_env(venv / "bin"))
    assert ran.stdout.startswith("digest sha256:") and "[7, 10]" in ran.stdout, ran.stdout
    missing = run(["aotpack-run", mlp_package.parent / "none.aotpack"], env=bare_env(venv / "bin"), check=False)
    assert missing.returncode != 0 and "none.aotpack" in missing.stderr and "Traceback" not in missing.stderr


def installed_prefix(runtime_build: Path, prefix: Path) -> Path:
    run(["cmake", "--install", runtime_build, "--prefix", prefix])
    return prefix


def test_cmake_install_gives_the_wheels_layout(runtime_build, site_package, tmp_path):
    prefix = installed_prefix(runtime_build, tmp_path / "prefix")
    lib = prefix / "lib"
    assert (lib / "libaotpack.so.0.1.0").is_file() and not (lib / "libaotpack.so.0.1.0").is_symlink()
    assert os.readlink(lib / "libaotpack.so.0") == "libaotpack.so.0.1.0"
    assert os.readlink(lib / "libaotpack.so") == "libaotpack.so.0"

    def layout(root: Path) -> set[str]:
        return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and p.suffix != ".py"
                and "__pycache__" not in p.parts and p.parts[len(root.parts)] in ("bin", "lib", "include")}

    # The wheel holds one library file (named by its SONAME) where a Linux prefix has the usual symlinks.
    assert layout(site_package) == layout(prefix) - {"lib/libaotpack.so", "lib/libaotpack.so.0.1.0"}
    ran = run([prefix / "bin" / "aotpack-run", "--help"], env=bare_env())
    assert ran.stdout.startswith("usage: aotpack-run PACKAGE")


def eager_error(cases: Path) -> float:
    """The worst relative error of the dumped outputs against eager PyTorch on the dumped inputs."""
    import torch
    from aotpack.exporter import load_model_file
    from aotpack.verification import relative_error

    model = load_model_file(str(REPO / "examples" / "mlp" / "model.py")).model.eval()
    tensors: dict[tuple[int, str], np.ndarray] = {}
    for line in (cases / "cases.txt").read_text().splitlines():
        k, kind, index, _name, dtype, dims = line.split()
        data = np.fromfile(cases / f"case{k}.{kind}.{index}.bin", dtype=np.dtype(dtype))
        tensors[int(k), kind] = data.reshape([int(d) for d in dims.split(",")])
    worst = 0.0
    with torch.no_grad():
        for k in sorted({k for k, _ in tensors}):
            expected = model(torch.from_numpy(tensors[k, "in"])).numpy()
            assert tensors[k, "out"].shape == expected.shape
            worst = max(worst, relative_error(tensors[k, "out"], expected))
    return worst


@pytest.mark.parametrize("source", ["wheel", "cmake --install", "build tree"])
def test_cpp_service_builds_and_serves(source, venv, runtime_build, mlp_package, tmp_path):
    env = bare_env(venv / "bin") if source == "wheel" else bare_env()
    if source == "wheel":
        prefix_path = run(["aotpack", "--cmake-dir"], env=env).stdout.strip()
    elif source == "cmake --install":
        prefix_path = str(installed_prefix(runtime_build, tmp_path / "prefix"))
    else:  # a source checkout: the dev install's --cmake-dir is the build tree, itself a CMake package
        prefix_path = run([sys.executable, "-m", "aotpack.cli", "--cmake-dir"]).stdout.strip()
        assert prefix_path == str(runtime_build)
    build = tmp_path / "build"
    run(["cmake", "-S", REPO / "examples" / "cpp_service", "-B", build, f"-DCMAKE_PREFIX_PATH={prefix_path}"], env=env)
    cache = (build / "CMakeCache.txt").read_text()
    found = re.search(r"^aotpack_DIR:PATH=(.*)$", cache, re.MULTILINE).group(1)
    assert Path(found).resolve().is_relative_to(Path(prefix_path).resolve()), found  # not the build tree
    run(["cmake", "--build", build], env=env)

    cases = tmp_path / "cases"
    cases.mkdir()
    served = run([build / "cpp_service", mlp_package, "--threads", "4", "--rounds", "10", "--dump", cases], env=env)
    assert "4 threads x 10 rounds x 5 shapes = 200 runs, all identical to the serial run" in served.stdout
    assert eager_error(cases) <= 1e-5
    # Batches 1, 64 (the range's ends) and inner ones were served.
    batches = {int(line.split()[5].split(",")[0]) for line in (cases / "cases.txt").read_text().splitlines()}
    assert {1, 64} < batches

    damaged = tmp_path / "damaged.aotpack"
    data = bytearray(mlp_package.read_bytes())
    data[len(data) // 2] ^= 0xFF
    damaged.write_bytes(bytes(data))
    refused = run([build / "cpp_service", damaged], env=env, check=False)
    assert refused.returncode == 2 and refused.stderr.startswith("cpp_service: package "), refused.stderr


def test_cpp_service_example_is_plain_cmake():
    """The example finds aotpack the way any user's project would: find_package and the exported target only."""
    text = (REPO / "examples" / "cpp_service" / "CMakeLists.txt").read_text()
    assert "find_package(aotpack 0.1 CONFIG REQUIRED)" in text and "aotpack::aotpack" in text
    assert "runtime_cpp" not in text and "include_directories" not in text and "link_directories" not in text


def test_missing_runtime_files_are_named(venv, site_package, tmp_path):
    """A package folder without the runtime (a pure-Python install) says what is missing and how to get it."""
    broken = tmp_path / "site" / "aotpack"
    shutil.copytree(site_package, broken, ignore=shutil.ignore_patterns("lib", "bin", "include"))
    probe = "import aotpack; print(aotpack.cmake_prefix_path)"
    env = {**bare_env(venv / "bin"), "PYTHONPATH": str(broken.parent)}
    failed = run([venv / "bin" / "python", "-c", probe], env=env, check=False)
    assert failed.returncode != 0
    assert f"cannot find the aotpack CMake package, aotpackConfig.cmake (looked at {broken}/lib/cmake/aotpack" in failed.stderr
    assert "pip install ." in failed.stderr
    cli = run([venv / "bin" / "python", "-m", "aotpack.cli", "--cmake-dir"], env=env, check=False)
    assert cli.returncode == 1 and cli.stderr.startswith("error: cannot find the aotpack CMake package")

