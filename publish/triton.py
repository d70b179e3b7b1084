"""A Triton Inference Server model repository for the aotpack backend (`libtriton_aotpack.so`, built from
runtime_cpp/triton; docs/serving.md):

    OUT/<name>/config.pbtxt
    OUT/<name>/<model-version>/model.aotpack      (the package, byte for byte)

config.pbtxt is Triton's ModelConfig in protobuf text format: `backend: "aotpack"`, every input and output
with its data type and dims (-1 for a symbol's dim or a size expression), and what Triton's dims cannot say
as `parameters`: each symbol's range, the package digest and version, and the full signature as JSON.
A package with a batch symbol (`batch_symbol`) gets `max_batch_size` = the symbol's maximum and dims without
dim 0, Triton's implicit batch dim, so that Triton's dynamic batcher may gather requests that the backend then
concatenates on dim 0; any other package gets `max_batch_size: 0` and every dim. Triton model versions are
positive integers, so the package's semantic version goes in a parameter and the folder takes
`--model-version` (default 1). Instance groups (CPU or GPU, a count, GPU ids) and dynamic batching are
options.
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


def _mentions(expr: Any, symbol: str) -> bool:
    """Whether a signature size (an int, a symbol name or [op, a, b, ...]) uses `symbol`."""
    if isinstance(expr, str):
        return expr == symbol
    return isinstance(expr, list) and any(_mentions(e, symbol) for e in expr[1:])


def batch_symbol(signature: dict[str, Any]) -> dict[str, Any] | None:
    """The symbol that is dim 0 of every input and output and appears in no other of their dims, or None:
    requests can then be concatenated on dim 0 and outputs split by rows. The backend applies the same rule
    (runtime_cpp/triton/src/signature.cpp); keep the two alike."""
    tensors = signature["inputs"] + signature["outputs"]
    if not signature["inputs"] or not signature["outputs"]:
        return None
    first = signature["inputs"][0]["shape"]
    symbol = first[0] if first and isinstance(first[0], str) else None
    if symbol is None or any(not t["shape"] or t["shape"][0] != symbol or
                             any(_mentions(d, symbol) for d in t["shape"][1:]) for t in tensors):
        return None
    return next(s for s in signature["symbols"] if s["name"] == symbol)


def _tensor(t: dict[str, Any], batching: bool) -> str:
    from . import PublishError

    if t["dtype"] not in DATA_TYPES:
        raise PublishError(f"tensor {t['name']}: dtype {t['dtype']} has no Triton data type")
    shape = t["shape"][1:] if batching else t["shape"]
    dims = ", ".join(str(d) if isinstance(d, int) else "-1" for d in shape)
    return f"  {{\n    name: {_quoted(t['name'])}\n    data_type: {DATA_TYPES[t['dtype']]}\n    dims: [ {dims} ]\n  }}"


def _parameter(key: str, value: str) -> str:
    return f"parameters: {{\n  key: {_quoted(key)}\n  value: {{ string_value: {_quoted(value)} }}\n}}"


def _instance_group(kind: str, count: int, gpus: tuple[int, ...]) -> str:
    devices = f"\n    gpus: [ {', '.join(map(str, gpus))} ]" if gpus else ""
    return f"instance_group [\n  {{\n    kind: KIND_{kind.upper()}\n    count: {count}{devices}\n  }}\n]"


def config_pbtxt(package: Package, model_version: int, batching: bool = True, instance_kind: str | None = None,
                 instance_count: int = 1, gpus: tuple[int, ...] = (), dynamic_batching: bool = False,
                 max_queue_delay_us: int = 100, threads: int | None = None) -> str:
    """The config.pbtxt text. batching=False writes max_batch_size 0 even for a package with a batch symbol.
    instance_kind "cpu" or "gpu" writes an instance group (None: Triton's default, GPU where there is one);
    dynamic_batching needs a batch symbol; threads: the CPU threads of each instance's session (the backend's
    aotpack.num_threads parameter, default 1)."""
    from . import PublishError

    m = package.manifest
    sig = m["signature"]
    batch = batch_symbol(sig) if batching else None
    if dynamic_batching and batch is None:
        raise PublishError("--dynamic-batching: the package has no batch symbol (a symbol that is dim 0 of every "
                           "input and output and no other dim), so Triton cannot batch its requests"
                           + ("" if batching else "; drop --no-batching"))
    if gpus and instance_kind != "gpu":
        raise PublishError("--gpus needs --instance-kind gpu")
    if instance_kind == "gpu" and "cuda" not in {t.get("kind") for t in m.get("targets", [])}:
        raise PublishError("--instance-kind gpu: the package has no CUDA kernels; export it with --target cuda "
                           "(or cpu,cuda)")
    parameters = [("aotpack.package_digest", package.digest), ("aotpack.package_version", m["version"]),
                  ("aotpack.signature", json.dumps(sig, sort_keys=True, separators=(",", ":")))]
    parameters += [(f"aotpack.symbol.{s['name']}", f"{s['min']}..{s['max']}") for s in sig["symbols"]]
    if threads is not None:
        parameters.append(("aotpack.num_threads", str(threads)))
    lines = [
        "# Written by aotpack publish --format triton; the package is in the version folder.",
        f"name: {_quoted(m['name'])}",
        f"backend: {_quoted(BACKEND)}",
        f"max_batch_size: {batch['max'] if batch else 0}",
        f"default_model_filename: {_quoted(MODEL_FILE)}",
        f"version_policy: {{ specific: {{ versions: [ {model_version} ] }} }}",
        "input [\n" + ",\n".join(_tensor(t, batch is not None) for t in sig["inputs"]) + "\n]",
        "output [\n" + ",\n".join(_tensor(t, batch is not None) for t in sig["outputs"]) + "\n]",
        *(_parameter(k, v) for k, v in parameters),
    ]
    if instance_kind:
        lines.append(_instance_group(instance_kind, instance_count, gpus))
    if dynamic_batching:
        lines.append(f"dynamic_batching {{\n  max_queue_delay_microseconds: {max_queue_delay_us}\n}}")
    return "\n".join(lines) + "\n"


def write_repository(package: Package, out: str | Path, model_version: int = 1, **config) -> Path:
    """Writes the repository at `out`; returns the model's folder. `config`: config_pbtxt's options."""
    from . import PublishError

    if model_version < 1:
        raise PublishError(f"--model-version {model_version}: Triton model versions are positive integers")
    text = config_pbtxt(package, model_version, **config)  # first: it refuses bad options before anything is written
    model_dir = Path(out) / package.manifest["name"]
    (model_dir / str(model_version)).mkdir(parents=True, exist_ok=True)
    shutil.copyfile(package.path, model_dir / str(model_version) / MODEL_FILE)
    (model_dir / "config.pbtxt").write_text(text)
    return model_dir
