"""The README's Layout section maps every package of guitrainer/ and names every module (one line each),
and nothing that is gone."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "guitrainer"


def _layout_section() -> str:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    start = text.index("\n## Layout\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def test_every_package_has_its_line_and_every_line_its_package():
    packages = {
        "guitrainer/" if p.parent == PACKAGE else f"{p.parent.relative_to(PACKAGE)}/" for p in PACKAGE.rglob("__init__.py")
    }
    listed = set(re.findall(r"^- `([\w/]+/)`: \S", _layout_section(), flags=re.M))
    assert packages - listed == set(), "packages missing from README's Layout"
    assert listed - packages == set(), "README's Layout lists packages that do not exist"


def test_every_module_has_its_line_and_every_line_its_module():
    modules = {str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py") if p.name != "__init__.py"}
    listed = set(re.findall(r"^- `([\w/]+\.py)`: \S", _layout_section(), flags=re.M))
    assert modules - listed == set(), "modules missing from README's Layout"
    assert listed - modules == set(), "README's Layout lists modules that do not exist"
