"""What skipping the key blocks a padding mask removes saves (ir/mask_structure.py skips_dead_keys).

    python scripts/padding_skip_bench.py [--model bert|attention] [--device cpu|cuda] [--batch 8] [--seq 512]

Exports examples/bert (or, with --model attention, one BERT-sized self-attention layer alone: 12 heads of 64,
the mask built as transformers does, finfo.min past each length) twice through the public API (CPU: float32;
CUDA: bf16 for the local GPU, not tuned, so both packages get the tables' configurations; verification on),
once as aotpack renders it and once with the scan turned off in both renderers, then runs each on BERT's
padded inputs (sequence b keeps (1 - (b + 1) / (2 batch)) of the keys) and prints the median milliseconds per
run and whether the outputs are identical, bit for bit.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]


def attention_layer():
    """One self-attention layer of BERT-base's shape under a padding mask, as a model file's pieces."""
    import torch
    import torch.nn.functional as F
    from torch import nn

    class Attention(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.qkv = nn.Linear(768, 3 * 768)

        def forward(self, x: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
            b, s, _ = x.shape
            q, k, v = (t.view(b, s, 12, 64).transpose(1, 2) for t in self.qkv(x).chunk(3, -1))
            mask = (1.0 - attention_mask[:, None, None, :].to(x.dtype)) * torch.finfo(torch.float32).min
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask).transpose(1, 2).reshape(b, s, 768)

    return Attention().eval()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="bert", choices=("bert", "attention"))
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq", type=int, default=512)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="CPU sessions' threads")
    args = parser.parse_args()
    os.environ["AOTPACK_EXAMPLE_SIZE"] = "full"

    import importlib.util

    import aotpack
    import torch
    from aotpack import runtime
    from aotpack.api import export_model_file
    from aotpack.lowering.backends.cpu import render as cpu_render
    from aotpack.lowering.backends.cuda import render as cuda_render
    from aotpack.verification import to_numpy

    model_file = REPO / "examples" / "bert" / "model.py"
    spec = importlib.util.spec_from_file_location("bert_example", model_file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    padded = module.padded_inputs(args.batch, args.seq, seed=args.seq)  # input ids, attention mask, token types
    ranges = {"batch": (1, max(args.batch, 2)), "seq": (1, max(args.seq, 16))}
    options: dict = {}  # verification on, as users export
    if args.device == "cuda":
        major, minor = torch.cuda.get_device_capability(0)
        options.update(target="cuda", dtype="bf16", cuda_arch=str(10 * major + minor), tune=False)
    if args.model == "bert":
        inputs = [to_numpy(x) for x in padded]
    else:
        torch.manual_seed(0)
        layer = attention_layer()  # one model, exported twice
        x = torch.randn(args.batch, args.seq, 768, generator=torch.Generator().manual_seed(0))
        inputs = [to_numpy(x.to(torch.bfloat16) if args.device == "cuda" else x), to_numpy(padded[1])]
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for label in ("skipping", "walking"):
            if label == "walking":
                cpu_render.skips_dead_keys = cuda_render.skips_dead_keys = lambda kernel: False
            path = Path(tmp) / f"{args.model}_{label}.aotpack"
            if args.model == "bert":
                export_model_file(model_file, path, dynamic=[f"{k}={lo}..{hi}" for k, (lo, hi) in ranges.items()],
                                  **options)
            else:
                examples = (torch.randn(2, 16, 768), torch.ones(2, 16, dtype=torch.int64))
                axes = {0: "batch", 1: "seq"}
                aotpack.export(layer, examples, path, dynamic_shapes={"x": axes, "attention_mask": axes},
                               ranges=ranges, **options)
            session = runtime.Model(path).session(num_threads=args.threads, device=args.device)
            out = session.run(inputs)[0]
            times = []
            for _ in range(args.repeat):
                start = time.perf_counter()
                session.run(inputs)
                times.append(time.perf_counter() - start)
            results[label] = (statistics.median(times) * 1e3, np.asarray(out))
            print(f"{args.model} {label}: {results[label][0]:.2f} ms per run (batch {args.batch}, seq {args.seq}, "
                  f"{args.device})", flush=True)
    identical = bool(np.array_equal(results["skipping"][1], results["walking"][1]))
    print(f"walking / skipping: {results['walking'][0] / results['skipping'][0]:.3f}; outputs identical: {identical}")
    return 0 if identical else 1


if __name__ == "__main__":
    sys.exit(main())
