#!/usr/bin/env python3
"""Build the double-click app: a PyInstaller one-folder bundle plus a per-platform package.

    python build_installer.py --check      # validate spec, data files and metadata in seconds
    python build_installer.py              # build dist/guitrainer/ and the platform package
    python build_installer.py --self-test  # build, then run the bundle's --self-test

Linux: ``dist/guitrainer-<version>-linux-x86_64.tar.gz`` holding the app folder, a .desktop
entry, the icon and ``install.sh`` (registers the app for the current user, no root).
Windows: an Inno Setup script (``build/guitrainer.iss``) compiled with ``iscc`` when present.
macOS: PyInstaller's ``guitrainer.app`` bundle, wrapped in a .dmg with ``hdiutil`` when present.
Only the Linux package can be built on Linux; the others are coded and documented here.
"""

from __future__ import annotations

import argparse
import configparser
import importlib.metadata as md
import importlib.util
import os
import platform
import plistlib
import shutil
import subprocess
import sys
import tarfile
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent
NAME = "guitrainer"
ENTRY = ROOT / "guitrainer" / "__main__.py"
ICON_PNG = ROOT / "resources" / "icons" / "guitrainer.png"
DESKTOP = ROOT / "resources" / "guitrainer.desktop"
DATA_DIRS = ["resources", "presets"]

# Packages that read their own metadata at run time (importlib.metadata.version(...)).
COPY_METADATA = [
    "requests", "filelock", "numpy", "tqdm", "regex", "packaging", "tokenizers", "huggingface-hub",
    "safetensors", "accelerate", "pyyaml", "diffusers", "transformers", "peft", "torch", "bitsandbytes",
]
# Imported lazily (inside functions), so PyInstaller's static analysis would miss them.
HIDDEN_IMPORTS = [
    "guitrainer.engine.trainer", "guitrainer.engine.models.loading", "guitrainer.engine.network.lora", "guitrainer.engine.data",
    "guitrainer.engine.optim", "guitrainer.engine.memory", "guitrainer.engine.lab", "guitrainer.engine.verify",
    "guitrainer.engine.captioners", "guitrainer.selftest",
    "guitrainer.core.device.hardware", "guitrainer.core.precision.advisor", "guitrainer.core.memory.estimate", "guitrainer.core.device.environment",
]
COLLECT_SUBMODULES = ["guitrainer", "diffusers.models", "diffusers.schedulers", "diffusers.pipelines.stable_diffusion"]
EXCLUDES = ["tkinter", "matplotlib", "IPython", "jupyter", "pytest", "tensorboard"]
BUNDLE_ID = "org.guitrainer.guitrainer"


def version() -> str:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["version"]


def pyinstaller_args(dist: Path, work: Path) -> list[str]:
    """The full PyInstaller command line (also printed by --check)."""
    sep = os.pathsep
    args = [
        str(ENTRY), "--name", NAME, "--onedir", "--windowed", "--noconfirm", "--clean",
        "--distpath", str(dist), "--workpath", str(work), "--specpath", str(work),
        "--icon", str(ICON_PNG),
    ]
    for d in DATA_DIRS:
        args += ["--add-data", f"{ROOT / d}{sep}{d}"]
    for pkg in COPY_METADATA:
        args += ["--copy-metadata", pkg]
    for mod in HIDDEN_IMPORTS:
        args += ["--hidden-import", mod]
    for mod in COLLECT_SUBMODULES:
        args += ["--collect-submodules", mod]
    for mod in EXCLUDES:
        args += ["--exclude-module", mod]
    if platform.system() == "Darwin":
        args += ["--osx-bundle-identifier", BUNDLE_ID]
    return args


# --------------------------------------------------------------------------- check


