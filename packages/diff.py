"""`aotpack diff OLD NEW`: what changed between two packages and the semantic-version bump it implies.

The bump rule, from what a consumer of OLD can rely on:
- major: NEW refuses something OLD accepted: a narrowed (or shifted) symbol range, any other change of
  the signature (inputs, outputs, names, dtypes, shapes, symbols), a target or CUDA arch dropped, a higher
  minimum driver;
- minor: NEW accepts more and breaks nothing: a widened range, a new target or arch, a lower minimum driver;
- patch: the same contract, other contents: weights, kernels, plan, producer versions, metadata.
Below 1.0.0 the Cargo convention applies (a breaking change bumps MINOR, anything else PATCH), as
semver.org leaves 0.y.z open and registries' tooling reads it that way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from . import layout
from .identity import Version, parse_version
from .reader import Package
from .weights import read_tensors

BUMPS = ("none", "patch", "minor", "major")


@dataclass(frozen=True)
class Change:
    what: str  # signature, range, target, weights, kernels, plan, producer, metadata, identity
    bump: str  # one of BUMPS
    text: str


@dataclass(frozen=True)
class PackageDiff:
    old_version: str
    new_version: str
    changes: tuple[Change, ...]

    @property
    def bump(self) -> str:
        return max((c.bump for c in self.changes), key=BUMPS.index, default="none")

    @property
    def minimum_version(self) -> Version:
        return minimum_version(parse_version(self.old_version, "OLD's version"), self.bump)

    def version_problem(self) -> str | None:
        """Why NEW's version is too low for its changes, or None when it is high enough."""
        new = parse_version(self.new_version, "NEW's version")
        if new.precedence() >= self.minimum_version.precedence():
            return None
        return (f"NEW's version {self.new_version} is too low: the changes need a {self.bump} bump from "
                f"{self.old_version}, so at least {self.minimum_version}")


def minimum_version(old: Version, bump: str) -> Version:
    if bump == "none":
        return old
    if old.major == 0:  # 0.y.z: breaking -> minor, anything else -> patch
        return old.bumped("minor" if bump == "major" else "patch")
    return old.bumped(bump)


def diff_packages(old: Package, new: Package) -> PackageDiff:
    changes = [*_identity(old.manifest, new.manifest), *_signature(old.manifest["signature"], new.manifest["signature"]),
               *_targets(old.manifest["targets"], new.manifest["targets"]), *_weights(old, new),
               *_members(old, new), *_producer(old.manifest, new.manifest), *_metadata(old.manifest, new.manifest)]
    return PackageDiff(old.manifest["version"], new.manifest["version"], tuple(changes))


def _identity(old: dict, new: dict) -> list[Change]:
    if old["name"] != new["name"]:
        return [Change("identity", "none", f"name {old['name']} -> {new['name']} (are these the same model?)")]
    return []


def _tensor_text(t: dict[str, Any]) -> str:
    return f"{t['name']}: {t['dtype']}[{', '.join(map(str, t['shape']))}]"


def _signature(old: dict, new: dict) -> list[Change]:
    changes = []
    old_syms, new_syms = ({s["name"]: s for s in sig["symbols"]} for sig in (old, new))
    for name in sorted(old_syms.keys() - new_syms.keys()):
        changes.append(Change("signature", "major", f"symbol {name} removed (was {_range(old_syms[name])})"))
    for name in sorted(new_syms.keys() - old_syms.keys()):
        changes.append(Change("signature", "major", f"symbol {name} added ({_range(new_syms[name])})"))
    for name in sorted(old_syms.keys() & new_syms.keys()):
        o, n = old_syms[name], new_syms[name]
        if (o["min"], o["max"]) == (n["min"], n["max"]):
            continue
        widened = n["min"] <= o["min"] and n["max"] >= o["max"]
        changes.append(Change("range", "minor" if widened else "major",
                              f"{name}: {_range(o)} -> {_range(n)} ({'widened' if widened else 'narrowed'})"))
    for kind in ("inputs", "outputs"):
        o_list, n_list = old[kind], new[kind]
        for i in range(max(len(o_list), len(n_list))):
            o = o_list[i] if i < len(o_list) else None
            n = n_list[i] if i < len(n_list) else None
            if o == n:
                continue
            text = (f"{kind[:-1]} {i}: " + (_tensor_text(o) if o else "(none)") + " -> "
                    + (_tensor_text(n) if n else "(none)"))
            changes.append(Change("signature", "major", text))
    return changes


