"""The package digest: one string that names one exact package.

    digest = "sha256:" + sha256(manifest.json as stored in the package)

The manifest lists the sha256 and size of every other member, so the digest covers them all. The stored
manifest must be in canonical form, `writer.canonical_json` of its own value (keys sorted, one-space
indents, ASCII only, a final newline); a reader that finds anything else refuses the package. So the
digest is both "the hash of the manifest's bytes" (what a C reader computes, with no JSON writer of its
own) and "the hash of the manifest's value" (whitespace or key order cannot give one package two
digests). `container_problems` then ties the remaining zip bytes (headers, padding, directory) to the
members: the writer is deterministic, so one digest names one file, byte for byte.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path

from . import layout
from .writer import canonical_json, write_zip

_CHUNK = 1 << 20
PREFIX = "sha256:"  # the spelling OCI registries and the Sigstore bundle use for a digest


def package_digest(manifest_bytes: bytes) -> str:
    return PREFIX + hashlib.sha256(manifest_bytes).hexdigest()


def manifest_problems(manifest_bytes: bytes) -> list[str]:
    """Why the stored manifest is not canonical (empty when it is): such a manifest was edited by hand."""
    try:
        value = json.loads(manifest_bytes)
    except ValueError as e:
        return [f"member {layout.MANIFEST} is not valid JSON ({e})"]
    if canonical_json(value) != manifest_bytes:
        return [f"member {layout.MANIFEST} is not in canonical form (it was edited after export)"]
    return []


def container_problems(path: Path, manifest_bytes: bytes, members: Mapping[str, bytes]) -> list[str]:
    """Compares the file with what the writer makes of these members; names the first differing byte.

    Member data is covered by the digests; this covers the bytes around it (zip headers, padding, the
    central directory), which no consumer needs but which a byte-for-byte identity must include."""
    # The expected file goes to a temporary file, not memory: the members are already in memory once, and
    # a package can be gigabytes. (zipfile seeks back to fill in each local header, so no streaming compare.)
    with tempfile.TemporaryFile() as expected, open(path, "rb") as actual:
        write_zip(expected, [(layout.MANIFEST, manifest_bytes), *members.items()])
        want_size, have_size = expected.tell(), os.fstat(actual.fileno()).st_size
        expected.seek(0)
        offset = 0
        while True:
            want, have = expected.read(_CHUNK), actual.read(_CHUNK)
            if want != have:
                at = offset + next((i for i, (a, b) in enumerate(zip(want, have)) if a != b), min(len(want), len(have)))
                return [(f"the zip container differs from the layout aotpack writes for these members at byte {at} "
                         f"(file {have_size} bytes, expected {want_size})")]
            if not want:
                return []
            offset += len(want)
