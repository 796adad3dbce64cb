"""Engine parts on their own: demo model loading, data scanning, kohya LoRA export/import, optimizers."""

from __future__ import annotations

import io
import json

import pytest
import torch

from guitrainer.config import DatasetConfig, DatasetFolder, ModelConfig
from guitrainer.core.events import StepMetrics
from guitrainer.engine import data as D
from guitrainer.engine import export as X
from guitrainer.engine import optim as O
from guitrainer.engine.models.demo import demo_model_dir, ensure_demo_dataset, ensure_demo_model
from guitrainer.engine.models.loading import load_base_model
from guitrainer.engine.models.types import ModelLoadError
from guitrainer.engine.network import lora as L


@pytest.fixture
def demo():
    torch.set_num_threads(1)
    return load_base_model(ModelConfig(base="demo", family="demo"))


@pytest.mark.slow
def test_demo_model_is_a_diffusers_folder_loaded_by_the_general_loader(demo):
    folder = demo_model_dir()
    index = json.loads((folder / "model_index.json").read_text())
    assert index["unet"] == ["diffusers", "UNet2DConditionModel"]
    assert demo.family == "demo" and demo.path == str(folder)
    assert demo.denoiser.config.cross_attention_dim == demo.text_encoder.config.hidden_size == 32
    assert demo.prediction_type == "epsilon"
    assert not any(p.requires_grad for p in demo.denoiser.parameters())
    # the same folder through the general path: auto recognises the demo by its marker file (an SD 1.x layout the
    # estimator and the LoRA's metadata must still call the demo: no real SD 1.5 client can use its LoRA)
    again = load_base_model(ModelConfig(base=str(folder), family="auto"))
    assert again.family == "demo"
    sd_a, sd_b = demo.denoiser.state_dict(), again.denoiser.state_dict()
    assert all(torch.equal(sd_a[k], sd_b[k]) for k in sd_a)
    # the shipped model is only read, never rebuilt or written
    mtime = (folder / "model_index.json").stat().st_mtime_ns
    ensure_demo_model()
    assert (folder / "model_index.json").stat().st_mtime_ns == mtime


@pytest.mark.slow
def test_demo_tokenizer_knows_the_demo_words(demo):
    tok = demo.tokenizer
    ids = tok("a photo of a red circle").input_ids
    assert tok.convert_ids_to_tokens(ids) == ["<|startoftext|>", "a</w>", "photo</w>", "of</w>", "a</w>", "red</w>", "circle</w>", "<|endoftext|>"]
    assert max(tok("zebra ~ 123").input_ids) < demo.text_encoder.config.vocab_size


def test_missing_model_and_single_file_give_clear_errors(tmp_path):
    ckpt = tmp_path / "model.safetensors"
    ckpt.write_bytes(b"x")
    with pytest.raises(ModelLoadError, match="model.safetensors is only 1 bytes"):
        load_base_model(ModelConfig(base=str(ckpt), family="auto"))
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ModelLoadError, match="not a complete diffusers model folder"):
        load_base_model(ModelConfig(base=str(empty), family="auto"))


def _image(path, color=(200, 30, 30), size=(80, 40)):
    from PIL import Image

    Image.new("RGB", size, color).save(path)


def test_scan_repeats_captions_trigger_and_corrupt_files(tmp_path):
    folder = tmp_path / "3_thing"
    folder.mkdir()
    _image(folder / "b.png")
    _image(folder / "a.jpg", (10, 240, 10))
    (folder / "a.caption").write_text("green, grass")
    (folder / "b.caption").write_text("red")
    (folder / "c.webp").write_bytes(b"garbage")
    (folder / "notes.md").write_text("ignored")
    cfg = DatasetConfig(
        folders=[DatasetFolder.from_value(str(folder))], resolution=32, caption_extension=".caption", trigger_word="sks", bucketing=False
    )
    warnings: list[str] = []
    items = D.collect_items(cfg, warn=warnings.append)
    assert [i.image.name for i in items] == ["a.jpg", "b.png"]
    assert [i.repeats for i in items] == [3, 3]
    assert len(warnings) == 1 and "c.webp" in warnings[0]
    ds = D.TrainDataset(items, cfg)
    assert len(ds) == 6
    s = ds[0]
    assert s["caption"] == "sks, green, grass"
    px = s["pixels"]
    assert px.shape == (3, 32, 32) and px.dtype == torch.float32
    assert px.min() >= -1 and px.max() <= 1
    assert px[1].mean() > 0.8 and px[0].mean() < -0.8  # green image, center-cropped square
    batch = D.collate([ds[i] for i in range(3)])
    assert batch["pixels"].shape == (3, 3, 32, 32) and len(batch["captions"]) == 3


