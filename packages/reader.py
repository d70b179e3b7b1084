"""Reads a package file back for `aotpack inspect`/`verify` and for tests (the runtime has its own reader)."""

from __future__ import annotations

import json
import struct
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import AotpackError
from . import layout
from .digest import container_problems, manifest_problems, package_digest
from .program import ProgramDoc, read_program
from .writer import sha256


class PackageError(AotpackError):
    """A package that is not a valid aotpack package; the message says what and where."""


@dataclass(frozen=True)
class Package:
    path: Path
    manifest: dict[str, Any]
    members: dict[str, bytes]  # every member but manifest.json, in the file's order
    manifest_bytes: bytes = b""  # manifest.json as stored: what the package digest is the hash of

    @property
    def digest(self) -> str:
        """The package digest, "sha256:<hex>": one string for one exact package (packages/digest.py)."""
        return package_digest(self.manifest_bytes)

    @property
    def program(self) -> ProgramDoc:
        return read_program(json.loads(self.members[layout.PROGRAM]))


def read_members(path: str | Path) -> dict[str, bytes]:
    """Every member's bytes by name, manifest.json included, trusting none of them (for signatures)."""
    path = Path(path)
    try:
        with zipfile.ZipFile(path) as zf, open(path, "rb") as raw:
            return {info.filename: _stored_bytes(raw, info) for info in zf.infolist()}
    except (OSError, zipfile.BadZipFile, struct.error) as e:
        raise PackageError(f"{path}: not a readable aotpack package ({e})") from e


def read_package(path: str | Path) -> Package:
    path = Path(path)
    members = read_members(path)
    if layout.MANIFEST not in members:
        raise PackageError(f"{path}: no {layout.MANIFEST}; is this an aotpack package?")
    manifest_bytes = members.pop(layout.MANIFEST)
    try:
        manifest = json.loads(manifest_bytes)
    except ValueError as e:
        raise PackageError(f"{path}: {layout.MANIFEST} is not valid JSON ({e})") from e
    if not isinstance(manifest, dict) or manifest.get("format") != layout.FORMAT_NAME:
        format_name = manifest.get("format") if isinstance(manifest, dict) else None
        raise PackageError(f"{path}: format is {format_name!r}, not {layout.FORMAT_NAME!r}")
    return Package(path, manifest, members, manifest_bytes)


def _stored_bytes(raw: object, info: zipfile.ZipInfo) -> bytes:
    """A stored member's bytes as they are in the file. zipfile would stop at a CRC mismatch; reading
    in place lets the digest check name the damaged member instead."""
    if info.compress_type != zipfile.ZIP_STORED:
        raise zipfile.BadZipFile(f"member {info.filename} is compressed; aotpack packages store members")
    raw.seek(info.header_offset)
    header = raw.read(30)
    name_len, extra_len = struct.unpack("<HH", header[26:30])
    raw.seek(info.header_offset + 30 + name_len + extra_len)
    return raw.read(info.compress_size)


def chunk_problems(data: bytes, entry: dict[str, Any]) -> list[str]:
    """The problems of a member's chunk digests: the runtime checks those instead of the whole sha256, so they
    must say the same about the bytes."""
    size, chunks = entry.get("chunk_size"), entry.get("chunk_sha256")
    if not isinstance(size, int) or size <= 0 or not isinstance(chunks, list):
        return ["chunk_size must be a positive integer and chunk_sha256 a list of digests"]
    view = memoryview(data)
    actual = [sha256(view[i:i + size]) for i in range(0, len(data), size)]
    if len(chunks) != len(actual):
        return [f"chunk_sha256 has {len(chunks)} digests, but {len(data)} bytes make {len(actual)} chunks of {size}"]
    return [f"chunk {i} (bytes {i * size}..) does not match its sha256 in the manifest"
            for i, (want, got) in enumerate(zip(chunks, actual)) if want != got]


def verify_digests(package: Package) -> list[str]:
    """The problems found comparing the members with the manifest's digests; empty when all match."""
    problems = []
    listed = package.manifest.get("members", {})
    for name, entry in listed.items():
        data = package.members.get(name)
        if data is None:
            problems.append(f"member {name} is listed in the manifest but missing")
        elif len(data) != entry["size"] or sha256(data) != entry["sha256"]:
            problems.append(f"member {name} does not match its sha256 in the manifest")
        elif "chunk_sha256" in entry or "chunk_size" in entry:  # packages written before chunks have none
            problems += [f"member {name}: {p}" for p in chunk_problems(data, entry)]
    problems += [f"member {name} is not listed in the manifest" for name in package.members if name not in listed]
    problems += manifest_problems(package.manifest_bytes)
    if not problems:  # the container check is only worth reading once every member is right
        problems += container_problems(package.path, package.manifest_bytes, package.members)
    return problems
