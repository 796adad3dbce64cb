"""Prior preservation in the trainer (demo model, CPU): the loss rule, kohya's class draws per epoch,
weight 0 == no regularization bit for bit, exact stop/resume, caches; and saves failing at a run's end."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from PIL import Image

from guitrainer.config import DatasetFolder, TrainingConfig
from guitrainer.core.dataset import regularization as reg
from guitrainer.core.events import Control, NullReporter
from guitrainer.engine.amp_step import AmpStep
from guitrainer.engine.network.lora import read_lora
from guitrainer.engine.trainer import WRITE_ADVICE, Trainer

sys.path.insert(0, str(Path(__file__).parent))
from helpers import demo_cfg
from helpers.doubles import StopAt  # noqa: E402

pytestmark = pytest.mark.slow  # every test here trains the demo model with class images

CLASS_PROMPT = "a photo of a shape"
TRIGGER = "sks"
#: class images and their own captions (None: no caption file, "": an empty one)
CLASS_CAPTIONS = {"c0": "a dog, sitting", "c1": None, "c2": "", "c3": "a cat"}


def _images(folder: Path, names: dict[str, str | None], shift: int) -> Path:
    folder.mkdir(parents=True)
    for k, (name, caption) in enumerate(names.items()):
        im = Image.new("RGB", (64, 64), (30 + 50 * k, 200 - 40 * k, (shift + 70 * k) % 255))
        for x in range(8 + 4 * k, 40 + 4 * k):  # a shape, so no two images are alike
            for y in range(10, 30 + 3 * k):
                im.putpixel((x % 64, y), (255 - 60 * k, shift, 90))
        im.save(folder / f"{name}.png")
        if caption is not None:
            (folder / f"{name}.txt").write_text(caption)
    return folder


@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch):
    """Latent/text caches of these tests in their own folder: tests/test_data_cache.py counts the files of
    the session's shared cache folder."""
    from guitrainer.base import paths

    monkeypatch.setattr(paths, "cache_dir", lambda: tmp_path / "cache")


@pytest.fixture
def data(tmp_path) -> tuple[Path, Path]:
    """3 training images (repeats 2: 6 draws an epoch) and 4 class images (repeats 1), as in
    tests/test_regularization.py's hand-computed schedule."""
    captions = {"t0": "a red square", "t1": "a green circle", "t2": "a blue square"}
    train = _images(tmp_path / "train", captions, 0)
    return train, _images(tmp_path / "class", CLASS_CAPTIONS, 120)


def cfg_for(
    out: Path, data: tuple[Path, Path] | None, weight: float | None = 1.0, **settings: object
) -> TrainingConfig:
    """The demo preset on ``data`` (batch 2: 3 steps an epoch); ``weight`` None: no class images."""
    cfg = demo_cfg(out, **settings)
    if data is not None:
        cfg.dataset.folders = [DatasetFolder(str(data[0]), 2)]
        if weight is not None:
            cfg.dataset.regularization_folders = [DatasetFolder(str(data[1]), 1)]
            cfg.dataset.prior_loss_weight = weight
    cfg.dataset.class_prompt = CLASS_PROMPT
    cfg.dataset.trigger_word = TRIGGER
    return cfg


def run(cfg: TrainingConfig, reporter: NullReporter | None = None, control: Control | None = None):
    torch.set_num_threads(1)
    rep = reporter or NullReporter()
    tr = Trainer(cfg, rep, control)
    summary = tr.run()
    torch.set_num_threads(1)
    return tr, rep, summary


def lora_params(tr: Trainer) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in tr.session.model.denoiser.named_parameters() if p.requires_grad}


@pytest.fixture
def record(monkeypatch):
    """Records every class half: (epoch, step, class item names, its RNG seed)."""
    calls: list[dict] = []
    orig_half, orig_seed = AmpStep.class_half, AmpStep.class_seed

    def half(self, items, micro_index, micro_count, sync):
        calls.append(
            {"epoch": self.progress.epoch, "step": self.progress.global_step + 1, "items": list(items),
             "names": [self.session.class_dataset.items[i].image.stem for i in items]}  # fmt: skip
        )
        return orig_half(self, items, micro_index, micro_count, sync)

    def seed(self, micro_index):
        value = orig_seed(self, micro_index)
        calls[-1]["seed"] = value
        return value

    monkeypatch.setattr(AmpStep, "class_half", half)
    monkeypatch.setattr(AmpStep, "class_seed", seed)
    return calls


# --------------------------------------------------------------------------- the loss


