"""What names a package in a registry: a registry-safe name, a semantic version, user metadata.

The rules are the strictest of the registries a package is published to, so a name that passes here is
accepted by every one of them unchanged: an OCI repository path component (distribution-spec:
`[a-z0-9]+((\\.|_|__|-+)[a-z0-9]+)*`), a Triton model directory, an MLflow registered model name.
Versions are Semantic Versioning 2.0.0 (semver.org), which `aotpack diff --check-version` compares.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ..errors import AotpackError

NAME_RULE = ("lowercase letters and digits, in words joined by single '.', '_' or '-', starting and ending "
             "with a letter or digit, at most 128 characters (e.g. mlp, gpt2-small, bert_base.v2)")
_NAME = re.compile(r"[a-z0-9]+(?:[._-][a-z0-9]+)*")
MAX_NAME = 128

# semver.org's own regular expression (the one it recommends), anchored by fullmatch.
_SEMVER = re.compile(
    r"(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?"
    r"(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?")
VERSION_RULE = "MAJOR.MINOR.PATCH, optionally -PRERELEASE and +BUILD (semver.org), e.g. 1.4.0"

META_KEY_RULE = ("letters, digits, '.', '_' and '-', starting with a letter or digit, at most 128 characters "
                 "(e.g. license, source.revision, org.opencontainers.image.source)")
_META_KEY = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


class IdentityError(AotpackError):
    """A package name, version or metadata entry that a registry would not accept."""


def check_name(name: str, where: str = "--name") -> str:
    if not (len(name) <= MAX_NAME and _NAME.fullmatch(name)):
        raise IdentityError(f"{where} {name!r} is not a registry-safe package name: use {NAME_RULE}")
    return name


def name_from(text: str) -> str:
    """A registry-safe name made from a file or folder name (MyNet -> mynet, "my model" -> my-model), for
    the default `--name`; refuses text with nothing usable in it."""
    name = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:MAX_NAME].strip("-")
    if not name:
        raise IdentityError(f"cannot make a package name from {text!r}; pass --name ({NAME_RULE})")
    return name


@dataclass(frozen=True, order=False)
class Version:
    major: int
    minor: int
    patch: int
    prerelease: tuple[str, ...] = ()
    build: str = ""

    def __str__(self) -> str:
        text = f"{self.major}.{self.minor}.{self.patch}"
        text += f"-{'.'.join(self.prerelease)}" if self.prerelease else ""
        return text + (f"+{self.build}" if self.build else "")

    def precedence(self) -> tuple:
        """semver.org §11: a release outranks its prereleases; numeric identifiers compare as numbers and
        below alphanumeric ones; build metadata does not count."""
        pre = tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in self.prerelease)
        return (self.major, self.minor, self.patch, 0 if self.prerelease else 1, pre)

    def bumped(self, part: str) -> Version:
        if part == "major":
            return Version(self.major + 1, 0, 0)
        if part == "minor":
            return Version(self.major, self.minor + 1, 0)
        return Version(self.major, self.minor, self.patch + 1)


def parse_version(text: str, where: str = "--version") -> Version:
    match = _SEMVER.fullmatch(text)
    if match is None:
        raise IdentityError(f"{where} {text!r} is not a semantic version: use {VERSION_RULE}")
    major, minor, patch, pre, build = match.groups()
    return Version(int(major), int(minor), int(patch), tuple(pre.split(".")) if pre else (), build or "")


def check_version(text: str, where: str = "--version") -> str:
    parse_version(text, where)
    return text


def check_metadata(metadata: Mapping[str, str] | None, where: str = "metadata") -> dict[str, str]:
    """User metadata as the manifest records it: a str -> str map, as OCI annotations and safetensors'
    `__metadata__` are, so it maps onto every registry's metadata unchanged."""
    out: dict[str, str] = {}
    for key, value in (metadata or {}).items():
        if not isinstance(key, str) or not _META_KEY.fullmatch(key):
            raise IdentityError(f"{where} key {key!r} is not allowed: use {META_KEY_RULE}")
        if not isinstance(value, str):
            raise IdentityError(f"{where}[{key!r}] is a {type(value).__name__}; metadata values are strings")
        out[key] = value
    return out


def parse_meta_options(items: Iterable[str]) -> dict[str, str]:
    """`--meta KEY=VALUE` options (repeatable) -> the metadata dict; a key given twice is refused."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise IdentityError(f"--meta {item!r}: expected KEY=VALUE")
        if key in out:
            raise IdentityError(f"--meta {key}: given twice ({out[key]!r} and {value!r}); give each key once")
        out[key] = value
    return check_metadata(out, "--meta")
