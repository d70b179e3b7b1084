"""Checking a package against PyTorch: the comparison rule (compare.py), the points of the declared ranges
(points.py), the export-time run through the C++ runtime (run.py) and its record as a table (report.py)."""

from .compare import (
    FLOAT32_TOLERANCE,
    HALF_DTYPES,
    TOLERANCE,
    Judgement,
    allowed_error,
    as_reference,
    from_runtime,
    judge,
    mismatch_report,
    relative_error,
    to_numpy,
)
from .points import Point, inputs_at, range_points
from .report import verification_table
from .run import MODES, VerificationError, verify_package

__all__ = [
    "FLOAT32_TOLERANCE",
    "HALF_DTYPES",
    "MODES",
    "TOLERANCE",
    "Judgement",
    "Point",
    "VerificationError",
    "allowed_error",
    "as_reference",
    "from_runtime",
    "inputs_at",
    "judge",
    "mismatch_report",
    "range_points",
    "relative_error",
    "to_numpy",
    "verification_table",
    "verify_package",
]
