"""An MLflow flavor for aotpack packages: `aotpack` plus a `python_function` flavor that runs the package
through the C++ runtime (`aotpack.runtime`), so `mlflow.pyfunc.load_model(...).predict(...)` works.

MLflow's model signature marks a symbol's dim as -1 and has no ranges, so the `aotpack` flavor keeps the
package's own signature (symbols with their ranges), its digest and format version. Built on MLflow's
custom-flavor hooks: `save_model` for a directory and `log_model` for a run (and a registry), the way
MLflow's own flavors are written. bfloat16 tensors, which numpy lacks, appear as uint16 raw bits, as
`aotpack.runtime` takes and returns them.
"""

from __future__ import annotations

import shutil
import warnings
from pathlib import Path
from typing import Any

from .. import __version__

FLAVOR_NAME = "aotpack"
LOADER_MODULE = "aotpack.publish.mlflow_loader"
_NUMPY_DTYPES = {"bfloat16": "uint16"}  # everything else has the same name in numpy


def _mlflow():
    try:
        import mlflow
        import mlflow.models
        import mlflow.pyfunc
    except ImportError as e:
        from . import PublishError

        raise PublishError(f"--format mlflow needs MLflow ({e}); install it with: pip install 'aotpack[registry]'") from e
    return mlflow


def model_signature(signature: dict[str, Any]):
    """The package signature as MLflow's tensor signature: symbols and size expressions become -1."""
    import numpy as np
    from mlflow.models import ModelSignature
    from mlflow.types.schema import Schema, TensorSpec

    def specs(tensors: list[dict[str, Any]]) -> Schema:
        return Schema([TensorSpec(np.dtype(_NUMPY_DTYPES.get(t["dtype"], t["dtype"])),
                                  tuple(d if isinstance(d, int) else -1 for d in t["shape"]), t["name"])
                       for t in tensors])

    return ModelSignature(inputs=specs(signature["inputs"]), outputs=specs(signature["outputs"]))


def save_model(package: str | Path, path: str | Path, mlflow_model: Any = None, **kwargs: Any) -> None:
    """An MLflow model directory at `path` holding the package as `<name>.aotpack`."""
    mlflow = _mlflow()
    from ..packages.reader import read_package

    pkg = read_package(package)
    m = pkg.manifest
    if mlflow_model is None:
        mlflow_model = mlflow.models.Model()
    file_name = f"{m['name']}.aotpack"
    mlflow_model.add_flavor(FLAVOR_NAME, package=file_name, digest=pkg.digest, package_name=m["name"], package_version=m["version"],
                            format_version=m["format_version"], aotpack_version=__version__,
                            signature=m["signature"], targets=m["targets"])
    with _staged(pkg.path, file_name) as staged, warnings.catch_warnings():
        # No input example on purpose: MLflow would run the model at save time to check it, which needs the
        # runtime library where only packaging is asked for; the signature says the shapes.
        warnings.filterwarnings("ignore", message=".*input example was not provided")
        mlflow.pyfunc.save_model(
            path=str(path), loader_module=LOADER_MODULE, data_path=str(staged), mlflow_model=mlflow_model,
            signature=model_signature(m["signature"]), metadata=dict(m.get("user_metadata", {})),
            # The serving environment needs aotpack (its runtime); no inference of requirements, which
            # would import and run the model in a subprocess.
            pip_requirements=[f"aotpack=={__version__}", "numpy"], **kwargs)


def log_model(package: str | Path, name: str = "model", registered_model_name: str | None = None, **kwargs: Any):
    """Logs the package to the active MLflow run (starting one if needed), optionally registering it."""
    mlflow = _mlflow()
    import sys

    return mlflow.models.Model.log(artifact_path=None, name=name, flavor=sys.modules[__name__],
                                   registered_model_name=registered_model_name, package=package, **kwargs)


class _staged:
    """The package under its published file name in a temporary folder (save_model copies data_path by
    its own name)."""

    def __init__(self, package: Path, file_name: str):
        self.package, self.file_name = package, file_name

    def __enter__(self) -> Path:
        import tempfile

        self.tmp = tempfile.TemporaryDirectory(prefix="aotpack-mlflow-")
        staged = Path(self.tmp.name) / self.file_name
        shutil.copyfile(self.package, staged)
        return staged

    def __exit__(self, *exc: object) -> None:
        self.tmp.cleanup()
