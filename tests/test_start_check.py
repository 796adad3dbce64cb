"""The pre-start check reads the dataset as the engine does, and still advises when the device is unknown."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.file_work import count_file_work
from PIL import Image

from guitrainer.base.paths import path_key
from guitrainer.config import DatasetFolder, TrainingConfig
from guitrainer.core.checks.start import check_start
from guitrainer.core.dataset import folder_check
from guitrainer.core.dataset import scan as core_ds
from guitrainer.core.dataset.folder_check import _normalizer, look_at_folders


def images(folder: Path, n: int = 2, prefix: str = "img") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        Image.new("RGB", (64, 64), (40 * i % 255, 120, 200)).save(folder / f"{prefix}{i}.png")
        (folder / f"{prefix}{i}.txt").write_text("a colored square", encoding="utf-8")
    return folder


def config(tmp_path: Path, *folders: Path) -> TrainingConfig:
    cfg = TrainingConfig()
    cfg.model.base = "someone/some-model"  # a hub id: passes the model check without a file
    cfg.output.folder = str(tmp_path / "out")
    cfg.dataset.folders = [DatasetFolder(path=str(f), repeats=1) for f in folders]
    return cfg


def engine_reads(cfg: TrainingConfig) -> list[Path]:
    """What the engine's collect_items starts from (core.dataset.scan_folders), for comparison."""
    scan = core_ds.scan_folders(
        [(f.path, f.repeats) for f in cfg.dataset.folders], cfg.dataset.caption_extension, 512, cfg.dataset.exclude
    )
    return [it.image_path for it in scan.items]


def test_images_only_in_a_subfolder_are_an_error_that_names_the_subfolder(tmp_path):
    root = tmp_path / "dataset"
    images(root / "10_dog")
    cfg = config(tmp_path, root)
    assert engine_reads(cfg) == []  # what made the run fail at load
    check = check_start(cfg)
    assert len(check.errors) == 1, check.errors
    err = check.errors[0]
    assert "subfolders, which are not read: add the subfolder itself" in err
    assert str(root) in err and str(root / "10_dog") in err
    # adding the subfolder itself fixes it
    cfg.dataset.folders = [DatasetFolder(path=str(root / "10_dog"), repeats=10)]
    assert check_start(cfg).ok and len(engine_reads(cfg)) == 2


def test_all_images_left_out_is_an_error(tmp_path):
    folder = images(tmp_path / "imgs", 3)
    cfg = config(tmp_path, folder)
    cfg.dataset.exclude = [str(p) for p in sorted(folder.glob("*.png"))]
    assert engine_reads(cfg) == []
    errors = check_start(cfg).errors
    assert len(errors) == 1 and "all images are left out" in errors[0] and "dataset.exclude" in errors[0]
    cfg.dataset.exclude = cfg.dataset.exclude[:2]  # one left: trains
    assert check_start(cfg).ok and len(engine_reads(cfg)) == 1


def test_left_out_matching_is_the_engines(tmp_path):
    """Exclude entries spelled differently (.., ~-free relative parts, a symlinked folder) match as in scan_folders."""
    folder = images(tmp_path / "imgs", 3)
    link = tmp_path / "link"
    link.symlink_to(folder, target_is_directory=True)
    file_link = tmp_path / "file_link.png"
    file_link.symlink_to(folder / "img2.png")
    cfg = config(tmp_path, link)
    cfg.dataset.exclude = [str(tmp_path / "imgs" / ".." / "imgs" / "img0.png"), str(link / "img1.png"), str(file_link)]
    look = look_at_folders(cfg.dataset.folders, ".txt", cfg.dataset.exclude)
    assert look[0].images == len(engine_reads(cfg)) == 0 and look[0].left_out == 3
    norm = _normalizer()
    for p in [*cfg.dataset.exclude, folder / "img0.png", "relative/x.png", tmp_path / "missing" / "y.png"]:
        assert norm(p) == path_key(p), p


def test_duplicates_across_folders_count_once(tmp_path):
    folder = images(tmp_path / "imgs", 2)
    cfg = config(tmp_path, folder, folder)
    look = look_at_folders(cfg.dataset.folders, ".txt")
    assert [lk.images for lk in look] == [2, 0] and len(engine_reads(cfg)) == 2
    check = check_start(cfg)
    assert check.ok and any("adds no training images" in n and "already read" in n for n in check.notes)


def test_unsupported_files_and_empty_folders_say_why(tmp_path):
    odd = tmp_path / "odd"
    odd.mkdir()
    (odd / "photo.gif").write_bytes(b"GIF89a")
    cfg = config(tmp_path, odd)
    err = check_start(cfg).errors
    assert len(err) == 1 and "photo.gif" in err[0] and ".gif" in err[0]
    empty = tmp_path / "empty"
    empty.mkdir()
    cfg = config(tmp_path, empty, odd)
    err = check_start(cfg).errors
    assert len(err) == 1 and "No usable training images in the image folders" in err[0]
    assert str(empty) in err[0] and "holds no images" in err[0] and "photo.gif" in err[0]