def test_epoch_order_is_seeded_and_differs_by_epoch():
    a = D.epoch_order(20, seed=7, epoch=0)
    assert a == D.epoch_order(20, seed=7, epoch=0) and sorted(a) == list(range(20))
    assert a != D.epoch_order(20, seed=7, epoch=1) and a != D.epoch_order(20, seed=8, epoch=0)
    torch.manual_seed(0)
    x = D.epoch_order(20, 7, 0)
    torch.manual_seed(1)
    assert D.epoch_order(20, 7, 0) == x  # independent of the global RNG
    assert D.batches_of([1, 2, 3, 4, 5], 2) == [[1, 2], [3, 4], [5]]


def test_empty_dataset_is_a_clear_error(tmp_path):
    (tmp_path / "empty").mkdir()
    cfg = DatasetConfig(folders=[DatasetFolder(path=str(tmp_path / "empty"))])
    with pytest.raises(D.DatasetError, match="no usable training images"):
        D.collect_items(cfg)
    with pytest.raises(D.DatasetError, match="does not exist"):
        D.collect_items(DatasetConfig(folders=[DatasetFolder(path=str(tmp_path / "nope"))]))


def test_trigger_word_is_added_once():
    assert D.apply_trigger("a cat", "sks") == "sks, a cat"
    assert D.apply_trigger("sks, a cat", "sks") == "sks, a cat"
    assert D.apply_trigger("", "sks") == "sks"
    assert D.apply_trigger("a cat", "") == "a cat"


def test_demo_dataset_is_generated_once():
    folder = ensure_demo_dataset()
    pngs = sorted(folder.glob("*.png"))
    assert len(pngs) == 12 and all(p.with_suffix(".txt").is_file() for p in pngs)
    assert ensure_demo_dataset() == folder


# --------------------------------------------------------------------------- LoRA


def _randomise(params, seed):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in params:
            p.copy_(torch.randn(p.shape, generator=g) * 0.1)


@pytest.mark.slow
@pytest.mark.parametrize("targets,extra", [("attention", None), ("attention_ff", "ff_net_2"), ("attention_ff_proj", "proj_in")])
def test_kohya_export_keys_shapes_and_real_alpha(demo, tmp_path, targets, extra):
    L.inject_unet_lora(demo.denoiser, rank=4, alpha=2.0, targets=targets)
    L.inject_text_encoder_lora(demo.text_encoder, rank=4, alpha=2.0)
    _randomise(L.lora_parameters(demo.denoiser) + L.lora_parameters(demo.text_encoder), 0)
    sd = L.kohya_state_dict(demo.denoiser, [demo.text_encoder], alpha=2.0)
    key = "lora_unet_down_blocks_0_attentions_0_transformer_blocks_0_attn1_to_q"
    assert sd[f"{key}.lora_down.weight"].shape == (4, 32)
    assert sd[f"{key}.lora_up.weight"].shape == (32, 4)
    assert sd[f"{key}.alpha"].shape == () and float(sd[f"{key}.alpha"]) == 2.0  # the real alpha, not the rank
    assert "lora_unet_mid_block_attentions_0_transformer_blocks_0_attn2_to_out_0.lora_up.weight" in sd
    assert "lora_te_text_model_encoder_layers_1_self_attn_out_proj.lora_down.weight" in sd
    assert all(k.startswith(("lora_unet_", "lora_te_")) for k in sd)
    assert (extra is None) == (not any(extra and extra in k for k in sd))
    assert not any("ff_net" in k for k in sd) or targets != "attention"

    path = tmp_path / "x.safetensors"
    meta = {"ss_network_module": "networks.lora", "ss_network_dim": "4", "ss_network_alpha": "2"}
    assert X.save_lora(path, sd, meta, "fp16") == []
    tensors, read_meta = L.read_lora(path)
    assert read_meta["ss_save_precision"] == "fp16" and read_meta["ss_network_alpha"] == "2"
    assert all(t.dtype == torch.float16 for t in tensors.values())
    assert list(tmp_path.iterdir()) == [path]  # no temp file left behind


