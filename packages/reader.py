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
from .program import ProgramDoc, read_program
from .writer import sha256


class PackageError(AotpackError):
    """A package that is not a valid aotpack package; the message says what and where."""


@dataclass(frozen=True)
class Package:
    path: Path
    manifest: dict[str, Any]
    members: dict[str, bytes]

    @property
    def program(self) -> ProgramDoc:
        return read_program(json.loads(self.members[layout.PROGRAM]))


def read_package(path: str | Path) -> Package:
    path = Path(path)
    try:
        with zipfile.ZipFile(path) as zf, open(path, "rb") as raw:
            members = {info.filename: _stored_bytes(raw, info) for info in zf.infolist()}
    except (OSError, zipfile.BadZipFile, struct.error) as e:
        raise PackageError(f"{path}: not a readable aotpack package ({e})") from e
    if layout.MANIFEST not in members:
        raise PackageError(f"{path}: no {layout.MANIFEST}; is this an aotpack package?")
    manifest = json.loads(members.pop(layout.MANIFEST))
    if manifest.get("format") != layout.FORMAT_NAME:
        raise PackageError(f"{path}: format is {manifest.get('format')!r}, not {layout.FORMAT_NAME!r}")
    return Package(path, manifest, members)


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
    problems += [f"member {name} is not listed in the manifest" for name in package.members if name not in listed]
    return problems
