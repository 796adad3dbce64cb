"""DESIGN.md §1 rules, checked in fresh interpreters so other tests cannot pollute sys.modules."""

from __future__ import annotations

import os
import subprocess
import sys


def _run(code: str) -> str:
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_core_imports_neither_qt_nor_torch():
    code = (
        "import sys, pkgutil, importlib, guitrainer.core as c\n"
        "for m in pkgutil.iter_modules(c.__path__): importlib.import_module('guitrainer.core.' + m.name)\n"
        "import guitrainer.config, guitrainer.presets\n"
        "print('PySide6' in sys.modules, 'torch' in sys.modules)"
    )
    assert _run(code) == "False False"


def test_engine_imports_no_qt():
    code = (
        "import sys, pkgutil, importlib, guitrainer.engine as e\n"
        "for m in pkgutil.iter_modules(e.__path__): importlib.import_module('guitrainer.engine.' + m.name)\n"
        "print('PySide6' in sys.modules)"
    )
    assert _run(code) == "False"


def test_app_window_opens_without_torch():
    out = _run("from guitrainer.app import main; main(['--quit-after-show'])")
    assert "torch imported: False" in out
