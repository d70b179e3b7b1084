"""`aotpack publish PKG --format mlflow|oci|triton --out DIR`: a package laid out where a registry or a
server expects it (docs/registries.md). Each format is one module; none changes the package itself: the
file is copied in byte for byte, so its package digest and signature still hold at the destination.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import AotpackError

FORMATS = ("mlflow", "oci", "triton")


class PublishError(AotpackError):
    """A package that cannot be published in the asked format, or a destination that is in the way."""


def publish(package: str | Path, format_name: str, out: str | Path, **options) -> Path:
    """Writes `package` in `format_name`'s layout at `out`; returns `out`."""
    from ..packages.reader import read_package, verify_digests

    pkg = read_package(package)
    problems = verify_digests(pkg)
    if problems:
        raise PublishError(f"{package}: refusing to publish a damaged package: " + "; ".join(problems))
    out = Path(out)
    if out.exists() and any(out.iterdir()):
        raise PublishError(f"{out}: exists and is not empty; publish into a new or empty folder")
    if format_name == "mlflow":
        from . import mlflow_flavor

        mlflow_flavor.save_model(pkg.path, out)
    elif format_name == "oci":
        from . import oci

        oci.write_layout(pkg, out, **options)
    elif format_name == "triton":
        from . import triton

        triton.write_repository(pkg, out, **options)
    else:
        raise PublishError(f"--format {format_name!r}: expected one of {', '.join(FORMATS)}")
    return out
