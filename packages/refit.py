"""New weights into a package's kernels and plan, without re-exporting (the torch-free half of refit).

Every member but weights.safetensors is kept byte for byte; the new weights must have exactly the
package's tensor names, dtypes and shapes, because the plan (program.json) binds each weight buffer by
name, dtype and shape and the kernels were generated for those shapes. The manifest records where the
package came from (`refit.from`: the original's package digest) and a new verification record, or none.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..errors import AotpackError
from . import layout
from .identity import check_version, parse_version
from .reader import read_package, verify_digests
from .weights import mismatches, read_tensors
from .writer import write_package

# Fields build_manifest writes itself.
_DERIVED = ("format", "format_version", "members")


class RefitError(AotpackError):
    """New weights that do not fit the package's plan, or a package that cannot be refitted."""


def check_weights(path: str | Path, weights: bytes, where: str) -> None:
    """Refuses `weights` listing every name, dtype or shape that differs from the package's."""
    package = read_package(path)
    expected = read_tensors(package.members[layout.WEIGHTS], f"{path}: {layout.WEIGHTS}")
    problems = mismatches(expected, read_tensors(weights, where))
    if problems:
        hint = ""
        laid_out = (".panels", ".paired", ".transposed", ".normed", ".norm_c")
        if any("not in the package" in line for line in problems) and any(s in n for n in expected for s in laid_out):
            hint = ("\n  (some package weights are laid out at export, e.g. *.panels16, a CUDA package's [K, N] "
                    "weights as *.transposed, a gated MLP's *.paired or a folded norm's *.normed: "
                    "give the model's own parameters with --model model.py so refit lays them out as export does)")
        raise RefitError(f"{where} does not fit {path}: {len(problems)} mismatch(es) with the package's weights:\n  "
                         + "\n  ".join(problems) + hint)


def refit(path: str | Path, weights: bytes, output: str | Path, *, version: str | None = None,
          verify: Callable[[Path], dict[str, Any]] | None = None, where: str = "the new weights") -> dict[str, Any]:
    """Writes `output`: the package at `path` with `weights` (safetensors bytes) in place of its own.

    `version` defaults to a patch bump. `verify`, given a trial package's path, returns the verification
    record (as export's does); without it the package has no record, as an export with --verify=off."""
    package = read_package(path)
    problems = verify_digests(package)
    if problems:
        raise RefitError(f"{path}: refusing to refit a damaged package: " + "; ".join(problems))
    check_weights(path, weights, where)
    manifest = {k: v for k, v in package.manifest.items() if k not in _DERIVED}
    manifest["version"] = (check_version(version) if version is not None
                           else str(parse_version(manifest["version"], f"{path}: version").bumped("patch")))
    manifest["refit"] = {"from": package.digest}
    # The old record was about the old weights; without a new run there is none, as with --verify=off.
    manifest.pop("verification", None)
    members = {**package.members, layout.WEIGHTS: weights}
    output = Path(output)
    if verify is not None:
        trial = output.with_name(f".{output.name}.verify")
        try:
            write_package(trial, manifest, members)
            manifest["verification"] = verify(trial)
        finally:
            trial.unlink(missing_ok=True)
    return write_package(output, manifest, members)
