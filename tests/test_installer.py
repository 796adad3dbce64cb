"""build_installer.py --check, the .desktop entry, and the app's --self-test."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _load_builder():
    spec = importlib.util.spec_from_file_location("build_installer", ROOT / "build_installer.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_check_passes_on_this_tree():
    builder = _load_builder()
    assert builder.check() == []
    args = builder.pyinstaller_args(Path("/tmp/d"), Path("/tmp/w"))
    assert "--windowed" in args and "--onedir" in args
    assert any(a.endswith(f"presets{os.pathsep}presets") for a in args)
    assert args.count("--copy-metadata") == len(builder.COPY_METADATA)


def test_check_finds_broken_desktop_file(tmp_path):
    builder = _load_builder()
    bad = tmp_path / "x.desktop"
    bad.write_text("[Desktop Entry]\nType=Application\nName=x\nExec=x\n", encoding="utf-8")
    problems = builder.check_desktop_file(bad)
    assert any("Icon" in p for p in problems) and any("%F" in p for p in problems)
    assert builder.check_desktop_file(ROOT / "resources" / "guitrainer.desktop") == []


def test_macos_bundle_declares_presets_and_folders(tmp_path, monkeypatch):
    """The .app's Info.plist makes Finder offer guitrainer for .toml presets and folders (coded here, run on a Mac)."""
    import plistlib

    builder = _load_builder()
    app = tmp_path / "guitrainer.app"
    (app / "Contents").mkdir(parents=True)
    original = {"CFBundleName": "guitrainer", "CFBundleExecutable": "guitrainer", "CFBundleIdentifier": "guitrainer"}
    with open(app / "Contents" / "Info.plist", "wb") as fh:
        plistlib.dump(original, fh)
    monkeypatch.setattr(builder.shutil, "which", lambda name: None)  # no codesign on Linux
    path = builder.patch_info_plist(app)
    with open(path, "rb") as fh:
        plist = plistlib.load(fh)
    assert plist["CFBundleExecutable"] == "guitrainer"  # PyInstaller's keys are kept
    assert plist["CFBundleIdentifier"] == builder.BUNDLE_ID and plist["CFBundleShortVersionString"] == builder.version()
    preset, folder = plist["CFBundleDocumentTypes"]
    assert preset["CFBundleTypeExtensions"] == ["toml"] and preset["LSHandlerRank"] == "Alternate"
    assert folder["LSItemContentTypes"] == ["public.folder"]
    monkeypatch.setattr(builder.platform, "system", lambda: "Darwin")
    args = builder.pyinstaller_args(Path("/tmp/d"), Path("/tmp/w"))
    assert args[args.index("--osx-bundle-identifier") + 1] == builder.BUNDLE_ID


def test_windows_script_has_an_icon_and_the_preset_association(tmp_path, monkeypatch):
    """Coded here, compiled on Windows: the Inno Setup script names a real .ico and registers "Open with"."""
    from PIL import Image

    builder = _load_builder()
    monkeypatch.setattr(builder.shutil, "which", lambda name: None)  # no iscc here: the script is written
    assert builder.package_windows(tmp_path / "app", tmp_path) is None
    iss = (tmp_path / "guitrainer.iss").read_text(encoding="utf-8")
    icon_line = next(line for line in iss.splitlines() if line.startswith("SetupIconFile="))
    ico = Path(icon_line.split("=", 1)[1])
    with Image.open(ico) as im:
        assert im.format == "ICO" and (256, 256) in im.info["sizes"]
    assert "UninstallDisplayIcon={app}\\guitrainer.exe" in iss
    assert '"{app}\\guitrainer.exe" "%1"' in iss.replace('""', '"')


def test_linux_package_layout(tmp_path):
    """The tarball holds the app folder, the .desktop entry, the icon and an executable install.sh."""
    import tarfile

    builder = _load_builder()
    app = tmp_path / "dist" / "guitrainer"
    app.mkdir(parents=True)
    (app / "guitrainer").write_text("#!/bin/sh\necho hi\n")
    out = builder.package_linux(app, tmp_path / "dist")
    with tarfile.open(out) as tar:
        names = tar.getnames()
        top = names[0].split("/")[0]
        assert f"{top}/guitrainer/guitrainer" in names
        assert f"{top}/guitrainer.desktop" in names and f"{top}/guitrainer.png" in names
        assert tar.getmember(f"{top}/install.sh").mode & 0o111


def test_install_script_registers_for_user(tmp_path):
    """Run install.sh from an unpacked package into a fake HOME."""
    import tarfile

    builder = _load_builder()
    app = tmp_path / "dist" / "guitrainer"
    app.mkdir(parents=True)
    exe = app / "guitrainer"
    exe.write_text("#!/bin/sh\necho hi\n")
    exe.chmod(0o755)
    out = builder.package_linux(app, tmp_path / "dist")
    unpack = tmp_path / "unpack"
    with tarfile.open(out) as tar:
        tar.extractall(unpack, filter="tar")
    top = next(unpack.iterdir())
    home = tmp_path / "home"
    env = dict(os.environ, HOME=str(home), XDG_DATA_HOME=str(home / ".local/share"))
    subprocess.run(["sh", str(top / "install.sh")], check=True, env=env, capture_output=True)
    desktop = (home / ".local/share/applications/guitrainer.desktop").read_text()
    assert f"Exec=\"{home}/.local/share/guitrainer/app/guitrainer\" %F" in desktop
    assert (home / ".local/share/icons/hicolor/256x256/apps/guitrainer.png").exists()
    assert os.access(home / ".local/bin/guitrainer", os.X_OK)


@pytest.mark.slow
def test_self_test_flag_trains_and_verifies(tmp_path):
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen", GUITRAINER_HOME=str(tmp_path), OMP_NUM_THREADS="1")
    proc = subprocess.run(
        [sys.executable, "-m", "guitrainer", "--self-test"], capture_output=True, text=True, env=env, timeout=300
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "self-test: OK" in proc.stdout