def test_one_empty_folder_beside_a_good_one_is_a_note_not_an_error(tmp_path):
    good = images(tmp_path / "good")
    (tmp_path / "empty").mkdir()
    check = check_start(config(tmp_path, good, tmp_path / "empty"))
    assert check.ok and any(str(tmp_path / "empty") in n for n in check.notes)


def test_regularization_folders_are_checked(tmp_path):
    cfg = config(tmp_path, images(tmp_path / "train"))
    cfg.dataset.regularization_folders = [DatasetFolder(path=str(tmp_path / "class_missing"), repeats=1)]
    errors = check_start(cfg).errors
    assert errors == [f"The class image folder “{tmp_path / 'class_missing'}” does not exist."]
    images(tmp_path / "class" / "sub")  # class images only in a subfolder
    cfg.dataset.regularization_folders = [DatasetFolder(path=str(tmp_path / "class"), repeats=1)]
    errors = check_start(cfg).errors
    assert len(errors) == 1 and "No usable class images" in errors[0] and str(tmp_path / "class") in errors[0]
    assert "add the subfolder itself" in errors[0]
    cfg.dataset.regularization_folders = [DatasetFolder(path=str(tmp_path / "class" / "sub"), repeats=1)]
    assert check_start(cfg).ok


def test_the_check_never_opens_images(tmp_path, monkeypatch):
    """The check runs on the GUI thread: names and stat only (opening 2,000 images costs ~0.3 s)."""
    folder = images(tmp_path / "imgs", 3)

    def refuse(*a, **k):
        raise AssertionError("the start check opened an image")

    monkeypatch.setattr(core_ds, "probe_image", refuse)
    monkeypatch.setattr(Image, "open", refuse)
    assert check_start(config(tmp_path, folder)).ok


def test_subfolder_search_is_bounded(tmp_path):
    root = tmp_path / "deep"
    for i in range(5):
        (root / f"d{i}").mkdir(parents=True)
    images(root / "d4" / "inner")
    assert folder_check._subfolder_with_images(root) == root / "d4" / "inner"
    assert folder_check._subfolder_with_images(root, limit=3) is None  # gives up: the hint is optional


def test_unknown_device_still_gets_cpu_precision_advice(tmp_path):
    cfg = config(tmp_path, images(tmp_path / "imgs"))
    cfg.precision.training = "fp16"
    check = check_start(cfg, None)
    assert check.ok
    assert any("fp16 on the CPU" in n and "CPU is assumed" in n for n in check.notes), check.notes
    # facts nobody looked at (bitsandbytes, whether there is a GPU) block nothing and claim nothing
    cfg.optimizer.name = "AdamW8bit"
    check = check_start(cfg, None)
    assert check.ok and not any("bitsandbytes" in n or "No GPU found" in n for n in check.notes)


def test_check_without_device_imports_no_torch(tmp_path):
    """The fallback device is built on the GUI thread: torch must stay unimported."""
    folder = images(tmp_path / "imgs")
    code = (
        "import json, sys\n"
        "from guitrainer.config import DatasetFolder, TrainingConfig\n"
        "from guitrainer.core.checks.start import check_start\n"
        "cfg = TrainingConfig()\n"
        "cfg.model.base = 'someone/some-model'\n"
        f"cfg.output.folder = {str(tmp_path / 'out')!r}\n"
        f"cfg.dataset.folders = [DatasetFolder(path={str(folder)!r}, repeats=1)]\n"
        "cfg.precision.training = 'fp16'\n"
        "c = check_start(cfg, None)\n"
        "print(json.dumps({'torch': 'torch' in sys.modules, 'qt': 'PySide6' in sys.modules, 'errors': c.errors, 'notes': c.notes}))\n"
    )
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["torch"] is False and result["qt"] is False and result["errors"] == []
    assert any("fp16 on the CPU" in n for n in result["notes"])


