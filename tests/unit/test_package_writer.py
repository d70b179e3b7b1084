"""The package writer: alignment, digests, atomic replacement, byte-identical output."""

from __future__ import annotations

import hashlib
import zipfile

import pytest
from aotpack.packages import layout
from aotpack.packages.reader import read_package, verify_digests
from aotpack.packages.writer import write_package

MEMBERS = {
    layout.PROGRAM: b'{"steps": []}',
    layout.WEIGHTS: bytes(range(200)) * 3,
    "cpu/x86-64-v3/kernels.so": b"\x7fELF" * 9,
}


def test_members_are_stored_aligned_and_digested(tmp_path):
    path = tmp_path / "m.aotpack"
    manifest = write_package(path, {"name": "m", "version": "1.0.0"}, MEMBERS)
    assert manifest["format"] == layout.FORMAT_NAME and manifest["format_version"] == layout.FORMAT_VERSION
    with zipfile.ZipFile(path) as zf:
        infos = zf.infolist()
        assert [i.filename for i in infos] == [layout.MANIFEST, *MEMBERS]
        for info in infos:
            assert info.compress_type == zipfile.ZIP_STORED
            data_start = info.header_offset + 30 + len(info.filename) + len(info.extra)
            assert data_start % layout.ALIGNMENT == 0, info.filename
    package = read_package(path)
    assert verify_digests(package) == []
    assert package.manifest["members"][layout.WEIGHTS]["size"] == len(MEMBERS[layout.WEIGHTS])


def test_same_inputs_give_a_byte_identical_file(tmp_path):
    write_package(tmp_path / "a.aotpack", {"name": "m"}, MEMBERS)
    write_package(tmp_path / "b.aotpack", {"name": "m"}, MEMBERS)
    assert (tmp_path / "a.aotpack").read_bytes() == (tmp_path / "b.aotpack").read_bytes()


def test_an_interrupted_write_leaves_no_file_and_keeps_the_old_one(tmp_path, monkeypatch):
    path = tmp_path / "m.aotpack"
    write_package(path, {"name": "old"}, MEMBERS)
    before = path.read_bytes()

    class Interrupted(Exception):
        pass

    real_writestr = zipfile.ZipFile.writestr

    def interrupt_on_weights(self, info, data, *args, **kwargs):
        if getattr(info, "filename", info) == layout.WEIGHTS:
            raise Interrupted("killed half-way")
        return real_writestr(self, info, data, *args, **kwargs)

    monkeypatch.setattr(zipfile.ZipFile, "writestr", interrupt_on_weights)
    with pytest.raises(Interrupted):
        write_package(path, {"name": "new"}, MEMBERS)
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["m.aotpack"]  # no partial file left beside it


def test_a_modified_member_is_reported(tmp_path):
    path = tmp_path / "m.aotpack"
    write_package(path, {"name": "m"}, MEMBERS)
    package = read_package(path)
    package.members[layout.WEIGHTS] = b"tampered" + package.members[layout.WEIGHTS][8:]
    assert verify_digests(package) == [f"member {layout.WEIGHTS} does not match its sha256 in the manifest"]


KILLED_WRITER = """
import sys, time, zipfile
from aotpack.packages import layout
from aotpack.packages.writer import write_package

real = zipfile.ZipFile.writestr
def slow(self, info, data, *args, **kwargs):
    if getattr(info, "filename", info) == layout.WEIGHTS:
        print("writing", flush=True)
        time.sleep(60)  # killed here, half-way through the package
    return real(self, info, data, *args, **kwargs)
zipfile.ZipFile.writestr = slow
write_package(sys.argv[1], {"name": "killed"}, {"program.json": b"{}", layout.WEIGHTS: b"w" * 1000})
"""


def test_a_killed_export_leaves_a_partial_that_the_next_export_removes(tmp_path):
    import fcntl
    import os
    import signal
    import subprocess
    import sys

    path = tmp_path / "m.aotpack"
    child = subprocess.Popen([sys.executable, "-c", KILLED_WRITER, str(path)], stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == "writing"
    child.send_signal(signal.SIGKILL)
    child.wait()
    stale = [p for p in tmp_path.iterdir() if p.name.endswith(".partial")]
    assert len(stale) == 1 and stale[0].name.startswith(".m.aotpack.") and not path.exists()
    # A partial that a live export to the same path holds (its flock) is not touched.
    live = tmp_path / ".m.aotpack.live1234.partial"
    live.write_bytes(b"in progress")
    fd = os.open(live, os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        write_package(path, {"name": "m"}, MEMBERS)
    finally:
        os.close(fd)
    assert sorted(p.name for p in tmp_path.iterdir()) == [live.name, "m.aotpack"]
    assert verify_digests(read_package(path)) == []
    # Once its writer is gone, the next export removes it too; other packages' partials are left alone.
    other = tmp_path / ".n.aotpack.abcd.partial"
    other.write_bytes(b"another package's")
    write_package(path, {"name": "m"}, MEMBERS)
    assert sorted(p.name for p in tmp_path.iterdir()) == [other.name, "m.aotpack"]


def test_large_members_carry_the_digests_of_their_chunks(tmp_path, monkeypatch):
    """A member larger than layout.DIGEST_CHUNK_BYTES lists the sha256 of each chunk (the last one shorter) beside
    its whole sha256, which stays its identity; smaller members list only the whole."""
    monkeypatch.setattr(layout, "DIGEST_CHUNK_BYTES", 256)
    weights = bytes((i * 7 + i // 251) % 256 for i in range(1000))  # 3 full chunks and 232 bytes
    manifest = write_package(tmp_path / "m.aotpack", {"name": "m"}, {**MEMBERS, layout.WEIGHTS: weights})
    entry = manifest["members"][layout.WEIGHTS]
    assert entry["sha256"] == hashlib.sha256(weights).hexdigest() and entry["size"] == 1000
    assert entry["chunk_size"] == 256
    assert entry["chunk_sha256"] == [hashlib.sha256(weights[i:i + 256]).hexdigest() for i in (0, 256, 512, 768)]
    assert set(manifest["members"][layout.PROGRAM]) == {"sha256", "size"}  # 13 bytes: one chunk, the whole
    assert verify_digests(read_package(tmp_path / "m.aotpack")) == []


def test_verify_names_a_chunk_digest_that_disagrees_with_the_bytes(tmp_path, monkeypatch):
    """The runtime checks the chunks rather than the whole digest, so verify checks that both say the same."""
    from aotpack.packages.reader import chunk_problems

    monkeypatch.setattr(layout, "DIGEST_CHUNK_BYTES", 256)
    data = bytes((i * 7 + i // 251) % 256 for i in range(768))  # three chunks, all different
    entry = write_package(tmp_path / "m.aotpack", {"name": "m"}, {layout.WEIGHTS: data})["members"][layout.WEIGHTS]
    assert chunk_problems(data, entry) == []
    entry["chunk_sha256"][1] = entry["chunk_sha256"][0]
    assert chunk_problems(data, entry) == ["chunk 1 (bytes 256..) does not match its sha256 in the manifest"]
    entry["chunk_sha256"].pop()
    assert chunk_problems(data, entry) == ["chunk_sha256 has 2 digests, but 768 bytes make 3 chunks of 256"]
    assert chunk_problems(data, {**entry, "chunk_size": 0}) == [
        "chunk_size must be a positive integer and chunk_sha256 a list of digests"]
