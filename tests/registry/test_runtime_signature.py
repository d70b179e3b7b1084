"""The C runtime's side of issue 14: the package digest in the C API, and a signature required at load
(`aotpack_model_options_t.public_key_*`, `runtime.Model(public_key=...)`, `aotpack-run --public-key`)."""

from __future__ import annotations

import base64
import ctypes
import hashlib
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
from aotpack.packages import layout
from aotpack.packages.reader import read_package
from aotpack.packages.signing import sign_package
from aotpack.packages.writer import write_package
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

from .exports import AOTPACK, REPO, run

PREDICATE = "https://model_signing/signature/v1.0"
PAYLOAD_TYPE = "application/vnd.in-toto+json"


def _key_pair(directory: Path, stem: str, curve=None):
    key = ec.generate_private_key(curve or ec.SECP256R1())
    private, public = directory / f"{stem}.pem", directory / f"{stem}.pub.pem"
    private.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                          serialization.NoEncryption()))
    public.write_bytes(key.public_key().public_bytes(serialization.Encoding.PEM,
                                                     serialization.PublicFormat.SubjectPublicKeyInfo))
    return key, private, public


@pytest.fixture(scope="module")
def signed(tmp_path_factory, mlp_package):
    """The exported MLP package, copied and signed with `aotpack sign` (its signature beside it, PKG.sig)."""
    directory = tmp_path_factory.mktemp("runtime-signature")
    path = directory / "mlp.aotpack"
    path.write_bytes(mlp_package.read_bytes())
    key, private, public = _key_pair(directory, "key")
    result = run([*AOTPACK, "sign", str(path), "--key", str(private)])
    assert result.returncode == 0, result.stderr
    signature = Path(f"{path}.sig")
    assert signature.is_file()
    return {"path": path, "signature": signature, "key": key, "private": private, "public": public,
            "directory": directory}


def _rt():
    from aotpack import runtime

    return runtime


def _load_error(path, **kwargs):
    rt = _rt()
    with pytest.raises(rt.AotpackError) as info:
        rt.Model(path, **kwargs)
    return info.value


def _runs(model) -> np.ndarray:
    (y,) = model.session().run([np.ones((3, 32), np.float32)])
    return y


# ---- the package digest --------------------------------------------------------------------------------


def test_c_digest_is_the_python_digest(mlp_package, runtime_build):
    digest = read_package(mlp_package).digest
    assert digest == "sha256:" + hashlib.sha256(zipfile.ZipFile(mlp_package).read(layout.MANIFEST)).hexdigest()
    assert _rt().Model(mlp_package).digest == digest
    inspected = run([*AOTPACK, "inspect", str(mlp_package)])
    assert inspected.returncode == 0 and digest in inspected.stdout
    tool = run([str(runtime_build / "aotpack-run"), str(mlp_package), "--repeat", "0"])
    assert tool.returncode == 0, tool.stderr
    assert tool.stdout.splitlines()[0] == f"digest {digest}"


# ---- a signature required at load ----------------------------------------------------------------------


def test_signed_package_loads_with_its_key(signed):
    rt = _rt()
    plain = _runs(rt.Model(signed["path"]))
    by_path = rt.Model(signed["path"], public_key=signed["public"])  # the signature at its default, PKG.sig
    by_pem = rt.Model(signed["path"], public_key=signed["public"].read_bytes(), signature=signed["signature"])
    assert by_path.digest == by_pem.digest == read_package(signed["path"]).digest
    np.testing.assert_array_equal(_runs(by_path), plain)
    np.testing.assert_array_equal(_runs(by_pem), plain)
    # verify_digests=False skips the manifest's digest check, never the signature's.
    rt.Model(signed["path"], verify_digests=False, public_key=signed["public"])


def test_another_key_is_refused(signed):
    _, _, other = _key_pair(signed["directory"], "other")
    e = _load_error(signed["path"], public_key=other)
    assert e.code == _rt().StatusCode.DATA_LOSS
    assert e.message == (f"package {signed['path']}: signature {signed['signature']}: the signature does not "
                         f"verify with public key {other} (signed with another key, or the signature file was changed)")
    e = _load_error(signed["path"], public_key=other.read_bytes())
    assert "does not verify with the public key given in options.public_key_pem" in e.message


def test_a_p384_key_verifies_too(signed, tmp_path):
    """model-signing signs with SHA-384 for P-384 keys; the runtime chooses the hash the same way."""
    _, private, public = _key_pair(tmp_path, "p384", ec.SECP384R1())
    signature = tmp_path / "p384.sig"
    sign_package(signed["path"], signature, key=private)
    _rt().Model(signed["path"], public_key=public, signature=signature)


