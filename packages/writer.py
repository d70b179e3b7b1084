"""Writes a package file: stored, 64-byte-aligned zip members, a manifest with digests, atomically."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import struct
import tempfile
import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, BinaryIO

from . import layout


def canonical_json(value: Any) -> bytes:
    """JSON that is the same bytes for the same value: sorted keys, no trailing spaces, a final newline."""
    return (json.dumps(value, indent=1, sort_keys=True, ensure_ascii=True) + "\n").encode()


def sha256(data: bytes | memoryview) -> str:
    return hashlib.sha256(data).hexdigest()


def member_entry(data: bytes) -> dict[str, Any]:
    """A member's record in the manifest: its sha256 and size (its identity), and for a member larger than
    layout.DIGEST_CHUNK_BYTES the sha256 of each chunk of that size (the last one shorter), so that the runtime
    can hash one large member on several threads. A SHA-256 stream cannot be split, hence the second list."""
    entry: dict[str, Any] = {"sha256": sha256(data), "size": len(data)}
    chunk = layout.DIGEST_CHUNK_BYTES
    if len(data) > chunk:
        view = memoryview(data)
        entry["chunk_size"] = chunk
        entry["chunk_sha256"] = [sha256(view[i:i + chunk]) for i in range(0, len(data), chunk)]
    return entry


def build_manifest(manifest: Mapping[str, Any], members: Mapping[str, bytes]) -> dict[str, Any]:
    """Completes `manifest` with the format identity and the record of every member (member_entry)."""
    out = dict(manifest)
    out["format"] = layout.FORMAT_NAME
    out["format_version"] = layout.FORMAT_VERSION
    out["members"] = {name: member_entry(data) for name, data in members.items()}
    return out


def _padding_extra(header_offset: int, name: bytes) -> bytes:
    """An extra field that makes the member's data start on a multiple of layout.ALIGNMENT."""
    fixed = 30 + len(name)  # zip local file header size before the extra field
    start = header_offset + fixed + 4  # 4 bytes of extra-field header (id, size)
    pad = -start % layout.ALIGNMENT
    return struct.pack("<HH", layout.PADDING_EXTRA_ID, pad) + b"\0" * pad


def write_zip(raw: BinaryIO, entries: Sequence[tuple[str, bytes]]) -> None:
    """The container: `entries` as stored, aligned zip members in the given order, with fixed metadata.
    Also used to check that a package file is exactly what this writer makes of its members."""
    with zipfile.ZipFile(raw, "w", compression=zipfile.ZIP_STORED, allowZip64=False) as zf:
        for name, data in entries:
            info = zipfile.ZipInfo(name, date_time=layout.ZIP_EPOCH)
            info.compress_type = zipfile.ZIP_STORED
            info.external_attr = 0o644 << 16
            info.create_system = 3  # unix, whatever the host
            info.extra = _padding_extra(raw.tell(), name.encode())
            zf.writestr(info, data)


_PARTIAL_SUFFIX = ".partial"


def _partial_prefix(path: Path) -> str:
    return f".{path.name}."


def remove_stale_partials(path: str | os.PathLike[str]) -> list[Path]:
    """Removes the `.NAME.XXXX.partial` files that writes to `path` interrupted (a killed export) left beside
    it; returns them. A write in progress holds an exclusive flock on its partial file, so a partial whose
    lock can be taken belongs to no live writer (the kernel drops a dead process's locks), while one being
    written by a concurrent export to the same path is left alone."""
    path = Path(path)
    removed = []
    prefix = _partial_prefix(path)
    try:
        candidates = [p for p in path.parent.iterdir() if p.name.startswith(prefix) and p.name.endswith(_PARTIAL_SUFFIX)]
    except OSError:
        return removed
    for candidate in candidates:
        try:
            fd = os.open(candidate, os.O_RDONLY | os.O_NOFOLLOW)
        except OSError:
            continue  # gone meanwhile, or not a plain file we may open
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            continue  # a live writer holds it
        try:
            candidate.unlink()
            removed.append(candidate)
        except OSError:
            pass
        finally:
            os.close(fd)
    return removed


def write_package(path: str | os.PathLike[str], manifest: Mapping[str, Any], members: Mapping[str, bytes]) -> dict:
    """Writes manifest.json then `members` (in the given order) to `path`; returns the final manifest.

    The file appears at `path` only once complete (written beside it, then renamed), so an interrupted
    export never leaves a partial package at `path`; the hidden partial file a killed export leaves beside it
    is removed by the next write to the same path (remove_stale_partials).
    """
    path = Path(path)
    full_manifest = build_manifest(manifest, members)
    entries = [(layout.MANIFEST, canonical_json(full_manifest)), *members.items()]
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_partials(path)
    fd, tmp = tempfile.mkstemp(prefix=_partial_prefix(path), suffix=_PARTIAL_SUFFIX, dir=path.parent)
    try:
        # Held until the file is closed: tells remove_stale_partials that this writer is alive.
        fcntl.flock(fd, fcntl.LOCK_EX)
        with os.fdopen(fd, "wb") as raw:
            write_zip(raw, entries)
            raw.flush()
            os.fsync(raw.fileno())
        # mkstemp creates the file private (0600); give it the permissions a plain open() would.
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return full_manifest
