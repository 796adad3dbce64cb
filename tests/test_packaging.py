"""A wheel (``pip install .``, not editable) carries the shipped presets and resources, and the app finds them."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_every_shipped_file_is_listed_in_data_files():
    """A new folder under presets/ or resources/ must get its line in pyproject's data-files."""
    spec = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]["data-files"]
    listed = set()
    for target, patterns in spec.items():
        for pattern in patterns:
            for f in ROOT.glob(pattern):
                assert f.is_file(), f"{pattern} matches the folder {f}: data-files copies files only"
                assert target == f"share/guitrainer/{f.parent.relative_to(ROOT).as_posix()}", (target, f)
                listed.add(f)
    shipped = {f for top in ("presets", "resources") for f in (ROOT / top).rglob("*") if f.is_file()}
    shipped = {f for f in shipped if "__pycache__" not in f.parts}
    assert shipped - listed == set(), "not installed by a wheel: " + ", ".join(map(str, sorted(shipped - listed)))


@pytest.mark.slow
def test_a_wheel_install_finds_presets_and_model_configs(tmp_path):
    src = tmp_path / "src"  # a copy: building in the checkout would leave build/ and egg-info there
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info")
    for name in ("guitrainer", "presets", "resources"):
        shutil.copytree(ROOT / name, src / name, ignore=ignore)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    wheels = tmp_path / "wheels"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(src), "--no-deps", "-q", "-w", str(wheels)],
        check=True, capture_output=True, text=True, timeout=300,
    )
    (wheel,) = wheels.glob("guitrainer-*.whl")
    env_dir = tmp_path / "env"
    venv.EnvBuilder(with_pip=False, system_site_packages=False).create(env_dir)
    py = env_dir / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    # pip of this interpreter installs into the new environment; only the two small pure-Python
    # dependencies that presets need, from the configured index (no torch, no Qt: nothing else is imported)
    purelib = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                             check=True, capture_output=True, text=True).stdout.strip()
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--ignore-installed", "--prefix", str(env_dir), str(wheel),
         "platformdirs", "tomli-w"],
        check=True, capture_output=True, text=True, timeout=300,
    )
    code = (
        "import guitrainer, guitrainer.base.paths as p\n"
        "from guitrainer.config.presets import PresetStore\n"
        "print(guitrainer.__file__); print(p.install_root())\n"
        "print((p.resources_dir() / 'models' / 'sd15' / 'unet' / 'config.json').is_file())\n"
        "print(len(PresetStore().names()))\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    out = subprocess.run([str(py), "-c", code], check=True, capture_output=True, text=True, env=env, cwd=tmp_path)
    module_file, root, has_config, n_presets = out.stdout.strip().splitlines()
    assert Path(module_file).is_relative_to(Path(purelib).resolve()) or Path(module_file).is_relative_to(env_dir)
    assert Path(root) == (env_dir / "share" / "guitrainer").resolve() or Path(root).is_relative_to(env_dir)
    assert has_config == "True"
    assert int(n_presets) == len(list((ROOT / "presets").glob("*.toml")))