def test_loss_is_instance_plus_weight_times_class_and_matches_a_hand_run(tmp_path, data, record):
    common = {"schedule__max_steps": 2, "optimizer__lr": 1e-30, "precision__cache_latents": True}  # 0 is refused
    heavy, heavy_rep, s1 = run(cfg_for(tmp_path / "w1", data, 1.0, **common))
    light, light_rep, s2 = run(cfg_for(tmp_path / "w03", data, 0.3, **common))
    _, plain_rep, s3 = run(cfg_for(tmp_path / "plain", data, None, **common))
    assert s1.status == s2.status == s3.status == "finished", (s1.message, s2.message, s3.message)
    for rep, w in ((heavy_rep, 1.0), (light_rep, 0.3)):
        assert len(rep.steps) == 2
        for m in rep.steps:
            assert m.class_loss is not None and m.instance_loss is not None and m.class_loss > 0
            assert m.loss == pytest.approx(m.instance_loss + w * m.class_loss, rel=1e-6)
    # lr 1e-30 (no update survives fp32 rounding): both runs see the same model, batches and noise; only the weight differs
    for a, b, plain in zip(heavy_rep.steps, light_rep.steps, plain_rep.steps):
        assert a.class_loss == b.class_loss and a.instance_loss == b.instance_loss
        assert a.loss - b.loss == pytest.approx(0.7 * a.class_loss, rel=1e-6)
        assert plain.class_loss is None and plain.instance_loss is None
        assert a.instance_loss == plain.loss  # the class half leaves the instance stream alone

    # step 1's class half, computed by hand from the recorded draws and seed
    first = next(c for c in record if c["step"] == 1)
    m = heavy.session.model
    captions = [CLASS_CAPTIONS[n] or CLASS_PROMPT for n in first["names"]]
    assert not any(TRIGGER in c for c in captions)
    assert [heavy.session.class_dataset.fixed_caption(i) for i in first["items"]] == captions
    with torch.random.fork_rng(), torch.no_grad():
        torch.manual_seed(first["seed"])
        lat = torch.stack([heavy.caches.class_latents[(i, False)] for i in first["items"]])
        noise = torch.randn_like(lat)
        t = torch.randint(0, m.noise_scheduler.config.num_train_timesteps, (lat.shape[0],)).long()
        tok = m.tokenizers[0]
        n_tok = tok.model_max_length
        ids = tok(captions, padding="max_length", max_length=n_tok, truncation=True, return_tensors="pt")
        hidden = m.text_encoders[0](ids.input_ids)[0]
        pred = m.denoiser(m.noise_scheduler.add_noise(lat, noise, t), t, hidden).sample
        by_hand = float(F.mse_loss(pred.float(), noise.float()))
    assert heavy_rep.steps[0].class_loss == pytest.approx(by_hand, rel=1e-5)


def test_weight_zero_trains_exactly_like_no_regularization(tmp_path, data):
    # dropout and flips draw from the global RNGs, the VAE samples uncached latents: all must be untouched
    common = {
        "schedule__max_steps": 4,
        "network__dropout": 0.1,
        "dataset__flip_augment": True,
        "precision__cache_latents": False,
    }
    zero, zero_rep, s0 = run(cfg_for(tmp_path / "zero", data, 0.0, **common))
    plain, plain_rep, sp = run(cfg_for(tmp_path / "plain", data, None, **common))
    one, _, s1 = run(cfg_for(tmp_path / "one", data, 1.0, **common))
    assert s0.status == sp.status == s1.status == "finished", (s0.message, sp.message, s1.message)
    assert all(m.class_loss is not None and m.class_loss > 0 for m in zero_rep.steps)  # the class half ran
    assert [m.loss for m in zero_rep.steps] == [m.loss for m in plain_rep.steps]
    a, b, c = lora_params(zero), lora_params(plain), lora_params(one)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert not all(torch.equal(a[k], c[k]) for k in a)  # a real weight does change the training
    # throughput counts every image through the UNet: with class images, twice the training images
    bs = zero.config.schedule.batch_size * zero.config.schedule.gradient_accumulation
    for with_class, steps in ((True, zero_rep.steps), (False, plain_rep.steps)):
        for m in steps:
            assert m.images_per_second * m.seconds_per_step == pytest.approx(bs * (2 if with_class else 1), rel=1e-6)


# --------------------------------------------------------------------------- the draws


def test_class_draws_per_epoch_follow_the_schedule(tmp_path, data, record):
    cfg = cfg_for(tmp_path, data, 1.0, schedule__max_steps=6, precision__cache_latents=True)
    tr, rep, summary = run(cfg)
    assert summary.status == "finished", summary.message
    assert len(rep.steps) == 6 and summary.epochs == 2
    train_counts = [(f"t{i}", 2) for i in range(3)]
    class_counts = [(f"c{i}", 1) for i in range(4)]
    for epoch in (0, 1):
        drawn = [n for c in record if c["epoch"] == epoch for n in c["names"]]
        plan = reg.epoch_schedule(train_counts, class_counts, epoch, cfg.schedule.seed)
        assert drawn == list(plan.classes)  # the same draws in the same order
        assert Counter(drawn) == {"c0": 2, "c1": 2, "c2": 1, "c3": 1}  # hand-computed (kohya's loop)
        assert all(len(c["items"]) == 2 for c in record if c["epoch"] == epoch)  # halves of equal size
    assert [c["step"] for c in record] == [1, 2, 3, 4, 5, 6]
    assert any("class images" in s and "6 training draws + 6 class draws" in s for s in rep.statuses)
    _, meta = read_lora(summary.lora_path)
    assert meta["ss_num_train_images"] == "6" and meta["ss_num_reg_images"] == "4"  # 4 class images, repeats 1
    assert meta["ss_prior_loss_weight"] == "1"