@pytest.mark.parametrize("exclude", [0, 1000])
def test_two_thousand_images_check_quickly(tmp_path, monkeypatch, exclude):
    """The check is a directory listing: it opens no image and stats each one at most once, counted by
    wrapping the calls that touch the files (a count, not a time: the time moves with the machine)."""
    folder = tmp_path / "many"
    folder.mkdir()
    n = 2000
    for i in range(n):
        (folder / f"img{i:04d}.png").write_bytes(b"\x89PNG\r\n\x1a\n")
        (folder / f"img{i:04d}.txt").write_text("x", encoding="utf-8")
    cfg = config(tmp_path, folder)
    cfg.dataset.exclude = [str(folder / f"img{i:04d}.png") for i in range(0, 2 * exclude, 2)]
    work = count_file_work(monkeypatch, folder)
    check = check_start(cfg)
    print(f"\ncheck_start, {n:,} images, {exclude} left out: {work.summary()}")
    assert check.ok
    # What a correct check needs, by hand, for one folder of n images (each with a caption), k left out:
    # - no image opened, no caption read: the images are counted by name (0 and 0);
    assert work.total("image_open") == 0 and work.total("open") == 0, work.summary()
    # - the folder opened twice, listed once: the disk check opens it to see it can be read (its first entry
    #   only), then lists it (images were found, so no subfolder is looked into): 2, both on the folder;
    assert work.total("scandir") == 2 and work.on_root("scandir") == 2
    # - each image stat'ed at most once, for the same-file rule (device, inode): at most n; captions never;
    assert work.most("stat", ".png") <= 1 and work.total("stat", ".png") <= n and work.total("stat", ".txt") == 0
    # - with left-out images, one symlink test (lstat) per listed image and one per left-out path, each
    #   left-out image so twice: at most n + k; without, no path is normalised: 0;
    assert work.most("lstat", ".png") <= (2 if exclude else 0) and work.total("lstat", ".png") <= n + exclude
    # - the folder itself a few times, however many images it holds: the settings' same-folder rule
    #   resolves it (Path.resolve: realpath's lstat + a stat), the check and the listing ask "is it a
    #   folder?" (a stat each), and with left-out images it is resolved once more as every image's parent:
    #   at most 3 + 1 stats and 1 + 1 lstats.
    assert work.on_root("stat") <= 3 + bool(exclude) and work.on_root("lstat") <= 1 + bool(exclude)
    assert look_at_folders(cfg.dataset.folders, ".txt", cfg.dataset.exclude)[0].images == n - exclude

    # The counter sees the work it forbids above: the engine's look at one image (as its read of the dataset
    # looks at each) opens it once and stats it.
    work.reset()
    core_ds.probe_image(folder / "img0001.png")
    assert work.total("image_open") == 1 and work.total("stat", "img0001.png") >= 1, work.summary()


def test_find_state_follows_the_lora_numbering(tmp_path):
    """Issue 15 #8 (UI): a second run of the same name keeps its state as <name>_2_state; Resume finds the newest."""
    from guitrainer.core.runs.state import STATE_FILE, find_state, read_saved_run

    cfg = config(tmp_path)
    out = Path(cfg.output.folder)
    assert find_state(cfg) is None
    for i, folder in enumerate([f"{cfg.output.name}_state", f"{cfg.output.name}_2_state"]):
        (out / folder).mkdir(parents=True)
        (out / folder / STATE_FILE).write_text(json.dumps({"global_step": 10 + i, "total_steps": 10, "epoch": 1}))
        os.utime(out / folder / STATE_FILE, ns=(10**18 + i, 10**18 + i))
    (out / f"{cfg.output.name}_old_state").mkdir()  # not a numbered run: ignored
    (out / f"{cfg.output.name}_old_state" / STATE_FILE).write_text("{}")
    assert find_state(cfg) == str(out / f"{cfg.output.name}_2_state")
    saved = read_saved_run(find_state(cfg))
    assert saved is not None and saved.global_step == 11 and saved.complete
    assert saved.epochs_for_more(3, 1) == 4
    assert saved.schedule_for_more(3, 1, 0) == {"schedule.epochs": 4}
    assert saved.schedule_for_more(2, 1, 10) == {"schedule.max_steps": 10 + 2 * 10}  # 10 steps in its 1 epoch
    assert read_saved_run(str(out / f"{cfg.output.name}_old_state")) is None


def test_a_state_trained_with_another_rank_is_refused_before_the_model_loads(tmp_path):
    """A resume whose LoRA shape differs from the state failed only after the model had loaded; now the start
    check says so first, in the words the page uses (the setting's label), with the way out."""
    from guitrainer.core.runs.state import STATE_FILE

    cfg = config(tmp_path)
    saved = cfg.copy()
    saved.set("network.rank", 2)
    state = Path(cfg.output.folder) / "run_state"
    state.mkdir(parents=True)
    (state / STATE_FILE).write_text(json.dumps({"global_step": 3, "config": saved.to_dict()}), encoding="utf-8")
    cfg.set("network.rank", 8)
    cfg.set("schedule.resume_from", str(state))
    errors = check_start(cfg).errors
    assert any("Rank (dim) = 2" in e and "it is 8 now" in e for e in errors), errors
    cfg.set("network.rank", 2)
    assert not any("Rank (dim)" in e for e in check_start(cfg).errors)