def _member_spans(path: Path) -> dict[str, tuple[int, int]]:
    with zipfile.ZipFile(path) as zf:
        spans = {}
        for info in zf.infolist():
            start = info.header_offset + 30 + len(info.filename.encode()) + len(info.extra)
            spans[info.filename] = (start, start + info.file_size)
    return spans


def test_any_one_byte_change_of_a_member_is_refused_naming_it(signed, tmp_path):
    data = signed["path"].read_bytes()
    spans = _member_spans(signed["path"])
    assert set(spans) == {layout.MANIFEST, layout.PROGRAM, layout.WEIGHTS, "cpu/x86-64-v3/kernels.so",
                          "cpu/x86-64-v3/kernels.cpp"}
    tampered = tmp_path / "tampered.aotpack"
    checked = 0
    for member, (start, end) in spans.items():
        size = end - start
        # The first and last bytes, and a spread across the member (every member, ten positions or more).
        positions = sorted({start, end - 1, *range(start, end, max(1, size // 10))})
        for at in positions:
            changed = bytearray(data)
            changed[at] ^= 0x01
            tampered.write_bytes(bytes(changed))
            e = _load_error(tampered, public_key=signed["public"], signature=signed["signature"])
            assert e.code == _rt().StatusCode.DATA_LOSS, (member, at, e.message)
            assert e.message == (f"package {tampered}: does not match signature {signed['signature']}: "
                                 f"member {member} was changed after signing"), (member, at)
            checked += 1
    assert checked >= 50


def _rewrite(source: Path, target: Path, replace: dict[str, bytes] | None = None, drop=(), add=None) -> Path:
    """`source` with members replaced, dropped or added, its manifest's digests made to match (so only a
    signature can tell)."""
    package = read_package(source)
    manifest = {k: v for k, v in package.manifest.items() if k not in ("format", "format_version", "members")}
    members = {n: d for n, d in package.members.items() if n not in drop}
    members.update(replace or {})
    members.update(add or {})
    write_package(target, manifest, members)
    return target


def test_a_member_added_or_removed_after_signing_is_refused(signed, tmp_path):
    extra = _rewrite(signed["path"], tmp_path / "extra.aotpack", add={"notes.txt": b"hello"})
    e = _load_error(extra, public_key=signed["public"], signature=signed["signature"])
    # The manifest lists the new member, so it changed as well.
    assert e.message.endswith("member manifest.json was changed after signing; member notes.txt was not signed")
    fewer = _rewrite(signed["path"], tmp_path / "fewer.aotpack", drop=("cpu/x86-64-v3/kernels.cpp",))
    e = _load_error(fewer, public_key=signed["public"], signature=signed["signature"])
    assert "member cpu/x86-64-v3/kernels.cpp was signed but is missing" in e.message


def test_no_signature_file(signed, tmp_path):
    copy = tmp_path / "unsigned.aotpack"
    copy.write_bytes(signed["path"].read_bytes())
    e = _load_error(copy, public_key=signed["public"])
    assert e.code == _rt().StatusCode.NOT_FOUND
    assert e.message == f"package {copy}: signature file {copy}.sig does not exist"


def _sign_payload(key, payload: bytes, payload_type: str = PAYLOAD_TYPE) -> str:
    pae = b"DSSEv1 %d %s %d %s" % (len(payload_type), payload_type.encode(), len(payload), payload)
    return base64.b64encode(key.sign(pae, ec.ECDSA(hashes.SHA256()))).decode()


def _bundle(key, statement, payload_type: str = PAYLOAD_TYPE) -> str:
    payload = json.dumps(statement).encode()
    return json.dumps({"mediaType": "application/vnd.dev.sigstore.bundle.v0.3+json",
                       "verificationMaterial": {"publicKey": {"hint": ""}, "tlogEntries": []},
                       "dsseEnvelope": {"payload": base64.b64encode(payload).decode(), "payloadType": payload_type,
                                        "signatures": [{"sig": _sign_payload(key, payload, payload_type),
                                                        "keyid": ""}]}})


def _statement(signed) -> dict:
    bundle = json.loads(signed["signature"].read_text())
    return json.loads(base64.b64decode(bundle["dsseEnvelope"]["payload"]))


def _with_root(statement: dict) -> dict:
    """The statement with its subject's digest recomputed from its resources (where they can be read)."""
    try:
        digests = b"".join(bytes.fromhex(r["digest"]) for r in statement["predicate"]["resources"])
        statement["subject"][0]["digest"]["sha256"] = hashlib.sha256(digests).hexdigest()
    except (KeyError, IndexError, TypeError, ValueError, AttributeError):
        pass
    return statement


def test_our_own_bundle_writer_matches_the_library(signed, tmp_path):
    """The hand-made bundles below are valid when nothing is changed (so each refusal is about its change)."""
    good = tmp_path / "good.sig"
    good.write_text(_bundle(signed["key"], _statement(signed)))
    _rt().Model(signed["path"], public_key=signed["public"], signature=good)


def _statement_cases(signed):
    base = _statement(signed)

    def edit(fn, root=True):
        s = json.loads(json.dumps(base))
        fn(s)
        return _with_root(s) if root else s

    def drop_resource(s):
        s["predicate"]["resources"] = [r for r in s["predicate"]["resources"] if r["name"] != layout.WEIGHTS]

    def duplicate(s):
        s["predicate"]["resources"].append(dict(s["predicate"]["resources"][0]))

    return [
        (edit(drop_resource), "member weights.safetensors was not signed"),
        (edit(duplicate), "is listed twice"),
        (edit(lambda s: s["predicate"]["resources"][0].update(digest="00" * 31)), "not 64 lowercase hex digits"),
        (edit(lambda s: s["predicate"]["resources"][0].update(digest="AB" * 32)), "not 64 lowercase hex digits"),
        (edit(lambda s: s["predicate"]["resources"][0].update(algorithm="sha512")), "not sha256"),
        (edit(lambda s: s["predicate"]["resources"][0].pop("name")), "resources[0].name is missing"),
        (edit(lambda s: s["predicate"]["resources"][0].update(name=7)), "resources[0].name is an integer, expected a string"),
        (edit(lambda s: s["predicate"].update(resources={})), "payload.predicate.resources is an object"),
        (edit(lambda s: s["predicate"]["resources"].append("x")), "is a string, expected an object"),
        (edit(lambda s: s.update(predicateType="https://model_signing/Digests/v0.1")), "predicateType is"),
        (edit(lambda s: s.update(_type="https://in-toto.io/Statement/v0.1")), "payload._type is"),
        (edit(lambda s: s.update(subject=[])), "payload.subject has 0 entries, expected 1"),
        (edit(lambda s: s["subject"][0].pop("digest")), "payload.subject[0].digest is missing"),
        (edit(lambda s: s["predicate"]["serialization"].update(method="shards")), "with \"sha256\""),
        (edit(lambda s: s["predicate"]["resources"][0].update(digest="ab" * 32), root=False),
         "but the listed resources hash to"),
        ([1, 2], "the DSSE payload is an array"),
    ]


def test_a_signed_but_malformed_statement_is_refused_cleanly(signed, tmp_path):
    rt = _rt()
    signature = tmp_path / "statement.sig"
    for statement, message in _statement_cases(signed):
        signature.write_text(_bundle(signed["key"], statement))
        e = _load_error(signed["path"], public_key=signed["public"], signature=signature)
        assert e.code in (rt.StatusCode.DATA_LOSS, rt.StatusCode.UNSUPPORTED), e.message
        assert message in e.message, (message, e.message)
        assert e.message.startswith(f"package {signed['path']}: "), e.message
    # A payload that is not JSON at all, but signed.
    payload = b"\xff not json"
    envelope = {"payload": base64.b64encode(payload).decode(), "payloadType": PAYLOAD_TYPE,
                "signatures": [{"sig": _sign_payload(signed["key"], payload)}]}
    signature.write_text(json.dumps({"dsseEnvelope": envelope}))
    assert "the signed payload is not JSON" in _load_error(signed["path"], public_key=signed["public"],
                                                           signature=signature).message


def _envelope_cases(signed) -> list[tuple[str, str]]:
    text = signed["signature"].read_text()
    bundle = json.loads(text)
    env = bundle["dsseEnvelope"]

    def with_env(**fields):
        b = json.loads(text)
        b["dsseEnvelope"].update(fields)
        return json.dumps(b)

    sig = env["signatures"][0]["sig"]
    return [
        ("", "not a Sigstore bundle"),
        ("[]", "not a Sigstore bundle (an array, expected an object)"),
        ("{}", "dsseEnvelope is missing"),
        ('{"dsseEnvelope": 1}', "dsseEnvelope is an integer, expected an object"),
        (with_env(payloadType="text/plain"), "payloadType is \"text/plain\""),
        (with_env(payload=None), "dsseEnvelope.payload is null"),
        (with_env(payload="!!!!"), "dsseEnvelope.payload is not base64"),
        (with_env(payload=env["payload"][:-5]), "dsseEnvelope.payload is not base64"),
        (with_env(signatures=[]), "signatures has 0 entries, expected 1"),
        (with_env(signatures=[env["signatures"][0]] * 2), "signatures has 2 entries, expected 1"),
        (with_env(signatures=["x"]), "signatures[0] is a string"),
        (with_env(signatures=[{"keyid": ""}]), "signatures[0].sig is missing"),
        (with_env(signatures=[{"sig": ""}]), "signatures[0].sig is not base64"),
        (with_env(signatures=[{"sig": sig[:-8]}]), "does not verify"),
        (with_env(signatures=[{"sig": sig[:-7]}]), "signatures[0].sig is not base64"),
        (with_env(signatures=[{"sig": base64.b64encode(b"\x30\x02\x01").decode()}]), "does not verify"),
        (with_env(signatures=[{"sig": base64.b64encode(bytes(200)).decode()}]), "does not verify"),
        (with_env(payload=base64.b64encode(b"{}").decode()), "does not verify"),
        (text.replace('"sig":"', '"sig":"A').replace('"sig": "', '"sig": "A'), "not base64"),
    ]


def test_truncated_or_garbled_signature_files_fail_cleanly(signed, tmp_path):
    rt = _rt()
    text = signed["signature"].read_bytes()
    signature = tmp_path / "garbled.sig"
    # (bytes, a part of the expected message, whether it must fail)
    cases = [(data.encode(), message, True) for data, message in _envelope_cases(signed)]
    # Every short truncation and a sample of longer ones: each must fail.
    cases += [(text[:n], "", True) for n in sorted({*range(0, 40), *range(40, len(text.rstrip()), 23),
                                                   len(text.rstrip()) - 1})]
    # Random single bytes garbled across the file: each fails cleanly, or (in a field the check ignores,
    # such as the key hint) still verifies.
    rng = np.random.default_rng(0)
    for at in rng.integers(0, len(text), 150):
        garbled = bytearray(text)
        garbled[at] = int(rng.integers(0, 256))
        cases.append((bytes(garbled), "", False))
    cases.append((b"\x00" * 1000, "not a Sigstore bundle", True))
    cases.append((b"[" * 100000, "not a Sigstore bundle", True))
    failed = 0
    for data, message, must_fail in cases:
        signature.write_bytes(data)
        try:
            rt.Model(signed["path"], public_key=signed["public"], signature=signature)
        except rt.AotpackError as e:
            assert e.code in (rt.StatusCode.DATA_LOSS, rt.StatusCode.UNSUPPORTED), (data[:80], e.message)
            assert e.message.startswith(f"package {signed['path']}: signature {signature}: "), e.message
            assert message in e.message, (message, e.message)
            failed += 1
        else:
            assert not must_fail, (message, data[:200])
    assert failed > len(cases) * 0.8


def test_bad_keys_and_options(signed, tmp_path):
    rt = _rt()
    e = _load_error(signed["path"], public_key=signed["private"])  # the private key, by mistake
    assert e.code == rt.StatusCode.INVALID_ARGUMENT and "is not a PEM public key" in e.message
    e = _load_error(signed["path"], public_key=tmp_path / "missing.pem")
    assert e.code == rt.StatusCode.NOT_FOUND and f"public key file {tmp_path / 'missing.pem'} does not exist" in e.message
    e = _load_error(signed["path"], public_key=b"-----BEGIN PUBLIC KEY-----\ngarbage\n-----END PUBLIC KEY-----\n")
    assert e.code == rt.StatusCode.INVALID_ARGUMENT
    from cryptography.hazmat.primitives.asymmetric import ed25519

    ed = ed25519.Ed25519PrivateKey.generate().public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    e = _load_error(signed["path"], public_key=ed)
    assert e.code == rt.StatusCode.UNSUPPORTED and "is not an elliptic-curve key" in e.message
    e = _load_error(signed["path"], signature=signed["signature"])
    assert e.code == rt.StatusCode.INVALID_ARGUMENT and "signature_path is set but no public key" in e.message


def test_both_key_fields_and_old_callers(signed, runtime_build):
    """The options struct grew: a caller built against the old one (struct_size 8) still loads, unsigned."""
    rt = _rt()
    L = rt.lib()

    class OldOptions(ctypes.Structure):
        _fields_ = [("struct_size", ctypes.c_uint32), ("verify_digests", ctypes.c_int32)]

    handle = ctypes.c_void_p()
    old = OldOptions(ctypes.sizeof(OldOptions), 1)
    status = L.aotpack_model_load(os.fsencode(signed["path"]), ctypes.cast(ctypes.byref(old), ctypes.POINTER(rt._ModelOptions)),
                                  ctypes.byref(handle))
    assert not status and handle.value
    L.aotpack_model_release(handle)
    options = rt._ModelOptions()
    L.aotpack_model_options_init(ctypes.byref(options))
    assert options.struct_size == ctypes.sizeof(rt._ModelOptions) and options.verify_digests == 1
    assert not options.public_key_path and not options.public_key_pem and not options.signature_path
    options.public_key_path = os.fsencode(signed["public"])
    options.public_key_pem = signed["public"].read_bytes()
    status = L.aotpack_model_load(os.fsencode(signed["path"]), ctypes.byref(options), ctypes.byref(handle))
    with pytest.raises(rt.AotpackError, match="public_key_path and options.public_key_pem are both set"):
        rt._check(status)


def _evil_library(directory: Path) -> bytes:
    """A shared library that, once loaded, writes the file $AOTPACK_TEST_LOADED: it shows whether (and when)
    the runtime opened it."""
    source = directory / "evil.c"
    source.write_text('#include <stdio.h>\n#include <stdlib.h>\n'
                      '__attribute__((constructor)) static void loaded(void) {\n'
                      '  const char* p = getenv("AOTPACK_TEST_LOADED");\n'
                      '  if (p) { FILE* f = fopen(p, "w"); if (f) fclose(f); }\n}\n')
    out = directory / "evil.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(out), str(source)], check=True, capture_output=True)
    return out.read_bytes()


def test_no_kernel_library_is_opened_before_the_signature_check(signed, tmp_path, monkeypatch):
    """A package whose kernels.so is replaced (manifest digests updated to match): re-signed, it passes the
    signature check and fails only at the kernel step, after the library was opened; with the original
    signature it fails at the signature step, and the library was never opened."""
    rt = _rt()
    marker = tmp_path / "loaded"
    monkeypatch.setenv("AOTPACK_TEST_LOADED", str(marker))
    library = "cpu/x86-64-v3/kernels.so"
    evil = _rewrite(signed["path"], tmp_path / "evil.aotpack", replace={library: _evil_library(tmp_path)})

    e = _load_error(evil, public_key=signed["public"], signature=signed["signature"])
    assert e.message.endswith(f"member {library} was changed after signing; member manifest.json was changed "
                              "after signing")
    assert not marker.exists(), "the kernel library was opened before the signature was checked"

    resigned = tmp_path / "evil.aotpack.sig"
    sign_package(evil, resigned, key=signed["private"])
    e = _load_error(evil, public_key=signed["public"], signature=resigned)
    assert "signature" not in e.message and "kernel" in e.message, e.message
    assert marker.exists()  # the signature held, so the library was opened, and its kernels are missing
    marker.unlink()
    e2 = _load_error(evil)  # unsigned load: the same kernel failure
    assert e2.message == e.message and marker.exists()


def test_without_libcrypto_a_key_is_unsupported_and_no_key_needs_none(signed):
    code = f"""
import sys
from aotpack import runtime as rt
rt.Model({str(signed['path'])!r})  # no key: libcrypto is never needed
try:
    rt.Model({str(signed['path'])!r}, public_key={str(signed['public'])!r})
except rt.AotpackError as e:
    print(e.code.name, e.message)
"""
    env = {**os.environ, "AOTPACK_LIBCRYPTO": "libcrypto-that-is-not-here.so"}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=REPO.parent)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("UNSUPPORTED package "), result.stdout
    assert "verifying a signature needs OpenSSL's libcrypto, which this host lacks" in result.stdout
    assert "or load without a public key" in result.stdout


def test_aotpack_run_public_key(signed, runtime_build, tmp_path):
    tool = str(runtime_build / "aotpack-run")
    ok = run([tool, str(signed["path"]), "--public-key", str(signed["public"]), "--repeat", "0"])
    assert ok.returncode == 0, ok.stderr
    digest = read_package(signed["path"]).digest
    assert ok.stdout.splitlines()[0] == f"digest {digest} (signed by {signed['public']}: {signed['signature']})"
    ok = run([tool, str(signed["path"]), "--public-key", str(signed["public"]), "--signature",
              str(signed["signature"]), "--repeat", "0"])
    assert ok.returncode == 0, ok.stderr
    _, _, other = _key_pair(tmp_path, "other")
    bad = run([tool, str(signed["path"]), "--public-key", str(other)])
    assert bad.returncode == 1 and "the signature does not verify with public key" in bad.stderr
    usage = run([tool, str(signed["path"]), "--signature", str(signed["signature"])])
    assert usage.returncode == 2 and "--signature needs --public-key" in usage.stderr
