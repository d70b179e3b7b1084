"""A Triton Inference Server model repository for the aotpack backend (`libtriton_aotpack.so`, which the
serving issue builds):

    OUT/<name>/config.pbtxt
    OUT/<name>/<model-version>/model.aotpack      (the package, byte for byte)

config.pbtxt is Triton's ModelConfig in protobuf text format: `backend: "aotpack"`, every input and
output with its data type and dims (-1 for a symbol's dim or a size expression), `max_batch_size: 0`
(aotpack's batch is an ordinary symbol of the signature, not Triton's implicit batch dim), and what
Triton's dims cannot say as `parameters`: each symbol's range, the package digest and version, and the
full signature as JSON. Triton model versions are positive integers, so the package's semantic version
goes in a parameter and the folder takes `--model-version` (default 1).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from ..packages.reader import Package

BACKEND = "aotpack"
MODEL_FILE = "model.aotpack"
# Triton's DataType enum (model_config.proto) for the dtypes a package signature uses.
DATA_TYPES = {"bool": "TYPE_BOOL", "uint8": "TYPE_UINT8", "uint16": "TYPE_UINT16", "uint32": "TYPE_UINT32",
              "uint64": "TYPE_UINT64", "int8": "TYPE_INT8", "int16": "TYPE_INT16", "int32": "TYPE_INT32",
              "int64": "TYPE_INT64", "float16": "TYPE_FP16", "float32": "TYPE_FP32", "float64": "TYPE_FP64",
              "bfloat16": "TYPE_BF16"}


def _quoted(text: str) -> str:
    return json.dumps(text)  # a JSON string is a valid protobuf text-format string for these characters


def _tensor(t: dict[str, Any]) -> str:
    from . import PublishError

    if t["dtype"] not in DATA_TYPES:
        raise PublishError(f"tensor {t['name']}: dtype {t['dtype']} has no Triton data type")
    dims = ", ".join(str(d) if isinstance(d, int) else "-1" for d in t["shape"])
    return f"  {{\n    name: {_quoted(t['name'])}\n    data_type: {DATA_TYPES[t['dtype']]}\n    dims: [ {dims} ]\n  }}"


def _parameter(key: str, value: str) -> str:
    return f"parameters: {{\n  key: {_quoted(key)}\n  value: {{ string_value: {_quoted(value)} }}\n}}"


def config_pbtxt(package: Package, model_version: int) -> str:
    m = package.manifest
    sig = m["signature"]
    parameters = [("aotpack.package_digest", package.digest), ("aotpack.package_version", m["version"]),
                  ("aotpack.signature", json.dumps(sig, sort_keys=True, separators=(",", ":")))]
    parameters += [(f"aotpack.symbol.{s['name']}", f"{s['min']}..{s['max']}") for s in sig["symbols"]]
    lines = [
        "# Written by aotpack publish --format triton; the package is in the version folder.",
        f"name: {_quoted(m['name'])}",
        f"backend: {_quoted(BACKEND)}",
        "max_batch_size: 0",
        f"default_model_filename: {_quoted(MODEL_FILE)}",
        f"version_policy: {{ specific: {{ versions: [ {model_version} ] }} }}",
        "input [\n" + ",\n".join(_tensor(t) for t in sig["inputs"]) + "\n]",
        "output [\n" + ",\n".join(_tensor(t) for t in sig["outputs"]) + "\n]",
        *(_parameter(k, v) for k, v in parameters),
    ]
    return "\n".join(lines) + "\n"


def write_repository(package: Package, out: str | Path, model_version: int = 1) -> Path:
    """Writes the repository at `out`; returns the model's folder."""
    from . import PublishError

    if model_version < 1:
        raise PublishError(f"--model-version {model_version}: Triton model versions are positive integers")
    model_dir = Path(out) / package.manifest["name"]
    (model_dir / str(model_version)).mkdir(parents=True, exist_ok=True)
    shutil.copyfile(package.path, model_dir / str(model_version) / MODEL_FILE)
    (model_dir / "config.pbtxt").write_text(config_pbtxt(package, model_version))
    return model_dir
