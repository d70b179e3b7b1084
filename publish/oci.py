"""An OCI image layout holding a package as a CNCF ModelPack artifact (modelpack/model-spec v1).

Layers, both uncompressed ("raw"), so their digests are the files' own sha256:
1. aotpack's manifest.json as `application/vnd.cncf.model.weight.config.v1.raw`: the signature with its
   symbol ranges, targets and member digests, readable without downloading the weights. Its digest is
   the package digest.
2. the package file as `application/vnd.cncf.model.weight.v1.raw`, byte for byte (its signature holds).
ModelPack's config has no tensor signature, ranges or GPU architectures; those stay in layer 1, and the
config carries what it has fields for (name, version, licenses, revision, format, precision, paramSize).

Written by hand: the layout is three small JSON documents and the blobs (OCI image-spec
`image-layout.md`), and no Python library writes a layout with an artifact type (oras-py talks to
registries only); `skopeo copy oci:DIR:TAG docker://...` reads it like any image layout.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

from ..packages import layout
from ..packages.reader import Package
from ..packages.weights import read_tensors

ARTIFACT_TYPE = "application/vnd.cncf.model.manifest.v1+json"
CONFIG_TYPE = "application/vnd.cncf.model.config.v1+json"
WEIGHT_RAW = "application/vnd.cncf.model.weight.v1.raw"
WEIGHT_CONFIG_RAW = "application/vnd.cncf.model.weight.config.v1.raw"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
# Layer annotations of ModelPack (docs/annotations.md) and OCI (org.opencontainers.image.title is the
# file name `oras pull` writes a layer to).
FILEPATH = "org.cncf.model.filepath"
TITLE = "org.opencontainers.image.title"
# aotpack's own keys, in a namespace of ours as the OCI annotation rules ask.
PACKAGE_DIGEST = "dev.aotpack.package.digest"
MANIFEST_LAYER = "dev.aotpack.manifest"
SIGNATURE_RANGES = "dev.aotpack.signature"
_PRECISION = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16", "float64": "fp64"}


def default_tag(version: str) -> str:
    """An OCI tag for a semantic version: tags allow [A-Za-z0-9_.-], so '+' (build metadata) becomes '_'."""
    return version.replace("+", "_")


_TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,127}")  # distribution-spec's tag grammar


def check_tag(tag: str) -> str:
    from . import PublishError

    if not _TAG.fullmatch(tag):
        raise PublishError(f"--tag {tag!r} is not an OCI tag: up to 128 letters, digits, '_', '.' and '-', "
                           "not starting with '.' or '-'")
    return tag


def _json_bytes(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def _param_size(package: Package) -> str:
    """ModelPack's paramSize: the parameter count as <count><K|M|B|T>, one decimal at most."""
    count = 0
    for tensor in read_tensors(package.members[layout.WEIGHTS]).values():
        n = 1
        for d in tensor.shape:
            n *= d
        count += n
    for scale, letter in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K")):
        if count >= scale:
            return f"{count / scale:.1f}{letter}"
    return f"{count / 1e3:.1f}K"  # below a thousand: still in the <count><scale-prefix> form


def _precision(signature: dict[str, Any]) -> str:
    kinds = {_PRECISION.get(t["dtype"]) for t in signature["inputs"] + signature["outputs"]} - {None}
    return kinds.pop() if len(kinds) == 1 else "mixed"


def model_config(package: Package, diff_ids: list[str]) -> dict[str, Any]:
    m = package.manifest
    meta = m.get("user_metadata", {})
    descriptor: dict[str, Any] = {"name": m["name"], "version": m["version"]}
    if "license" in meta:
        descriptor["licenses"] = [meta["license"]]
    if "source.revision" in meta:
        descriptor["revision"] = meta["source.revision"]
    return {
        "descriptor": descriptor,
        "config": {"format": "aotpack", "paramSize": _param_size(package), "precision": _precision(m["signature"])},
        "modelfs": {"type": "layers", "diffIds": diff_ids},
    }


def write_layout(package: Package, out: str | Path, tag: str | None = None) -> dict[str, Any]:
    """Writes the layout at `out`; returns its OCI manifest."""
    out = Path(out)
    blobs = out / "blobs" / "sha256"
    blobs.mkdir(parents=True, exist_ok=True)

    def blob(data: bytes, media_type: str, annotations: dict[str, str] | None = None) -> dict[str, Any]:
        digest = hashlib.sha256(data).hexdigest()
        (blobs / digest).write_bytes(data)
        return {"mediaType": media_type, "digest": f"sha256:{digest}", "size": len(data),
                **({"annotations": annotations} if annotations else {})}

    m = package.manifest
    file_name = f"{m['name']}.aotpack"
    signature = json.dumps(m["signature"], sort_keys=True, separators=(",", ":"))
    manifest_layer = blob(package.manifest_bytes, WEIGHT_CONFIG_RAW,
                          {FILEPATH: layout.MANIFEST, TITLE: layout.MANIFEST, MANIFEST_LAYER: "true"})
    package_layer = blob(Path(package.path).read_bytes(), WEIGHT_RAW,
                         {FILEPATH: file_name, TITLE: file_name, PACKAGE_DIGEST: package.digest})
    layers = [manifest_layer, package_layer]
    config = blob(_json_bytes(model_config(package, [layer["digest"] for layer in layers])), CONFIG_TYPE)
    annotations = {"org.opencontainers.image.title": m["name"], "org.opencontainers.image.version": m["version"],
                   PACKAGE_DIGEST: package.digest, SIGNATURE_RANGES: signature}
    if "license" in m.get("user_metadata", {}):
        annotations["org.opencontainers.image.licenses"] = m["user_metadata"]["license"]
    if "source.revision" in m.get("user_metadata", {}):
        annotations["org.opencontainers.image.revision"] = m["user_metadata"]["source.revision"]
    manifest = {"schemaVersion": 2, "mediaType": OCI_MANIFEST, "artifactType": ARTIFACT_TYPE, "config": config,
                "layers": layers, "annotations": annotations}
    manifest_descriptor = blob(_json_bytes(manifest), OCI_MANIFEST)
    manifest_descriptor["artifactType"] = ARTIFACT_TYPE
    manifest_descriptor["annotations"] = {"org.opencontainers.image.ref.name": check_tag(tag or default_tag(m["version"]))}
    (out / "oci-layout").write_bytes(_json_bytes({"imageLayoutVersion": "1.0.0"}))
    (out / "index.json").write_bytes(_json_bytes({"schemaVersion": 2, "mediaType": OCI_INDEX,
                                                  "manifests": [manifest_descriptor]}))
    return manifest
