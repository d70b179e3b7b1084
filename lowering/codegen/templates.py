"""The Jinja environment every backend renders its templates/<language>/ files with."""

from __future__ import annotations

from pathlib import Path

import jinja2

TEMPLATES = Path(__file__).resolve().parents[2] / "templates"


def template_env(language: str) -> jinja2.Environment:
    """templates/<language>/ with StrictUndefined: a template receives plain data and nothing else."""
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES / language)),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
    )