def test_stop_and_resume_with_class_images_is_bit_exact(tmp_path, data):
    common = {"schedule__max_steps": 6, "network__dropout": 0.1, "dataset__flip_augment": True}
    straight, straight_rep, s = run(cfg_for(tmp_path / "a", data, 0.8, **common))
    assert s.status == "finished", s.message

    control = Control()
    first_rep = StopAt(control, 4)  # in the middle of epoch 2
    _, _, first = run(cfg_for(tmp_path / "b", data, 0.8, **common), first_rep, control)
    assert first.status == "stopped" and first.steps == 4
    resume = cfg_for(tmp_path / "b", data, 0.8, schedule__resume_from=first.state_path, **common)
    resumed, second_rep, second = run(resume)
    assert second.status == "finished", second.message
    assert [m.step for m in second_rep.steps] == [5, 6]
    both = first_rep.steps + second_rep.steps
    assert [(m.loss, m.instance_loss, m.class_loss) for m in straight_rep.steps] == [
        (m.loss, m.instance_loss, m.class_loss) for m in both
    ]
    a, b = lora_params(straight), lora_params(resumed)
    assert all(torch.equal(a[k], b[k]) for k in a)
    fa, _ = read_lora(s.lora_path)
    fb, _ = read_lora(second.lora_path)
    assert all(torch.equal(fa[k], fb[k]) for k in fa)


def test_latent_and_text_caches_cover_class_images(tmp_path, data):
    common = {
        "schedule__max_steps": 1,
        "precision__cache_latents": True,
        "precision__cache_text_encoder_outputs": True,
    }
    first, _, s1 = run(cfg_for(tmp_path / "o1", data, 1.0, **common))
    assert s1.status == "finished", s1.message
    assert set(first.caches.class_latents) == {(i, False) for i in range(4)} and len(first.caches.latents) == 3
    assert (first.caches.latent_store.misses, first.caches.latent_store.hits) == (3 + 4, 0)
    class_captions = {c or CLASS_PROMPT for c in CLASS_CAPTIONS.values()}
    assert class_captions <= set(first.caches._text_mem)
    assert first.caches.text_store.misses == 3 + len(class_captions)

    again, _, s2 = run(cfg_for(tmp_path / "o2", data, 1.0, **common))  # a new run: all from the disk cache
    assert s2.status == "finished", s2.message
    assert again.caches.latent_store.misses == 0 and again.caches.latent_store.disk_hits == 3 + 4
    assert again.caches.text_store.misses == 0
    for k, v in first.caches.class_latents.items():
        assert torch.equal(v, again.caches.class_latents[k])


def test_missing_class_images_fail_before_training(tmp_path, data):
    empty = tmp_path / "empty"
    empty.mkdir()
    cfg = cfg_for(tmp_path / "o", data, 1.0)
    cfg.dataset.regularization_folders = [DatasetFolder(str(empty), 1)]
    _, rep, summary = run(cfg)
    assert summary.status == "failed" and "no usable class (regularization) images" in summary.message
    assert rep.steps == []


# --------------------------------------------------------------------------- saving at the end fails


@pytest.mark.parametrize("stop", [False, True])
def test_unwritable_output_folder_ends_as_failed_with_advice(tmp_path, stop):
    blocker = tmp_path / "not_a_folder"
    blocker.write_text("a file where the output folder should be")
    control = Control()
    rep = StopAt(control, 1) if stop else NullReporter()
    _, rep, summary = run(cfg_for(blocker, None, schedule__max_steps=2), rep, control)
    assert summary.status == "failed"
    assert summary.message.startswith(f"The LoRA could not be saved in {blocker}: The output folder {blocker} is a file")
    assert summary.advice == WRITE_ADVICE
    assert summary.advice[0] == "choose another output folder, then resume from the saved state (or train again)"
    assert summary.steps == (1 if stop else 2)
    # nothing trained is lost: the LoRA and the state went to the rescue folder, which the message names
    from guitrainer.base.paths import user_data_dir

    rescued = Path(summary.lora_path)
    assert rescued.is_file() and rescued.parent.parent == user_data_dir() / "rescued"
    assert f"It was saved in {rescued.parent} instead" in summary.message
    assert summary.state_path and Path(summary.state_path).parent == rescued.parent
    assert any("The LoRA was not saved" in w for w in rep.warnings)
    assert blocker.read_text().startswith("a file")
