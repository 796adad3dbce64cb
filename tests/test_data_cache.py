"""Latent and text caches through the Trainer: reused across runs, rebuilt when the dtype or an image changes."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import torch
from PIL import Image

from guitrainer.core.events import NullReporter
from guitrainer.engine.trainer import Trainer

pytestmark = pytest.mark.slow  # every test here trains the demo model or builds its caches

sys.path.insert(0, str(Path(__file__).parent))
from helpers import demo_cfg  # noqa: E402


@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch):
    """This test counts the cache's files: give it a cache folder no other test (test_engine's cached
    runs, test_prior) has written into before it."""
    from guitrainer.base import paths

    monkeypatch.setattr(paths, "cache_dir", lambda: tmp_path / "cache")


@pytest.fixture
def encodes(monkeypatch):
    """Counts real VAE encode calls."""
    from diffusers import AutoencoderKL

    calls = {"n": 0}
    orig = AutoencoderKL.encode

    def counting(self, *a, **kw):
        calls["n"] += 1
        return orig(self, *a, **kw)

    monkeypatch.setattr(AutoencoderKL, "encode", counting)
    return calls


def _dataset(folder: Path) -> Path:
    folder.mkdir()
    for i, (size, color) in enumerate((((64, 64), (200, 30, 30)), ((96, 48), (30, 200, 30)), ((48, 96), (30, 30, 200)))):
        Image.new("RGB", size, color).save(folder / f"{i}.png")
        (folder / f"{i}.txt").write_text(f"a photo of a {['red', 'green', 'blue'][i]} square")
    return folder


def _run(out: Path, data: Path, **kw):
    torch.set_num_threads(1)
    cfg = demo_cfg(
        out,
        dataset__folders=[str(data)],
        dataset__bucketing=True,
        schedule__max_steps=1,
        precision__cache_latents=True,
        precision__cache_text_encoder_outputs=True,
        **kw,
    )
    tr = Trainer(cfg, NullReporter())
    summary = tr.run()
    assert summary.status == "finished", summary.message
    return tr


def test_caches_are_reused_and_rebuilt_when_dtype_or_image_changes(tmp_path, encodes):
    data = _dataset(tmp_path / "data")
    first = _run(tmp_path / "o1", data)
    assert first.caches.latent_store.misses == 3 and first.caches.latent_store.hits == 0 and encodes["n"] == 3
    assert first.caches.text_store.misses == 3
    files = list(first.caches.latent_store.folder.rglob("*.safetensors"))
    assert len(files) == 3 and not list(first.caches.latent_store.folder.rglob("*.tmp"))

    again = _run(tmp_path / "o2", data)  # a new run (as after a restart): everything from disk
    assert again.caches.latent_store.hits == again.caches.latent_store.disk_hits == 3 and again.caches.latent_store.misses == 0
    assert again.caches.text_store.misses == 0 and again.caches.text_store.hits == 3
    assert encodes["n"] == 3
    for k, v in first.caches.latents.items():
        assert torch.equal(v, again.caches.latents[k])

    bf16 = _run(tmp_path / "o3", data, precision__training="bf16")  # other dtype: never reused
    assert bf16.caches.latent_store.misses == 3 and bf16.caches.latent_store.hits == 0 and encodes["n"] == 6
    assert bf16.caches.text_store.misses == 3
    assert next(iter(bf16.caches.latents.values())).dtype == torch.bfloat16

    img = data / "1.png"
    Image.new("RGB", (96, 48), (250, 250, 0)).save(img)
    st = img.stat()
    os.utime(img, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    changed = _run(tmp_path / "o4", data)
    assert changed.caches.latent_store.misses == 1 and changed.caches.latent_store.hits == 2 and encodes["n"] == 7

    flipped = _run(tmp_path / "o5", data, dataset__flip_augment=True)  # mirrored variants are their own entries
    assert flipped.caches.latent_store.misses == 3 and flipped.caches.latent_store.hits == 3
    assert set(flipped.caches.latents) == {(i, f) for i in range(3) for f in (False, True)}


def test_stop_during_latent_caching_ends_before_training_and_keeps_the_cache(tmp_path, encodes, monkeypatch):
    from guitrainer.core.events import Control

    torch.set_num_threads(1)
    data = _dataset(tmp_path / "data")
    control = Control()
    # Stop after the 2nd of 3 encodes: the check before the 3rd image sees it.
    from diffusers import AutoencoderKL

    counting = AutoencoderKL.encode

    def stop_after_two(self, *a, **kw):
        out = counting(self, *a, **kw)
        if encodes["n"] == 2:
            control.request_stop()
        return out

    monkeypatch.setattr(AutoencoderKL, "encode", stop_after_two)
    cfg = demo_cfg(tmp_path / "out", dataset__folders=[str(data)], schedule__max_steps=3, precision__cache_latents=True)
    rep = NullReporter()
    tr = Trainer(cfg, rep, control)
    summary = tr.run()
    assert summary.status == "stopped" and summary.steps == 0
    assert "caching latents (2 of 3" in summary.message and "nothing was trained" in summary.message
    assert not rep.steps and summary.lora_path is None and summary.state_path is None
    assert not list((tmp_path / "out").rglob("*.safetensors"))  # no LoRA of an untrained network
    assert encodes["n"] == 2 and tr.caches.latent_store.misses == 3  # the 3rd image was never encoded
    assert len(list(tr.caches.latent_store.folder.rglob("*.safetensors"))) == 2

    monkeypatch.setattr(AutoencoderKL, "encode", counting)  # the next run reuses the two and encodes one
    again = _run(tmp_path / "o2", data)
    assert again.caches.latent_store.disk_hits == 2 and again.caches.latent_store.misses == 1 and encodes["n"] == 3


def test_stop_before_setup_ends_after_loading(tmp_path):
    from guitrainer.core.events import Control

    torch.set_num_threads(1)
    control = Control()
    control.request_stop()  # as if Stop were pressed while the model loads
    summary = Trainer(demo_cfg(tmp_path / "out", schedule__max_steps=3), NullReporter(), control).run()
    assert summary.status == "stopped" and summary.steps == 0
    assert "loading the base model" in summary.message
    assert not list((tmp_path / "out").rglob("*.safetensors"))


def test_training_prunes_old_cache_entries_but_keeps_its_own(tmp_path, monkeypatch):
    from guitrainer.base import paths
    from guitrainer.core import cache_store

    data = _dataset(tmp_path / "data")
    stale = paths.cache_dir() / "latents" / "some-old-model" / "ab" / "old.safetensors"
    stale.parent.mkdir(parents=True)
    stale.write_bytes(b"\0" * 4096)
    os.utime(stale, (1_000_000_000, 1_000_000_000))  # last used in 2001
    monkeypatch.setattr(cache_store, "DEFAULT_BUDGET_BYTES", 0)  # everything old must go
    tr = _run(tmp_path / "o1", data)
    assert not stale.exists()
    kept = list(tr.caches.latent_store.folder.rglob("*.safetensors")) + list(tr.caches.text_store.folder.rglob("*.safetensors"))
    assert len(kept) == 6  # this run's 3 latents and 3 captions survive a zero budget
    again = _run(tmp_path / "o2", data)  # and are reused by the next run
    assert again.caches.latent_store.disk_hits == 3


def test_caches_in_memory_only_write_nothing(tmp_path):
    from guitrainer.base import paths

    data = _dataset(tmp_path / "data")
    tr = _run(tmp_path / "o1", data, precision__cache_to_disk=False)
    assert tr.caches.latent_store.folder is None and tr.caches.latent_store.misses == 3 and len(tr.caches.latents) == 3
    assert tr.caches.text_store.folder is None and tr.caches.text_store.misses == 3
    assert not list(paths.cache_dir().rglob("*.safetensors"))  # nothing on disk
    again = _run(tmp_path / "o2", data, precision__cache_to_disk=False)
    assert again.caches.latent_store.disk_hits == 0 and again.caches.latent_store.misses == 3  # encoded again


def test_the_same_images_elsewhere_give_the_same_latents(tmp_path):
    """Cached latents sample noise seeded by the image variant, not by where or when the file was written:
    a dataset copied (or re-created) in another folder trains exactly the same."""
    import shutil

    data = _dataset(tmp_path / "data")
    first = _run(tmp_path / "o1", data)
    copy = tmp_path / "elsewhere" / "data"
    shutil.copytree(data, copy)  # other folder, other mtimes: other cache keys
    for f in copy.iterdir():
        os.utime(f, ns=(f.stat().st_atime_ns, f.stat().st_mtime_ns + 5_000_000_000))
    again = _run(tmp_path / "o2", copy)
    assert again.caches.latent_store.misses == 3 and again.caches.latent_store.disk_hits == 0  # encoded afresh
    assert first.caches.latents.keys() == again.caches.latents.keys()
    for k, v in first.caches.latents.items():
        assert torch.equal(v, again.caches.latents[k]), k


def test_a_full_disk_under_the_cache_goes_on_in_memory_saying_which_folder(tmp_path, monkeypatch):
    """Issue 27 (14): safetensors reports a full disk as its own error type; the run went on no further than "an
    unexpected error … This is a bug". Now: the run finishes, the warning names the cache folder and the way out."""
    import safetensors.torch as st
    from safetensors import SafetensorError

    from guitrainer.base import paths

    real = st.save_file

    def save_file(tensors, filename, metadata=None):
        if Path(str(filename)).resolve().is_relative_to(paths.cache_dir().resolve()):
            raise SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")
        return real(tensors, filename, metadata=metadata)

    monkeypatch.setattr(st, "save_file", save_file)
    tr = _run(tmp_path / "o1", _dataset(tmp_path / "data"))
    assert len(tr.caches.latents) == 3 and not list(paths.cache_dir().rglob("*.safetensors"))
    said = [w for w in tr.feedback.warnings if "cache folder" in w]  # what the run summary lists
    assert said and str(tr.caches.latent_store.folder) in said[0]
    assert "the disk is full" in said[0] and "in memory" in said[0] and "cache_to_disk" in said[0]