def _range(symbol: dict) -> str:
    return f"{symbol['min']}..{symbol['max']}"


def _target_keys(targets: list[dict]) -> dict[str, dict]:
    keys = {}
    for t in targets:
        if t["kind"] == "cuda":
            keys.update({f"cuda sm_{a}": t for a in t.get("archs", [])})
        else:
            keys[" ".join(str(t.get(k)) for k in ("kind", "arch", "isa") if t.get(k))] = t
    return keys


def _targets(old: list[dict], new: list[dict]) -> list[Change]:
    o, n = _target_keys(old), _target_keys(new)
    changes = [Change("target", "major", f"target {k} dropped") for k in sorted(o.keys() - n.keys())]
    changes += [Change("target", "minor", f"target {k} added") for k in sorted(n.keys() - o.keys())]
    o_driver = max((t.get("min_driver_version", 0) for t in old if t["kind"] == "cuda"), default=None)
    n_driver = max((t.get("min_driver_version", 0) for t in new if t["kind"] == "cuda"), default=None)
    if o_driver is not None and n_driver is not None and o_driver != n_driver:
        changes.append(Change("target", "major" if n_driver > o_driver else "minor",
                              f"CUDA minimum driver version {o_driver} -> {n_driver}"))
    return changes


def _weights(old: Package, new: Package) -> list[Change]:
    o = read_tensors(old.members[layout.WEIGHTS], f"{old.path}: {layout.WEIGHTS}")
    n = read_tensors(new.members[layout.WEIGHTS], f"{new.path}: {layout.WEIGHTS}")
    changes = [Change("weights", "patch", f"weight {k} removed ({o[k].describe()})") for k in sorted(o.keys() - n.keys())]
    changes += [Change("weights", "patch", f"weight {k} added ({n[k].describe()})") for k in sorted(n.keys() - o.keys())]
    for k in sorted(o.keys() & n.keys()):
        if o[k].dtype != n[k].dtype or o[k].shape != n[k].shape:
            changes.append(Change("weights", "patch", f"weight {k}: {o[k].describe()} -> {n[k].describe()}"))
        elif o[k].data != n[k].data:
            delta = np.abs(n[k].values() - o[k].values())
            changes.append(Change("weights", "patch", f"weight {k}: values changed, max abs change "
                                                      f"{float(np.nanmax(delta)) if delta.size else 0.0:.3g}"))
    return changes


def _members(old: Package, new: Package) -> list[Change]:
    """Kernels and the plan, by member digest (the weights are compared tensor by tensor above)."""
    o, n = old.manifest["members"], new.manifest["members"]
    changes = []
    for name in sorted(o.keys() | n.keys()):
        if name == layout.WEIGHTS or o.get(name, {}).get("sha256") == n.get(name, {}).get("sha256"):
            continue
        what = "plan" if name == layout.PROGRAM else "kernels"
        state = "added" if name not in o else "removed" if name not in n else "changed"
        changes.append(Change(what, "patch", f"{name} {state}"))
    return changes


def _producer(old: dict, new: dict) -> list[Change]:
    o, n = old.get("producer", {}), new.get("producer", {})
    return [Change("producer", "patch", f"{k} {o.get(k, '(none)')} -> {n.get(k, '(none)')}")
            for k in sorted(o.keys() | n.keys()) if o.get(k) != n.get(k)]


def _metadata(old: dict, new: dict) -> list[Change]:
    o, n = old.get("user_metadata", {}), new.get("user_metadata", {})
    return [Change("metadata", "patch", f"metadata {k}: {o.get(k, '(none)')!r} -> {n.get(k, '(none)')!r}")
            for k in sorted(o.keys() | n.keys()) if o.get(k) != n.get(k)]
