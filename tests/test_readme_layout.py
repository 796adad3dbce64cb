"""The README's Layout section names every module of guitrainer/ (one line each), and nothing that is gone."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _layout_section() -> str:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    start = text.index("\n## Layout\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def test_every_module_has_its_line_and_every_line_its_module():
    package = REPO / "guitrainer"
    modules = {
        str(p.relative_to(package))
        for p in package.rglob("*.py")
        if p.name != "__init__.py" or p.parent.name == "config"  # config/__init__ holds TrainingConfig's face
    }
    listed = set(re.findall(r"^- `([\w/]+\.py)`: \S", _layout_section(), flags=re.M))
    assert modules - listed == set(), "modules missing from README's Layout"
    assert listed - modules == set(), "README's Layout lists modules that do not exist"
