"""OpenSSF Model Signing of packages: a signature verifies, and fails after any one-byte change."""

from __future__ import annotations

import datetime
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from aotpack.packages import layout
from aotpack.packages.reader import read_package
from aotpack.packages.signing import SignatureError, sign_package, verify_signature
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from .synthetic import weights, write


def _key_pair(directory: Path, stem: str) -> tuple[Path, Path]:
    """A P-256 key pair in PEM, what `openssl ecparam -name prime256v1 -genkey` makes."""
    key = ec.generate_private_key(ec.SECP256R1())
    private, public = directory / f"{stem}.pem", directory / f"{stem}.pub.pem"
    private.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                          serialization.NoEncryption()))
    public.write_bytes(key.public_key().public_bytes(serialization.Encoding.PEM,
                                                     serialization.PublicFormat.SubjectPublicKeyInfo))
    return private, public


@pytest.fixture(scope="module")
def signed(tmp_path_factory):
    directory = tmp_path_factory.mktemp("signing")
    # A small package, so that every one of its bytes can be changed in turn.
    path = write(directory / "small.aotpack", tensors=weights(shapes={"w": (3,), "b": (2,)}), kernels=b"kernels!")
    key, public = _key_pair(directory, "key")
    signature = directory / "small.aotpack.sig"
    digest = sign_package(path, signature, key=key)
    return path, signature, public, digest, directory


def test_signature_verifies_and_covers_the_package_digest(signed):
    path, signature, public, digest, _ = signed
    assert digest == read_package(path).digest
    assert verify_signature(path, signature, public_key=public) == digest


def test_another_key_is_refused(signed):
    path, signature, _, _, directory = signed
    _, other = _key_pair(directory, "other")
    with pytest.raises(SignatureError, match="does not verify with .*other.pub.pem"):
        verify_signature(path, signature, public_key=other)


def _member_spans(path: Path) -> dict[str, tuple[int, int]]:
    with zipfile.ZipFile(path) as zf:
        spans = {}
        raw = path.read_bytes()
        for info in zf.infolist():
            name_len, extra_len = int.from_bytes(raw[info.header_offset + 26:info.header_offset + 28], "little"), \
                int.from_bytes(raw[info.header_offset + 28:info.header_offset + 30], "little")
            start = info.header_offset + 30 + name_len + extra_len
            spans[info.filename] = (start, start + info.compress_size)
    return spans


def test_every_one_byte_change_fails_naming_the_member(signed, tmp_path):
    """Every byte of the file, changed in turn: each fails, and a change inside a member's data names it."""
    path, signature, public, _, _ = signed
    data = path.read_bytes()
    spans = _member_spans(path)
    assert set(spans) == {layout.MANIFEST, layout.PROGRAM, layout.WEIGHTS, "cpu/x86-64-v3/kernels.so"}
    assert len(data) < 4096, "keep the package small: this test verifies once per byte"
    bad = tmp_path / "bad.aotpack"
    failures_by_member = {name: 0 for name in spans}
    for i in range(len(data)):
        changed = bytearray(data)
        changed[i] ^= 0x01
        bad.write_bytes(bytes(changed))
        member = next((name for name, (a, b) in spans.items() if a <= i < b), None)
        with pytest.raises(Exception) as failure:
            verify_signature(bad, signature, public_key=public)
        message = str(failure.value)
        assert isinstance(failure.value, SignatureError) or "not a readable aotpack package" in message \
            or "is not valid JSON" in message or "format is" in message, (i, message)
        if member is not None:
            assert f"member {member} was changed after signing" in message, (i, member, message)
            failures_by_member[member] += 1
    assert all(count == spans[name][1] - spans[name][0] for name, count in failures_by_member.items())


