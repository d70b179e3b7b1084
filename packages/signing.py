"""Signing packages in the OpenSSF Model Signing (OMS) v1.0 format, through the `model-signing` library.

The signed "model" is the package's members, each a resource named by its member path
(`manifest.json`, `program.json`, `weights.safetensors`, `cpu/<isa>/kernels.so`, ...) with its sha256:
so the signature covers the manifest, whose sha256 is the package digest, and a failed verification
names the member that changed. The library hashes files on disk, so the members are laid out in a
temporary folder first; that folder is exactly what `unzip PKG -d DIR` gives, so the stock
`model_signing verify ... DIR` accepts the same signature. The bytes around the members (zip headers,
padding) are checked by `reader.verify_digests`, which `verify_signature` runs too.

Keys and certificates are what the library takes: an elliptic-curve private key in PEM
(`openssl ecparam -name prime256v1 -genkey -noout -out key.pem`) and its public key, or a signing
certificate with its chain.
"""

from __future__ import annotations

import base64
import json
import tempfile
from collections.abc import Sequence
from pathlib import Path

from ..errors import AotpackError
from . import layout
from .reader import read_members, read_package, verify_digests
from .writer import sha256


class SignatureError(AotpackError):
    """A signature that does not verify, or a package or key that cannot be signed with."""


def _require_library():
    try:
        import model_signing
    except ImportError as e:
        raise SignatureError(f"signing needs the model-signing library ({e}); "
                             "install it with: pip install 'aotpack[registry]'") from e
    return model_signing


def _hashing_config(model_signing):
    # sha256 per file, as the package's manifest records it; nothing ignored (the library skips .git*
    # files by default, and a member may be named anything).
    return (model_signing.hashing.Config().set_ignored_paths(paths=[], ignore_git_paths=False)
            .use_file_serialization(hashing_algorithm="sha256", allow_symlinks=False))


def _unpack(members: dict[str, bytes], into: Path, name: str) -> Path:
    root = into / name  # the statement's subject name; verification does not compare it
    for member, data in members.items():
        if member.startswith("/") or ".." in Path(member).parts:
            raise SignatureError(f"member {member!r} has a path that cannot be unpacked safely")
        target = root / member
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    return root


def sign_package(path: str | Path, signature: str | Path, *, key: str | Path, password: str | None = None,
                 certificate: str | Path | None = None, certificate_chain: Sequence[str | Path] = ()) -> str:
    """Writes an OMS signature (a Sigstore bundle) of the package at `path` to `signature`; returns the
    package digest it covers. A package whose members do not match its manifest is refused."""
    model_signing = _require_library()
    package = read_package(path)
    problems = verify_digests(package)
    if problems:
        raise SignatureError(f"{path}: refusing to sign a damaged package: " + "; ".join(problems))
    config = model_signing.signing.Config().set_hashing_config(_hashing_config(model_signing))
    try:
        if certificate is not None:
            config.use_certificate_signer(private_key=key, signing_certificate=certificate,
                                          certificate_chain=list(certificate_chain))
        else:
            config.use_elliptic_key_signer(private_key=key, password=password)
        with tempfile.TemporaryDirectory(prefix="aotpack-sign-") as tmp:
            members = {layout.MANIFEST: package.manifest_bytes, **package.members}
            config.sign(_unpack(members, Path(tmp), package.manifest["name"]), signature)
    except (ValueError, TypeError, OSError) as e:
        raise SignatureError(f"{path}: cannot sign with {key}: {e}") from e
    return package.digest


def verify_signature(path: str | Path, signature: str | Path, *, public_key: str | Path | None = None,
                     certificate_chain: Sequence[str | Path] = ()) -> str:
    """Checks that `signature` was made by the holder of `public_key` (or a certificate chaining to
    `certificate_chain`) over exactly this package; returns the package digest. Raises SignatureError
    naming every member that differs from what was signed."""
    model_signing = _require_library()
    # The members' bytes, unparsed: a tampered manifest may not even be JSON, and is still to be named.
    members = read_members(path)
    config = model_signing.verifying.Config().set_hashing_config(_hashing_config(model_signing))
    if public_key is not None:
        config.use_elliptic_key_verifier(public_key=public_key)
    else:
        config.use_certificate_verifier(certificate_chain=list(certificate_chain))
    with tempfile.TemporaryDirectory(prefix="aotpack-verify-") as tmp:
        try:
            config.verify(_unpack(members, Path(tmp), Path(path).stem), signature)
        except SignatureError:
            raise
        except Exception as e:  # the library raises ValueError and its dependencies' own errors alike
            changed = _changed_members(members, Path(signature))
            if changed:
                raise SignatureError(f"{path}: does not match signature {signature}: " + "; ".join(changed)) from e
            raise SignatureError(f"{path}: signature {signature} does not verify "
                                 f"with {public_key or 'the certificate chain'}: {e}") from e
    package = read_package(path)
    problems = verify_digests(package)
    if problems:
        raise SignatureError(f"{path}: the signed members match but the file does not: " + "; ".join(problems))
    return package.digest


def _changed_members(members: dict[str, bytes], signature: Path) -> list[str]:
    """What the signed statement lists and the package has differently, by member name.

    Only reached after the library refused the package; it verified the envelope's signature before
    hashing the files, so when this finds differences they are the reason (the library's own message
    lists them too, as one string). Empty when the statement cannot be read (e.g. a wrong key)."""
    try:
        envelope = json.loads(signature.read_text())["dsseEnvelope"]
        statement = json.loads(base64.b64decode(envelope["payload"]))
        signed = {r["name"]: r["digest"] for r in statement["predicate"]["resources"]}
    except (OSError, ValueError, KeyError, TypeError):
        return []
    actual = {name: sha256(data) for name, data in members.items()}
    changed = [f"member {name} was changed after signing" for name in sorted(signed)
               if name in actual and actual[name] != signed[name]]
    changed += [f"member {name} was signed but is missing" for name in sorted(signed) if name not in actual]
    changed += [f"member {name} was not signed" for name in sorted(actual) if name not in signed]
    return changed