@pytest.mark.slow
def test_load_kohya_lora_round_trip_and_alpha_rescale(tmp_path):
    torch.set_num_threads(1)
    src = load_base_model(ModelConfig(base="demo"))
    L.inject_unet_lora(src.denoiser, rank=4, alpha=2.0)
    _randomise(L.lora_parameters(src.denoiser), 1)
    path = tmp_path / "l.safetensors"
    X.save_lora(path, L.kohya_state_dict(src.denoiser, alpha=2.0), {}, "fp32")

    same = load_base_model(ModelConfig(base="demo"))
    L.inject_unet_lora(same.denoiser, rank=4, alpha=2.0)
    n = L.load_kohya_lora(path, same.denoiser)
    assert n == len(L.lora_layers(src.denoiser))
    assert all(torch.equal(a, b) for a, b in zip(L.lora_parameters(src.denoiser), L.lora_parameters(same.denoiser)))

    other = load_base_model(ModelConfig(base="demo"))
    L.inject_unet_lora(other.denoiser, rank=4, alpha=4.0)  # scale 1.0 instead of 0.5: lora_up halves
    L.load_kohya_lora(path, other.denoiser)
    x = torch.randn(1, 4, 8, 8)
    t = torch.tensor([10])
    h = torch.randn(1, 5, 32)
    with torch.no_grad():
        assert torch.allclose(src.denoiser(x, t, h).sample, other.denoiser(x, t, h).sample, atol=1e-5)

    wrong = load_base_model(ModelConfig(base="demo"))
    L.inject_unet_lora(wrong.denoiser, rank=8, alpha=8.0)
    with pytest.raises(L.LoraFormatError, match="rank"):
        L.load_kohya_lora(path, wrong.denoiser)


def test_fp16_save_warns_about_overflow():
    tensors, warnings = X.cast_for_save({"a.lora_up.weight": torch.tensor([70000.0])}, "fp16")
    assert warnings and "65504" in warnings[0]
    assert X.cast_for_save({"a": torch.tensor([70000.0])}, "bf16")[1] == []


# --------------------------------------------------------------------------- optimizers


class _Opt:
    def __init__(self, name):
        self.name, self.lr, self.weight_decay, self.betas = name, 1e-3, 0.0, [0.9, 0.999]


def _step(opt, params):
    for p in params:
        p.grad = torch.randn_like(p)
    opt.step()


def test_adamw8bit_keeps_uint8_state_for_large_tensors():
    big, small = torch.nn.Parameter(torch.randn(64, 64)), torch.nn.Parameter(torch.randn(10, 10))
    opt, used = O.build_optimizer(_Opt("AdamW8bit"), O.param_groups([big, small], [], 1e-3, 1e-4))
    assert used == "AdamW8bit" and type(opt).__module__.startswith("bitsandbytes")
    _step(opt, [big, small])
    assert opt.state[big]["state1"].dtype == torch.uint8 and opt.state[big]["state2"].dtype == torch.uint8
    assert opt.state[small]["state1"].dtype == torch.float32  # below 4096 elements: 32-bit state


@pytest.mark.parametrize("name", ["Lion8bit", "PagedAdamW8bit", "Adafactor", "AdamW"])
def test_other_optimizers_build_and_step(name):
    p = torch.nn.Parameter(torch.randn(64, 64))
    before = p.detach().clone()
    opt, used = O.build_optimizer(_Opt(name), O.param_groups([p], [], 1e-3, 1e-4))
    assert used == name
    _step(opt, [p])
    assert not torch.equal(before, p.detach())


def test_bitsandbytes_unavailable_falls_back_to_adamw(monkeypatch):
    def no_bnb():
        raise ImportError("No module named 'bitsandbytes'")

    monkeypatch.setattr(O, "_import_bnb", no_bnb)
    warnings: list[str] = []
    te = torch.nn.Parameter(torch.randn(3))
    opt, used = O.build_optimizer(_Opt("AdamW8bit"), O.param_groups([torch.nn.Parameter(torch.randn(3))], [te], 1e-3, 1e-4), warn=warnings.append)
    assert used == "AdamW" and isinstance(opt, torch.optim.AdamW)
    assert [g["lr"] for g in opt.param_groups] == [1e-3, 1e-4]
    assert len(warnings) == 1 and "AdamW8bit" in warnings[0] and "AdamW" in warnings[0]


