"""One version, written once in aotpack.h: the library's aotpack_version(), its SONAME, the CMake package and
the Python package all agree with it."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import aotpack

REPO = Path(__file__).resolve().parents[2]


def header_version() -> tuple[str, str]:
    text = (REPO / "runtime_cpp" / "include" / "aotpack.h").read_text()
    parts = [re.search(rf"#define AOTPACK_VERSION_{p} (\d+)", text).group(1) for p in ("MAJOR", "MINOR", "PATCH")]
    string = re.search(r'#define AOTPACK_VERSION_STRING "([^"]+)"', text).group(1)
    return ".".join(parts), string


def test_versions_agree(rt, runtime_build):
    parts, string = header_version()
    assert parts == string == rt.version() == aotpack.__version__
    config = (runtime_build / "aotpackConfigVersion.cmake").read_text()
    assert f'set(PACKAGE_VERSION "{string}")' in config


def test_soname_carries_the_major_version(runtime_build):
    major = header_version()[1].split(".")[0]
    dynamic = subprocess.run(["readelf", "-d", str(runtime_build / "libaotpack.so")], capture_output=True, text=True,
                             check=True).stdout
    assert f"Library soname: [libaotpack.so.{major}]" in dynamic
    tool = subprocess.run(["readelf", "-d", str(runtime_build / "aotpack-run")], capture_output=True, text=True,
                          check=True).stdout
    assert f"Shared library: [libaotpack.so.{major}]" in tool
