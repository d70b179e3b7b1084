"""The `python_function` loader MLflow calls for an aotpack model (`loader_module` in MLmodel).

Kept free of MLflow imports: the serving side needs only aotpack's runtime and numpy.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np


class AotpackPyfunc:
    """One loaded package (immutable, shared) and a runtime session per calling thread: a session belongs to
    one thread at a time, and a server may call `predict` from several."""

    def __init__(self, package: Path):
        from .. import runtime

        self.model = runtime.Model(package)
        self._local = threading.local()
        signature = self.model.manifest["signature"]
        self.input_names = [t["name"] for t in signature["inputs"]]
        self.output_names = [t["name"] for t in signature["outputs"]]

    def predict(self, model_input: Any, params: dict[str, Any] | None = None) -> Any:
        if isinstance(model_input, Mapping):
            inputs = [np.ascontiguousarray(model_input[name]) for name in self.input_names]
        elif len(self.input_names) == 1:
            inputs = [np.ascontiguousarray(np.asarray(model_input))]
        else:
            raise ValueError(f"this model takes {len(self.input_names)} inputs: pass a dict with the keys "
                             f"{', '.join(self.input_names)}")
        session = getattr(self._local, "session", None)
        if session is None:
            session = self._local.session = self.model.session()
        outputs = session.run(inputs)
        if len(outputs) == 1:
            return outputs[0]
        return dict(zip(self.output_names, outputs))


def _load_pyfunc(data_path: str) -> AotpackPyfunc:
    return AotpackPyfunc(Path(data_path))