def test_lr_scheduler_warms_up():
    from guitrainer.config import ScheduleConfig

    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([p], lr=1.0)
    sched = O.build_lr_scheduler(ScheduleConfig(lr_scheduler="constant_with_warmup", warmup_steps=4), opt, 10)
    lrs = []
    for _ in range(6):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    assert lrs == [0.0, 0.25, 0.5, 0.75, 1.0, 1.0]


# --------------------------------------------------------------------------- console reporter


def test_console_reporter_shows_loss_lr_and_scale():
    from guitrainer.engine.reporting import ConsoleReporter

    buf = io.StringIO()
    rep = ConsoleReporter(quiet=False, stream=buf)
    rep.on_step(StepMetrics(step=3, total_steps=10, epoch=1, loss=0.1234, lr=1e-4, grad_scale=32768.0, skipped_total=2))
    rep.on_warning("careful")
    rep.close()
    text = buf.getvalue()
    assert "3/10" in text and "loss=0.1234" in text and "scale=32768" in text and "skipped=2" in text
    assert "warning: careful" in text
    quiet = io.StringIO()
    q = ConsoleReporter(quiet=True, stream=quiet)
    q.on_step(StepMetrics(step=1, total_steps=2, epoch=1, loss=1.0, lr=1.0))
    q.on_status("hidden")
    q.close()
    assert quiet.getvalue() == ""


def test_into_a_file_progress_is_a_line_every_5_percent_not_a_redrawn_bar():
    from guitrainer.engine.reporting import ConsoleReporter

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    outputs = {}
    for name, stream in (("file", io.StringIO()), ("terminal", Terminal())):
        rep = ConsoleReporter(stream=stream)
        for step in range(1, 101):
            rep.on_step(StepMetrics(step=step, total_steps=100, epoch=1, loss=0.5, lr=1e-4))
        rep.close()
        outputs[name] = stream.getvalue()
    lines = outputs["file"].splitlines()
    assert "\r" not in outputs["file"] and len(lines) == 21  # step 1, then 5, 10, ... 100
    assert lines[0].startswith("step 1/100 (1%)") and lines[-1].startswith("step 100/100 (100%)")
    assert "loss=0.5000" in lines[-1] and "lr=1.00e-04" in lines[-1]
    assert "\r" in outputs["terminal"]  # a terminal gets the redrawn bar


@pytest.mark.slow
def test_diffusers_reads_our_kohya_file_with_the_same_result(tmp_path):
    """DESIGN §5: an outside reader (diffusers' load_lora_weights) gives the output of our in-memory model."""
    from diffusers import StableDiffusionPipeline

    torch.set_num_threads(1)
    d = load_base_model(ModelConfig(base="demo"))
    L.inject_unet_lora(d.denoiser, rank=4, alpha=2.0)
    L.inject_text_encoder_lora(d.text_encoder, rank=4, alpha=2.0)
    _randomise(L.lora_parameters(d.denoiser) + L.lora_parameters(d.text_encoder), 3)
    path = tmp_path / "l.safetensors"
    X.save_lora(path, L.kohya_state_dict(d.denoiser, [d.text_encoder], alpha=2.0), {"ss_network_alpha": "2"}, "fp32")
    pipe = StableDiffusionPipeline.from_pretrained(
        str(demo_model_dir()), safety_checker=None, feature_extractor=None, requires_safety_checker=False
    )
    base_te = pipe.text_encoder
    ids = d.tokenizer(["a red circle"], padding="max_length", max_length=77, return_tensors="pt").input_ids
    with torch.no_grad():
        before = base_te(ids)[0].clone()
        pipe.load_lora_weights(str(path))
        ours, theirs = d.text_encoder(ids)[0], pipe.text_encoder(ids)[0]
        assert not torch.allclose(before, theirs)  # the text encoder LoRA was applied
        assert torch.allclose(ours, theirs, atol=1e-5)
        x, t = torch.randn(1, 4, 8, 8), torch.tensor([10])
        assert torch.allclose(d.denoiser(x, t, ours).sample, pipe.unet(x, t, ours).sample, atol=1e-5)
