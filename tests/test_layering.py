"""DESIGN.md §1 layering, in one place.

The import contracts (pyproject.toml ``[tool.importlinter]``, also run by CI as ``lint-imports``) check
every import statement; the fresh interpreters below check what a static check cannot: importing core,
the config and the presets loads neither torch nor Qt, and the window opens without torch.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TESTS = Path(__file__).resolve().parent
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def _run(code: str) -> str:
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def _lint_imports(cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"], capture_output=True, text=True, cwd=cwd, env=env, timeout=120
    )


def test_import_contracts_hold():
    out = _lint_imports(ROOT)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "0 broken" in out.stdout


def _copy_with(tmp_path: Path, module: str, line: str) -> subprocess.CompletedProcess[str]:
    """lint-imports on a copy of the package where ``module`` (a path under guitrainer/) gains ``line``."""
    shutil.copytree(ROOT / "guitrainer", tmp_path / "guitrainer", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    target = tmp_path / "guitrainer" / module
    target.write_text(target.read_text(encoding="utf-8") + f"\n{line}  # noqa\n", encoding="utf-8")
    return _lint_imports(tmp_path, env=dict(os.environ, PYTHONPATH=str(tmp_path)))


def test_import_contracts_fail_when_the_engine_imports_qt(tmp_path):
    """The contracts can fail: a copy of the package whose engine imports PySide6 breaks the Qt ban."""
    out = _copy_with(tmp_path, "engine/optim.py", "import PySide6")
    assert out.returncode != 0
    assert "Qt only in the UI: engine, core, config and base never import PySide6 or \npyqtgraph BROKEN" in out.stdout
    assert "guitrainer.engine.optim -> PySide6" in out.stdout


def test_the_layers_contract_fails_when_core_imports_the_ui(tmp_path):
    """An arrow pointing up (core -> ui) breaks the layers contract, naming the import."""
    out = _copy_with(tmp_path, "core/dataset/tags.py", "from guitrainer.ui import workers")
    assert out.returncode != 0
    assert "layers: entry points over ui over engine over core over config over base BROKEN" in out.stdout
    assert "guitrainer.core.dataset.tags -> guitrainer.ui.workers" in out.stdout


def test_the_layers_contract_fails_when_config_imports_core(tmp_path):
    """Config sits below core: the old arrow (config -> core) is now an error."""
    out = _copy_with(tmp_path, "config/checks.py", "from guitrainer.core.dataset import tags")
    assert out.returncode != 0
    assert "guitrainer.config.checks -> guitrainer.core.dataset.tags" in out.stdout


def test_core_config_and_presets_load_neither_torch_nor_qt():
    """Import every core module, the config and the presets, then run the precision rules, the VRAM
    estimate and the model detection: torch, Qt and bitsandbytes stay out (they load only in the probe)."""
    code = (
        f"import sys; sys.path.insert(0, {str(TESTS)!r})\n"
        "import pkgutil, importlib, guitrainer.core as c, guitrainer.base as b\n"
        "for m in [*pkgutil.walk_packages(c.__path__, 'guitrainer.core.'), *pkgutil.walk_packages(b.__path__, 'guitrainer.base.')]:\n"
        "    importlib.import_module(m.name)\n"
        "import guitrainer.config, guitrainer.config.presets\n"
        "from guitrainer.core.model import checkpoint\n"
        "from guitrainer.core.precision import advisor\n"
        "from guitrainer.core.memory import estimate, hints\n"
        "from helpers import fake_device\n"
        "from guitrainer.config import TrainingConfig\n"
        "d = fake_device('t4'); cfg = TrainingConfig()\n"
        "advisor.advise(d, cfg); estimate.estimate(cfg, device=d); hints.hints(cfg, device=d)\n"
        "checkpoint.detect_model('demo')\n"
        "print('torch' in sys.modules, 'PySide6' in sys.modules, 'bitsandbytes' in sys.modules)"
    )
    assert _run(code) == "False False False"


def test_app_window_opens_without_torch():
    out = _run("from guitrainer.app import main; main(['--quit-after-show'])")
    assert "torch imported: False" in out


def test_every_engine_module_is_public_or_forbidden_to_the_ui():
    """A new engine module must be classified. Public to the UI: each engine package's ``__init__`` (its face)
    and the top-level entry modules named in pyproject's comment. Every other module, each package's submodules
    among them, is listed in the contract that keeps the UI out of the engine's internals."""
    import tomllib

    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    contract = next(
        c for c in tomllib.loads(pyproject)["tool"]["importlinter"]["contracts"] if c.get("source_modules") == ["guitrainer.ui", "guitrainer.app"]
    )
    forbidden = {m.removeprefix("guitrainer.engine.") for m in contract["forbidden_modules"]}
    entry = set(re.findall(r"engine\.([\w.]+) \(", pyproject))
    engine = ROOT / "guitrainer" / "engine"
    packages = {".".join(p.parent.relative_to(engine).parts) for p in engine.rglob("__init__.py")} - {""}
    modules = {".".join(p.relative_to(engine).with_suffix("").parts) for p in engine.rglob("*.py") if p.stem != "__init__"}
    submodules = {m for m in modules if "." in m}
    # a package named in the contract is forbidden whole (import-linter's as_packages): the model families,
    # which only the engine itself uses
    whole = forbidden & packages
    under_whole = {m for m in modules | packages if any(m == w or m.startswith(w + ".") for w in whole)}
    covered = forbidden | under_whole
    assert entry and entry - (modules - submodules) == set(), "entry modules are top-level engine modules that exist"
    assert submodules - covered == set(), "a package's submodules are forbidden to the UI: it uses the package's face"
    assert forbidden & (packages - whole | entry) == set(), "a package's face and the entry modules stay public"
    assert forbidden - modules - whole == set(), "the contract lists engine modules that do not exist"
    assert modules - entry - covered == set(), "engine modules neither public nor forbidden to the UI"
