"""manifest.json: a package's identity and contract, assembled from plain data (docs/package-format.md).

The writer adds the format identity and the member digests (writer.build_manifest); this module owns the
rest of the schema: which fields there are and what each holds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def make_manifest(*, name: str, version: str, producer: Mapping[str, str], targets: Sequence[Mapping[str, Any]],
                  signature: Mapping[str, Any], metadata: Mapping[str, Any],
                  user_metadata: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Every field but `members` and the format identity (the writer's) and `verification` (with_verification).

    `metadata` is aotpack's own (kernel and step counts, arena size); `user_metadata` the user's str -> str
    map (`--meta KEY=VALUE`; packages/identity.py checks it)."""
    return {
        "name": name,
        "version": version,
        "producer": dict(producer),
        "targets": [dict(t) for t in targets],
        "signature": dict(signature),
        "metadata": dict(metadata),
        "user_metadata": dict(user_metadata or {}),
    }


def with_verification(manifest: Mapping[str, Any], record: Mapping[str, Any] | None) -> dict[str, Any]:
    """The manifest with export-time verification's record (verification/run.py), or none for --verify=off.

    Record fields: `mode` ("range" or "example"); `reference`; `inputs` (how they were made); `points`, one per
    point and device: `label`, `symbols` (name -> value), `device`, `outputs` (`name`, `error` against the
    reference, `allowed`, and for half types `half_precision_error`, eager PyTorch's own), `passed`;
    `not_verified` (targets in the package that could not run where it was exported, with the reason);
    `passed` (every point run passed, and at least one ran)."""
    out = dict(manifest)
    if record is not None:
        out["verification"] = dict(record)
    return out