def check() -> list[str]:
    """Every problem that would break a build or the built app; empty when all is well."""
    problems: list[str] = []
    if not ENTRY.is_file():
        problems.append(f"entry script missing: {ENTRY}")
    if not ICON_PNG.is_file():
        problems.append(f"icon missing: {ICON_PNG}")
    for d in DATA_DIRS:
        if not (ROOT / d).is_dir() or not any((ROOT / d).iterdir()):
            problems.append(f"data folder missing or empty: {d}/")
    problems += check_desktop_file(DESKTOP)
    for preset in sorted((ROOT / "presets").glob("*.toml")):
        try:
            tomllib.loads(preset.read_text(encoding="utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
            problems.append(f"preset {preset.name} is not valid TOML: {e}")
    for pkg in COPY_METADATA:
        try:
            md.version(pkg)
        except md.PackageNotFoundError:
            problems.append(f"--copy-metadata {pkg}: package not installed")
    for mod in HIDDEN_IMPORTS:
        if importlib.util.find_spec(mod) is None:
            problems.append(f"--hidden-import {mod}: module not found")
    return problems


def check_desktop_file(path: Path) -> list[str]:
    """A freedesktop.org entry: [Desktop Entry] with Type, Name, Exec, Icon; MIME for presets."""
    if not path.is_file():
        return [f".desktop entry missing: {path}"]
    cp = configparser.ConfigParser(interpolation=None)
    cp.optionxform = str  # keys are case-sensitive
    try:
        cp.read(path, encoding="utf-8")
    except configparser.Error as e:
        return [f"{path.name}: {e}"]
    if "Desktop Entry" not in cp:
        return [f"{path.name}: no [Desktop Entry] group"]
    entry = cp["Desktop Entry"]
    out = [f"{path.name}: missing key {k}" for k in ("Type", "Name", "Exec", "Icon", "Categories") if k not in entry]
    if "Exec" in entry and "%F" not in entry["Exec"] and "%f" not in entry["Exec"]:
        out.append(f"{path.name}: Exec should pass opened files (%F) so presets open by double-click")
    return out


# --------------------------------------------------------------------------- build


def folder_size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink())


def build(dist: Path, work: Path) -> Path:
    try:
        import PyInstaller.__main__ as pyi
    except ImportError:
        raise SystemExit("PyInstaller is not installed: pip install 'pyinstaller>=6.10'") from None
    pyi.run(pyinstaller_args(dist, work))
    app_dir = dist / NAME
    if not app_dir.is_dir():
        raise SystemExit(f"PyInstaller produced no {app_dir}")
    return app_dir


INSTALL_SH = """#!/bin/sh
# Registers guitrainer for the current user: app files, menu entry, icon. No root needed.
set -e
here="$(cd "$(dirname "$0")" && pwd)"
dest="${XDG_DATA_HOME:-$HOME/.local/share}"
mkdir -p "$dest/guitrainer" "$dest/applications" "$dest/icons/hicolor/256x256/apps" "$HOME/.local/bin"
rm -rf "$dest/guitrainer/app"
cp -r "$here/guitrainer" "$dest/guitrainer/app"
cp "$here/guitrainer.png" "$dest/icons/hicolor/256x256/apps/guitrainer.png"
sed "s|^Exec=.*|Exec=\\"$dest/guitrainer/app/guitrainer\\" %F|" "$here/guitrainer.desktop" > "$dest/applications/guitrainer.desktop"
ln -sf "$dest/guitrainer/app/guitrainer" "$HOME/.local/bin/guitrainer"
command -v update-desktop-database >/dev/null 2>&1 && update-desktop-database "$dest/applications" || true
echo "guitrainer installed: find it in your applications menu, or run 'guitrainer'."
"""


def package_linux(app_dir: Path, dist: Path) -> Path:
    stage = dist / "package"
    shutil.rmtree(stage, ignore_errors=True)
    stage.mkdir(parents=True)
    (stage / "install.sh").write_text(INSTALL_SH, encoding="utf-8")
    (stage / "install.sh").chmod(0o755)
    shutil.copy(DESKTOP, stage / "guitrainer.desktop")
    shutil.copy(ICON_PNG, stage / "guitrainer.png")
    out = dist / f"{NAME}-{version()}-linux-{platform.machine()}.tar.gz"
    with tarfile.open(out, "w:gz", compresslevel=6) as tar:
        tar.add(app_dir, arcname=f"{NAME}-{version()}/guitrainer")
        for f in stage.iterdir():
            tar.add(f, arcname=f"{NAME}-{version()}/{f.name}")
    return out


ISS_TEMPLATE = """; Inno Setup script for guitrainer (generated by build_installer.py)
[Setup]
AppName=guitrainer
SetupIconFile={icon}
UninstallDisplayIcon={{app}}\\guitrainer.exe
AppVersion={version}
DefaultDirName={{localappdata}}\\Programs\\guitrainer
PrivilegesRequired=lowest
OutputBaseFilename=guitrainer-{version}-setup
Compression=lzma2
SolidCompression=yes
ChangesAssociations=yes

[Files]
Source: "{app_dir}\\*"; DestDir: "{{app}}"; Flags: recursesubdirs

[Icons]
Name: "{{userprograms}}\\guitrainer"; Filename: "{{app}}\\guitrainer.exe"
Name: "{{userdesktop}}\\guitrainer"; Filename: "{{app}}\\guitrainer.exe"

[Registry]
; Offer guitrainer in "Open with" for .toml presets without taking over the extension.
Root: HKCU; Subkey: "Software\\Classes\\.toml\\OpenWithProgids"; ValueType: string; ValueName: "guitrainer.preset"; ValueData: ""
Root: HKCU; Subkey: "Software\\Classes\\guitrainer.preset\\shell\\open\\command"; ValueType: string; ValueData: "{open_cmd}"
"""


def make_ico(png: Path, ico: Path) -> Path:
    """A Windows .ico (16-256 px) from the app's PNG icon: Inno Setup's SetupIconFile takes only .ico."""
    from PIL import Image

    ico.parent.mkdir(parents=True, exist_ok=True)
    with Image.open(png) as im:
        im.save(ico, format="ICO", sizes=[(s, s) for s in (16, 24, 32, 48, 64, 128, 256)])
    return ico


def package_windows(app_dir: Path, work: Path) -> Path | None:
    iss = work / "guitrainer.iss"
    open_cmd = '""{app}\\guitrainer.exe"" ""%1""'
    icon = make_ico(ICON_PNG, work / "guitrainer.ico")
    iss.write_text(
        ISS_TEMPLATE.format(version=version(), app_dir=app_dir, open_cmd=open_cmd, icon=icon), encoding="utf-8"
    )
    iscc = shutil.which("iscc") or shutil.which("ISCC.exe")
    if iscc is None:
        print(f"Inno Setup not found: wrote {iss}; install Inno Setup 6 and run: iscc {iss}")
        return None
    subprocess.run([iscc, str(iss)], check=True)
    return next(iter(sorted(work.glob("Output/*.exe"))), None)


def macos_info_plist(plist: dict) -> dict:
    """``Info.plist`` with what Finder needs to hand presets and folders to the app.

    Presets (``.toml``) and folders are declared as documents the app can open ("Open With",
    dropping on the Dock icon); Finder then sends them as ``QFileOpenEvent`` (see
    ``ui.single_instance.FileOpenFilter``). ``LSHandlerRank`` Alternate: offered, never the default
    for every .toml on the Mac.
    """
    out = dict(plist)
    out["CFBundleIdentifier"] = BUNDLE_ID
    out["CFBundleShortVersionString"] = version()
    out["NSHighResolutionCapable"] = True
    out["CFBundleDocumentTypes"] = [
        {
            "CFBundleTypeName": "guitrainer preset",
            "CFBundleTypeRole": "Editor",
            "LSHandlerRank": "Alternate",
            "CFBundleTypeExtensions": ["toml"],
            "LSItemContentTypes": ["public.toml", "public.plain-text"],
        },
        {
            "CFBundleTypeName": "Image folder",
            "CFBundleTypeRole": "Viewer",
            "LSHandlerRank": "Alternate",
            "LSItemContentTypes": ["public.folder"],
        },
    ]
    return out


def patch_info_plist(app: Path) -> Path:
    """Rewrite the bundle's ``Contents/Info.plist`` with :func:`macos_info_plist`; re-sign ad hoc when
    ``codesign`` exists (PyInstaller signed the bundle, and editing the plist breaks that signature)."""
    path = app / "Contents" / "Info.plist"
    with open(path, "rb") as fh:
        plist = plistlib.load(fh)
    with open(path, "wb") as fh:
        plistlib.dump(macos_info_plist(plist), fh)
    if shutil.which("codesign"):
        subprocess.run(["codesign", "--force", "--deep", "--sign", "-", str(app)], check=True)
    return path


def package_macos(dist: Path) -> Path | None:
    app = dist / f"{NAME}.app"
    if not app.is_dir():
        print("no .app bundle found (PyInstaller makes one with --windowed on macOS)")
        return None
    patch_info_plist(app)
    dmg = dist / f"{NAME}-{version()}-macos.dmg"
    if shutil.which("hdiutil"):
        subprocess.run(["hdiutil", "create", "-volname", NAME, "-srcfolder", str(app), "-ov", str(dmg)], check=True)
        return dmg
    return app


def self_test(app_dir: Path) -> int:
    exe = app_dir / (NAME + (".exe" if os.name == "nt" else ""))
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen")
    t0 = time.perf_counter()
    proc = subprocess.run([str(exe), "--self-test"], env=env, capture_output=True, text=True, timeout=600)
    print(proc.stdout[-4000:], proc.stderr[-4000:], sep="\n")
    print(f"self-test exit {proc.returncode} in {time.perf_counter() - t0:.1f} s")
    return proc.returncode


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--check", action="store_true", help="validate the spec and data files without building")
    p.add_argument("--self-test", action="store_true", help="after building, run the bundle's --self-test")
    p.add_argument("--dist", default=str(ROOT / "dist"))
    p.add_argument("--work", default=str(ROOT / "build"))
    args = p.parse_args(argv)
    dist, work = Path(args.dist), Path(args.work)

    t0 = time.perf_counter()
    problems = check()
    if args.check:
        for line in problems:
            print(f"problem: {line}")
        has_pyi = importlib.util.find_spec("PyInstaller") is not None
        print(f"PyInstaller: {'installed' if has_pyi else 'not installed (needed only to build)'}")
        print(f"would bundle: data {', '.join(DATA_DIRS)}; metadata of {len(COPY_METADATA)} packages; "
              f"{len(HIDDEN_IMPORTS)} hidden imports; {len(pyinstaller_args(dist, work))} PyInstaller arguments")
        print(f"check {'failed' if problems else 'passed'} in {time.perf_counter() - t0:.2f} s")
        return 1 if problems else 0
    if problems:
        for line in problems:
            print(f"problem: {line}", file=sys.stderr)
        return 1
    app_dir = build(dist, work)
    built = time.perf_counter() - t0
    system = platform.system()
    package = None
    if system == "Linux":
        package = package_linux(app_dir, dist)
    elif system == "Windows":
        package = package_windows(app_dir, work)
    elif system == "Darwin":
        package = package_macos(dist)
    print(f"app folder: {app_dir} ({folder_size(app_dir) / 1e9:.2f} GB, {sum(1 for _ in app_dir.rglob('*'))} files)")
    if package:
        size = package.stat().st_size if package.is_file() else folder_size(package)
        print(f"package: {package} ({size / 1e9:.2f} GB)")
    print(f"build {built:.0f} s, total {time.perf_counter() - t0:.0f} s")
    print(f"bundled data: {', '.join(DATA_DIRS)}; metadata: {', '.join(COPY_METADATA)}")
    if args.self_test:
        return self_test(app_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
