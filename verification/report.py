"""The manifest's verification record as `aotpack inspect` prints it: a table, one row per point and device."""

from __future__ import annotations

from typing import Any


def verification_table(record: dict[str, Any] | None) -> list[str]:
    """Lines for `aotpack inspect`. Reads this format's record and the older ones (a single example check)."""
    if not record:
        return ["verified: no (exported with --verify=off)"]
    if "points" not in record:  # format 1 packages: one check at the example shapes
        if record.get("skipped"):
            return [f"verified: no ({record['skipped']})"]
        errors = ", ".join(f"{k} {v:.1e}" for k, v in record.get("rel_error", {}).items())
        return [f"verified: at the example shapes on cpu: {errors}"]
    lines = []
    devices = sorted({p["device"] for p in record["points"] if "device" in p})
    if record["points"]:
        lines.append(f"verified: {record['mode']} ({len({tuple(p['symbols'].items()) for p in record['points']})} "
                     f"points) on {', '.join(devices)} against {record.get('reference', 'float32')}: "
                     f"{'passed' if record.get('passed') else 'FAILED'}")
        rows = [["point", "symbols", "device", "output", "error", "allowed", "half eager"]]
        for p in record["points"]:
            symbols = " ".join(f"{k}={v}" for k, v in p["symbols"].items()) or "-"
            if "skipped" in p:
                rows.append([p["label"], symbols, "-", "skipped", "-", "-", "-"])
                continue
            for i, out in enumerate(p["outputs"]):
                first = i == 0
                rows.append([p["label"] if first else "", symbols if first else "", p["device"] if first else "",
                             out["name"], _num(out["error"]), _num(out["allowed"]),
                             _num(out.get("half_precision_error")), ])
        widths = [max(len(r[c]) for r in rows) for c in range(len(rows[0]))]
        lines += ["  " + "  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
    for p in record["points"]:
        if "skipped" in p:
            symbols = " ".join(f"{k}={v}" for k, v in p["symbols"].items())
            lines.append(f"not verified at {symbols} ({p['label']}): {p['skipped']}")
    for entry in record.get("not_verified", []):
        lines.append(f"not verified on {entry['target']}: {entry['reason']}")
    if record.get("all_zero_outputs"):
        lines.append(f"unchecked: {', '.join(record['all_zero_outputs'])} all zeros in eager at every point")
    if not record["points"] and not record.get("not_verified"):
        lines.append("verified: no")
    return lines


def _num(value: Any) -> str:
    if value is None:
        return "-"
    return value if isinstance(value, str) else f"{value:.1e}"