def test_stock_model_signing_cli_verifies_the_unzipped_package(signed, tmp_path):
    """The signature is plain OMS: `model_signing verify` accepts it over `unzip PKG -d DIR`."""
    path, signature, public, _, _ = signed
    model_dir = tmp_path / read_package(path).manifest["name"]
    zipfile.ZipFile(path).extractall(model_dir)
    args = [sys.executable, "-m", "model_signing", "verify", "key", str(model_dir), "--signature", str(signature),
            "--public_key", str(public), "--no-ignore-git-paths"]
    ok = subprocess.run(args, capture_output=True, text=True, check=False)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    (model_dir / layout.PROGRAM).write_bytes(b"{}\n")
    tampered = subprocess.run(args, capture_output=True, text=True, check=False)
    assert tampered.returncode != 0 and "program.json" in tampered.stdout + tampered.stderr


def test_a_damaged_package_is_not_signed(signed, tmp_path):
    path, _, _, _, directory = signed
    key = directory / "key.pem"
    data = bytearray(path.read_bytes())
    start, _ = _member_spans(path)[layout.WEIGHTS]
    data[start + 20] ^= 0x01
    bad = tmp_path / "bad.aotpack"
    bad.write_bytes(bytes(data))
    with pytest.raises(SignatureError, match="refusing to sign a damaged package: member weights.safetensors"):
        sign_package(bad, tmp_path / "bad.sig", key=key)


def _pem_key(k): return k.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
def _certificates(directory: Path) -> None:
    """A CA and a code-signing leaf certificate it issued (ca.pem, leaf.pem, leaf-key.pem)."""
    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "aotpack test CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(1).not_valid_before(now - datetime.timedelta(days=1)).not_valid_after(now + datetime.timedelta(days=1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=False, content_commitment=False, key_encipherment=False, data_encipherment=False, key_agreement=False, key_cert_sign=True, crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
          .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    leaf = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "signer")])).issuer_name(ca_name)
            .public_key(key.public_key()).serial_number(2).not_valid_before(now - datetime.timedelta(hours=1)).not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=False, data_encipherment=False, key_agreement=False, key_cert_sign=False, crl_sign=False, encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CODE_SIGNING]), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(ca_key, hashes.SHA256()))
    (directory / "ca.pem").write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    (directory / "leaf.pem").write_bytes(leaf.public_bytes(serialization.Encoding.PEM))
    (directory / "leaf-key.pem").write_bytes(_pem_key(key))


def test_certificate_signature_verifies_against_its_chain(signed, tmp_path):
    path, _, _, digest, _ = signed
    _certificates(tmp_path)
    signature = tmp_path / "cert.sig"
    assert sign_package(path, signature, key=tmp_path / "leaf-key.pem", certificate=tmp_path / "leaf.pem",
                        certificate_chain=[tmp_path / "ca.pem"]) == digest
    assert verify_signature(path, signature, certificate_chain=[tmp_path / "ca.pem"]) == digest
    other = tmp_path / "other"
    other.mkdir()
    _certificates(other)  # another CA of the same name: the chain must be the one that issued the leaf
    with pytest.raises(SignatureError, match="does not verify"):
        verify_signature(path, signature, certificate_chain=[other / "ca.pem"])


def test_cli_sign_and_verify_an_exported_package(mlp_package, tmp_path):
    from .exports import AOTPACK, run

    key, public = _key_pair(tmp_path, "key")
    signature = tmp_path / "mlp.sig"
    signed_ = run([*AOTPACK, "sign", str(mlp_package), "--key", str(key), "-o", str(signature)])
    digest = read_package(mlp_package).digest
    assert signed_.returncode == 0 and digest in signed_.stdout, signed_.stderr
    ok = run([*AOTPACK, "verify", str(mlp_package), "--signature", str(signature), "--public-key", str(public)])
    assert ok.returncode == 0 and f"covers package digest {digest}" in ok.stdout, ok.stderr
    data = bytearray(mlp_package.read_bytes())
    start, end = _member_spans(mlp_package)[layout.WEIGHTS]
    data[(start + end) // 2] ^= 0x10
    bad = tmp_path / "bad.aotpack"
    bad.write_bytes(bytes(data))
    failed = run([*AOTPACK, "verify", str(bad), "--signature", str(signature), "--public-key", str(public)])
    assert failed.returncode == 1 and "Traceback" not in failed.stderr
    assert failed.stderr.strip() == (f"error: {bad}: does not match signature {signature}: "
                                     "member weights.safetensors was changed after signing")
