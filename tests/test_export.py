"""LoRA export that loads everywhere (DESIGN §5): kohya and diffusers formats, real alpha, save precision,
metadata, atomic writes, verification through diffusers' ``load_lora_weights``, continuing from a file.

Tiny SD 1.5-layout (the demo) and SDXL-layout models built from configs, CPU, seconds.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from helpers import config_with, demo_cfg

from guitrainer.config import ModelConfig, TrainingConfig
from guitrainer.core.events import NullReporter
from guitrainer.engine import export as X
from guitrainer.engine.models.demo import ensure_demo_model
from guitrainer.engine.models.loading import load_base_model
from guitrainer.engine.models.types import LoadedModel
from guitrainer.engine.network import lora as L
from guitrainer.engine.verify import verify_lora

REPO = Path(__file__).resolve().parent.parent
RANK, ALPHA = 4, 8.0


# --------------------------------------------------------------------------- tiny models


def _randomise(params, seed: int, scale: float = 0.1) -> None:
    """Non-zero lora_A and lora_B: a LoRA that really changes the outputs."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in params:
            p.copy_(torch.randn(p.shape, generator=g) * scale)


def _trained(base: str, *, te: bool = True, seed: int = 0, rank: int = RANK, alpha: float = ALPHA) -> LoadedModel:
    """A base model with a random (non-zero) LoRA of ``rank`` / ``alpha`` on the UNet and text encoders."""
    m = load_base_model(ModelConfig(base=base, family="auto"))
    L.inject_unet_lora(m.denoiser, rank, alpha)
    params = L.lora_parameters(m.denoiser)
    if te:
        for enc in m.text_encoders:
            L.inject_text_encoder_lora(enc, rank, alpha)
            params += L.lora_parameters(enc)
    _randomise(params, seed)
    for mod in (m.denoiser, *m.text_encoders):
        mod.eval()
    return m


@pytest.fixture(scope="module")
def sd15() -> str:
    torch.set_num_threads(1)
    return str(ensure_demo_model())


def build_tiny_sdxl(folder: Path) -> None:
    """A tiny SDXL-layout pipeline (two text encoders, "text_time" UNet) from configs, saved as a diffusers folder.

    Unlike ``tiny_models.build_tiny(..., "sdxl")`` its UNet keeps real SDXL's block order (a plain down block,
    then cross-attention), which the kohya-ss ``input_blocks_4_1`` name mapping below relies on.
    """
    from diffusers import (
        AutoencoderKL,
        EulerDiscreteScheduler,
        StableDiffusionXLPipeline,
        UNet2DConditionModel,
    )
    from transformers import CLIPTextConfig, CLIPTextModel, CLIPTextModelWithProjection, CLIPTokenizer

    tok = CLIPTokenizer.from_pretrained(str(ensure_demo_model() / "tokenizer"))
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        unet = UNet2DConditionModel(
            sample_size=8,
            in_channels=4,
            out_channels=4,
            block_out_channels=(32, 64),
            layers_per_block=2,
            down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"),
            up_block_types=("CrossAttnUpBlock2D", "UpBlock2D"),
            cross_attention_dim=64,
            attention_head_dim=(2, 4),
            use_linear_projection=True,
            addition_embed_type="text_time",
            addition_time_embed_dim=8,
            projection_class_embeddings_input_dim=80,
            norm_num_groups=32,
        )
        vae = AutoencoderKL(
            block_out_channels=(32, 64),
            down_block_types=("DownEncoderBlock2D",) * 2,
            up_block_types=("UpDecoderBlock2D",) * 2,
            latent_channels=4,
            norm_num_groups=32,
            sample_size=32,
        )
        cfg = dict(vocab_size=1000, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                   max_position_embeddings=77, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                   pad_token_id=tok.pad_token_id, projection_dim=32)
        te1 = CLIPTextModel(CLIPTextConfig(**cfg))
        te2 = CLIPTextModelWithProjection(CLIPTextConfig(**cfg))
    pipe = StableDiffusionXLPipeline(
        vae=vae, text_encoder=te1, text_encoder_2=te2, tokenizer=tok, tokenizer_2=tok, unet=unet,
        scheduler=EulerDiscreteScheduler(beta_schedule="scaled_linear", beta_start=0.00085, beta_end=0.012),
    )
    pipe.save_pretrained(str(folder))


@pytest.fixture(scope="module")
def sdxl(tmp_path_factory) -> str:
    torch.set_num_threads(1)
    folder = tmp_path_factory.mktemp("tiny_sdxl")
    build_tiny_sdxl(folder)
    return str(folder)


# --------------------------------------------------------------------------- diffusers reproduces our model


@pytest.mark.slow
@pytest.mark.parametrize("precision", ["fp32", "fp16", "bf16"])
def test_kohya_file_loads_in_diffusers_with_real_alpha_sd15(sd15, tmp_path, precision):
    m = _trained(sd15)
    path = tmp_path / "sd15.safetensors"
    res = X.export_lora(path, m.denoiser, m.text_encoders, fmt="kohya", save_precision=precision, alpha=ALPHA)
    assert res.save_precision == precision and res.warnings == ()
    sd, meta = L.read_lora(path)
    assert {k.split("_")[1] for k in sd} == {"unet", "te"}
    assert all(float(v) == ALPHA for k, v in sd.items() if k.endswith(".alpha"))  # the real alpha, not the rank
    assert meta["ss_save_precision"] == precision

    v = verify_lora(path, sd15, reference=m)
    assert v.keys_total == len(sd) and v.keys_unused == ()
    assert v.lora_effect > 0.05 and v.lora_effect_te > 0.05  # the LoRA really changes both outputs
    limit = {"fp32": 1e-5, "fp16": 2e-3 * v.lora_effect, "bf16": 2e-2 * v.lora_effect}[precision]
    assert v.max_abs_diff_unet <= limit, v.message
    assert v.ok and v.message.startswith("diffusers reads this file: every key used"), v.message
    if precision == "fp32":
        assert v.max_abs_diff_te is not None and v.max_abs_diff_te <= 1e-5


@pytest.mark.slow
def test_writing_alpha_equal_to_rank_would_fail_the_check(sd15, tmp_path):
    """What diffusers' convert_state_dict_to_kohya does (alpha = rank): the file no longer matches the model."""
    m = _trained(sd15, te=False)
    path = tmp_path / "wrong.safetensors"
    X.save_lora(path, L.kohya_state_dict(m.denoiser, alpha=float(RANK)), {}, "fp32")
    v = verify_lora(path, sd15, reference=m)
    assert not v.ok and v.max_abs_diff_unet > 100 * v.tolerance
    assert "differ" in v.message


@pytest.mark.slow
@pytest.mark.parametrize("precision", ["fp32", "fp16", "bf16"])
def test_sdxl_two_text_encoders_te1_te2(sdxl, tmp_path, precision):
    m = _trained(sdxl)
    assert m.family == "sdxl"
    path = tmp_path / "xl.safetensors"
    res = X.export_lora(path, m.denoiser, m.text_encoders, fmt="kohya", save_precision=precision, alpha=ALPHA)
    assert res.save_precision == precision and res.warnings == ()
    sd, meta = L.read_lora(path)
    assert {k.split("_")[1] for k in sd} == {"unet", "te1", "te2"}
    assert "lora_te2_text_model_encoder_layers_1_self_attn_out_proj.lora_up.weight" in sd
    assert meta["ss_save_precision"] == precision
    assert all(float(v) == ALPHA for k, v in sd.items() if k.endswith(".alpha"))
    v = verify_lora(path, sdxl, reference=m)
    assert v.save_precision == precision and v.keys_total == len(sd) and v.keys_unused == ()
    assert v.lora_effect > 0.05 and v.lora_effect_te > 0.05
    rel = {"fp32": 0.0, "fp16": 2e-3, "bf16": 2e-2}[precision]
    assert v.max_abs_diff_unet <= max(1e-5, rel * v.lora_effect), v.message
    assert v.max_abs_diff_te is not None and v.max_abs_diff_te <= max(1e-5, rel * v.lora_effect_te), v.message
    if precision != "fp32":  # the rounding is really there: the check is not comparing fp32 with fp32
        assert v.max_abs_diff_unet > 0
    assert v.ok and v.message.startswith("diffusers reads this file: every key used"), v.message
    # without a reference (the Verify button): diffusers and our own loader agree on the file
    v2 = verify_lora(path, sdxl)
    assert v2.ok and v2.reference == "our loader" and v2.max_abs_diff_unet <= 1e-6, v2.message


@pytest.mark.slow
def test_every_key_is_consumed_and_leftovers_are_reported(sd15, tmp_path):
    from diffusers.loaders.lora_pipeline import StableDiffusionLoraLoaderMixin

    m = _trained(sd15)
    sd = L.kohya_state_dict(m.denoiser, m.text_encoders, alpha=ALPHA)
    converted, alphas = StableDiffusionLoraLoaderMixin.lora_state_dict(dict(sd))  # raises if a key is left over
    assert len(converted) + len(alphas) == len(sd)
    # a module the base model does not have: diffusers drops it, verify names it
    extra = dict(sd)
    extra["lora_unet_not_a_layer_to_q.lora_down.weight"] = torch.zeros(RANK, 32)
    extra["lora_unet_not_a_layer_to_q.lora_up.weight"] = torch.zeros(32, RANK)
    path = tmp_path / "extra.safetensors"
    X.save_lora(path, extra, {}, "fp32")
    v = verify_lora(path, sd15)
    assert not v.ok and len(v.keys_unused) == 2 and "not_a_layer" in v.keys_unused[0]
    assert "2 keys were not used" in v.message


@pytest.mark.slow
def test_diffusers_format_round_trips_with_alpha_metadata(sd15, sdxl, tmp_path):
    from safetensors.torch import save_file

    for base in (sd15, sdxl):
        m = _trained(base, seed=5)
        path = tmp_path / Path(base).name / "my_lora" / X.DIFFUSERS_WEIGHT_NAME
        X.export_lora(path, m.denoiser, m.text_encoders, fmt="diffusers", save_precision="fp32", alpha=ALPHA)
        sd, meta = L.read_lora(path)
        assert all(k.startswith(("unet.", "text_encoder.", "text_encoder_2.")) for k in sd)
        assert "unet.down_blocks.1.attentions.0.transformer_blocks.0.attn1.to_q.lora_A.weight" in sd
        assert any(k.startswith("text_encoder.text_model.encoder.layers.0.self_attn.q_proj.lora_B") for k in sd)
        adapter = json.loads(meta["lora_adapter_metadata"])
        assert adapter["unet.r"] == RANK and adapter["unet.lora_alpha"] == ALPHA and adapter["text_encoder.lora_alpha"] == ALPHA
        v = verify_lora(path.parent, base, reference=m)  # load_lora_weights(<folder>) as diffusers users do
        assert v.ok and v.max_abs_diff_unet <= 1e-5 and v.keys_unused == (), v.message
        # our own loader reads it too (init_lora may point at a diffusers-format file)
        fresh = load_base_model(ModelConfig(base=base, family="auto"))
        L.inject_unet_lora(fresh.denoiser, RANK, ALPHA)
        for enc in fresh.text_encoders:
            L.inject_text_encoder_lora(enc, RANK, ALPHA)
        assert L.load_kohya_lora(path.parent, fresh.denoiser, fresh.text_encoders) == len(sd) // 2
        assert all(torch.equal(a, b) for a, b in zip(L.lora_parameters(m.denoiser), L.lora_parameters(fresh.denoiser)))
    # without the adapter metadata diffusers assumes alpha = rank: the metadata is what makes it right
    bare = tmp_path / "bare.safetensors"
    save_file(sd, str(bare))
    assert not verify_lora(bare, sdxl, reference=m).ok


# --------------------------------------------------------------------------- save precision


@pytest.mark.slow
def test_fp16_overflow_and_underflow_are_named_before_writing(sd15, tmp_path):
    sd = {
        "a.lora_up.weight": torch.tensor([1.0, 1e6, -3.0]),
        "b.lora_down.weight": torch.full((100,), 1e-9),
        "c.lora_up.weight": torch.randn(100) * 0.01,
        "c.alpha": torch.tensor(8.0),
    }
    rep = X.check_fp16(sd)
    assert rep.overflow == {"a.lora_up.weight": 1e6}
    assert rep.underflow == {"b.lora_down.weight": 1.0}
    adv = rep.advice()
    assert adv is not None and adv.suggestion == {"precision.save": "bf16"} and "a.lora_up.weight" in adv.message
    assert X.check_fp16({"x": torch.randn(10)}).ok

    m = _trained(sd15, te=False)
    layer = next(iter(L.lora_layers(m.denoiser).values()))
    with torch.no_grad():
        layer.lora_B[L.ADAPTER].weight[0, 0] = 1e6  # planted
    path = tmp_path / "o.safetensors"
    path.write_bytes(b"previous")
    with pytest.raises(X.Fp16OverflowError, match="65504"):
        X.export_lora(path, m.denoiser, fmt="kohya", save_precision="fp16", alpha=ALPHA, on_fp16_overflow="raise")
    assert path.read_bytes() == b"previous"  # reported before anything was written
    res = X.export_lora(path, m.denoiser, fmt="kohya", save_precision="fp16", alpha=ALPHA)  # default: fall back to bf16
    assert res.save_precision == "bf16" and list(res.fp16.overflow) == [next(k for k in res.fp16.overflow)]
    assert "lora_up.weight" in next(iter(res.fp16.overflow)) and res.warnings[0].startswith(X.FP16_WARNING_TAG)
    tensors, meta = L.read_lora(path)
    assert meta["ss_save_precision"] == "bf16" and all(t.dtype == torch.bfloat16 for t in tensors.values())
    assert all(torch.isfinite(t.float()).all() for t in tensors.values())


# --------------------------------------------------------------------------- metadata


_config = config_with


def test_build_metadata_is_all_strings_as_kohya_writes_it():
    cfg = _config(network__rank=16, network__alpha=8.0, output__name="ink", output__title="Ink style", output__author="Ana",
                  output__description="Loose ink drawings", output__trigger_words="inkstyle", output__license="CC-BY-4.0",
                  dataset__resolution=512, precision__save="bf16", precision__training="fp16")
    meta = X.build_metadata(cfg, "sdxl", num_images=40, epochs=10, steps=400, started=1700000000.0, finished=1700003600.5,
                            tag_frequency={"10_ink": {"ink": 4, "cat": 1}}, optimizer_name="AdamW8bit")
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in meta.items())
    expected = {
        "ss_network_module": "networks.lora", "ss_network_dim": "16", "ss_network_alpha": "8",
        "ss_base_model_version": "sdxl_base_v1-0", "ss_v2": "False", "ss_mixed_precision": "fp16",
        "ss_save_precision": "bf16", "ss_resolution": "(512, 512)", "ss_num_train_images": "40", "ss_num_epochs": "10",
        "ss_steps": "400", "ss_optimizer": "AdamW8bit", "ss_output_name": "ink", "modelspec.sai_model_spec": "1.0.0",
        "modelspec.architecture": "stable-diffusion-xl-v1-base/lora", "modelspec.title": "Ink style",
        "modelspec.author": "Ana", "modelspec.description": "Loose ink drawings", "modelspec.trigger_phrase": "inkstyle",
        "modelspec.license": "CC-BY-4.0", "modelspec.resolution": "512x512", "modelspec.date": "2023-11-14T23:13:20+00:00",
    }
    assert {k: meta[k] for k in expected} == expected
    assert json.loads(meta["ss_tag_frequency"]) == {"10_ink": {"ink": 4, "cat": 1}}
    assert float(meta["ss_training_started_at"]) == 1700000000.0 and float(meta["ss_training_finished_at"]) == 1700003600.5
    assert float(meta["ss_learning_rate"]) == cfg.optimizer.lr and meta["modelspec.implementation"]
    sd1 = X.build_metadata(_config(), "sd15", num_images=1, epochs=1, steps=1, started=None, finished=None,
                           tag_frequency={}, optimizer_name="AdamW")
    assert sd1["ss_base_model_version"] == "sd_v1" and sd1["modelspec.architecture"] == "stable-diffusion-v1/lora"
    assert "modelspec.author" not in sd1 and sd1["modelspec.title"] == "my_lora"
    assert "modelspec.description" not in sd1
    # a demo LoRA says it is one: not an SD 1.5 LoRA, and real clients will not load it
    demo = X.build_metadata(_config(), "demo", num_images=1, epochs=1, steps=1, started=None, finished=None,
                            tag_frequency={}, optimizer_name="AdamW")
    assert demo["ss_base_model_version"] == "guitrainer_demo" and "stable-diffusion" not in demo["modelspec.architecture"]
    assert "demo" in demo["modelspec.description"] and "not a Stable Diffusion LoRA" in demo["modelspec.description"]


def test_the_lora_the_user_sees_is_the_file_or_the_diffusers_folder(tmp_path):
    """Where a run's LoRAs go is core/runs/names.py's (tests/test_run_names.py); here, what "the LoRA" is."""
    assert X.saved_item(tmp_path / "ink.safetensors", "kohya") == tmp_path / "ink.safetensors"
    assert X.saved_item(tmp_path / "ink" / X.DIFFUSERS_WEIGHT_NAME, "diffusers") == tmp_path / "ink"


# --------------------------------------------------------------------------- atomic writes


@pytest.mark.slow
def test_a_crash_inside_the_write_leaves_the_old_file(sd15, tmp_path, monkeypatch):
    import safetensors.torch as st

    m = _trained(sd15, te=False)
    path = tmp_path / "keep.safetensors"
    X.export_lora(path, m.denoiser, save_precision="fp32", alpha=ALPHA)
    before = path.read_bytes()

    def half_then_crash(tensors, filename, metadata=None):
        Path(filename).write_bytes(st.save(tensors, metadata=metadata)[:1000])
        raise RuntimeError("power cut")

    monkeypatch.setattr(st, "save_file", half_then_crash)
    with pytest.raises(RuntimeError, match="power cut"):
        X.export_lora(path, m.denoiser, save_precision="fp16", alpha=ALPHA)
    assert path.read_bytes() == before and sorted(tmp_path.iterdir()) == [path]  # no temp file left
    L.read_lora(path)


_KILL_SCRIPT = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    import torch, safetensors.torch as st
    from guitrainer.engine import export as X

    def slow_save(tensors, filename, metadata=None):
        data = st.save(tensors, metadata=metadata)
        with open(filename, "wb") as f:
            f.write(data[: len(data) // 2])
            f.flush()
            print("HALF", flush=True)
            time.sleep(60)
            f.write(data[len(data) // 2 :])

    st.save_file = slow_save
    big = {"lora_unet_x.lora_down.weight": torch.randn(4096, 4096), "lora_unet_x.lora_up.weight": torch.randn(4096, 4)}
    X.save_lora(sys.argv[1], big, {}, "fp32")
    """
)


@pytest.mark.slow  # a torch subprocess started and killed mid-write: seconds
def test_killing_the_process_mid_write_leaves_the_old_file(tmp_path):
    path = tmp_path / "big.safetensors"
    X.save_lora(path, {"lora_unet_x.lora_down.weight": torch.ones(2, 2)}, {"v": "old"}, "fp32")
    proc = subprocess.Popen([sys.executable, "-c", _KILL_SCRIPT, str(path)], cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "HALF"  # 32 MiB of a 64 MiB file are on disk
        temps = [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
        assert len(temps) == 1 and temps[0].stat().st_size > 1 << 20
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(30)
    assert proc.returncode == -signal.SIGKILL
    tensors, meta = L.read_lora(path)
    assert meta["v"] == "old" and torch.equal(tensors["lora_unet_x.lora_down.weight"], torch.ones(2, 2))


# --------------------------------------------------------------------------- other trainers' files


@pytest.mark.slow
def test_load_other_trainers_kohya_names_alpha_and_shapes(sd15, sdxl):
    """lora_te1_ for one text encoder, names without ``text_model``, 2-D ``proj_in`` for a 1x1 conv,
    kohya-ss' SDXL ``input_blocks`` names, alpha != rank: all land on the right layers with the same effect."""
    src = load_base_model(ModelConfig(base=sd15, family="auto"))
    L.inject_unet_lora(src.denoiser, RANK, 2.0, targets="attention_ff_proj")
    L.inject_text_encoder_lora(src.text_encoder, RANK, 2.0)
    _randomise(L.lora_parameters(src.denoiser) + L.lora_parameters(src.text_encoder), 7)
    theirs = {}
    for k, v in L.kohya_state_dict(src.denoiser, [src.text_encoder]).items():
        k = k.replace("lora_te_text_model_", "lora_te1_")
        theirs[k] = v.flatten(1) if "proj_in.lora" in k or "proj_out.lora_down" in k else v
    assert any(v.dim() == 2 and "proj_in.lora_down" in k for k, v in theirs.items())
    dst = load_base_model(ModelConfig(base=sd15, family="auto"))
    L.inject_unet_lora(dst.denoiser, RANK, 8.0, targets="attention_ff_proj")
    L.inject_text_encoder_lora(dst.text_encoder, RANK, 8.0)
    assert L.load_kohya_lora(theirs, dst.denoiser, [dst.text_encoder]) == len(theirs) // 3
    x, t, h = torch.randn(1, 4, 8, 8), torch.tensor([10]), torch.randn(1, 5, 32)
    ids = torch.randint(0, 1000, (1, 12))
    with torch.no_grad():
        assert torch.allclose(src.denoiser(x, t, h).sample, dst.denoiser(x, t, h).sample, atol=1e-5)
        assert torch.allclose(src.text_encoder(ids)[0], dst.text_encoder(ids)[0], atol=1e-5)

    # SDXL as kohya-ss writes it (the original UNet's block names: our writer's spelling too) and in the
    # diffusers spelling (our files before, some other trainers): both land on the same layers
    xl = _trained(sdxl, te=False, alpha=2.0)
    sgm = L.kohya_state_dict(xl.denoiser)
    assert any(k.startswith("lora_unet_input_blocks_4_1_") for k in sgm) and any("output_blocks_2_1" in k for k in sgm)
    assert not any("down_blocks" in k or "up_blocks" in k or "mid_block_" in k for k in sgm)
    spelled = L.kohya_from_diffusers(L.diffusers_state_dict(xl.denoiser), {"unet.lora_alpha": 2.0})
    assert any(k.startswith("lora_unet_down_blocks_1_attentions_0_") for k in spelled)
    for sd in (sgm, spelled):
        fresh = load_base_model(ModelConfig(base=sdxl, family="auto"))
        L.inject_unet_lora(fresh.denoiser, RANK, 8.0)
        assert L.load_kohya_lora(sd, fresh.denoiser) == len(L.lora_layers(fresh.denoiser))
        for (na, a), (nb, b) in zip(L.lora_layers(xl.denoiser).items(), L.lora_layers(fresh.denoiser).items()):
            assert na == nb and torch.equal(a.lora_A[L.ADAPTER].weight, b.lora_A[L.ADAPTER].weight)
            assert torch.allclose(a.lora_B[L.ADAPTER].weight * 2.0 / RANK, b.lora_B[L.ADAPTER].weight * 8.0 / RANK)


@pytest.mark.slow
def test_clear_errors_for_rank_mismatch_unknown_keys_and_non_lora(sd15):
    src = _trained(sd15, te=False)
    sd = L.kohya_state_dict(src.denoiser)
    other = load_base_model(ModelConfig(base=sd15, family="auto"))
    L.inject_unet_lora(other.denoiser, 8, 8.0)
    with pytest.raises(L.LoraFormatError, match=r"file has rank 4, the network has rank 8; set network.rank to 4"):
        L.load_kohya_lora(sd, other.denoiser)
    same = load_base_model(ModelConfig(base=sd15, family="auto"))
    L.inject_unet_lora(same.denoiser, RANK, ALPHA)
    sd["lora_unet_somewhere_else.lora_down.weight"] = torch.zeros(RANK, 3)
    sd["lora_unet_somewhere_else.lora_up.weight"] = torch.zeros(3, RANK)
    with pytest.raises(L.LoraFormatError, match=r"1 of \d+ LoRA modules match no layer trained here, e.g. lora_unet_somewhere_else"):
        L.load_kohya_lora(sd, same.denoiser)
    skipped: list[str] = []
    assert L.load_kohya_lora(sd, same.denoiser, strict=False, skipped=skipped) == len(L.lora_layers(same.denoiser))
    assert skipped == ["lora_unet_somewhere_else"]
    with pytest.raises(L.LoraFormatError, match="holds no LoRA weights"):
        L.load_kohya_lora({"model.diffusion_model.x.weight": torch.zeros(2)}, same.denoiser)
    with pytest.raises(L.LoraFormatError, match="LyCORIS"):
        L.load_kohya_lora({"lora_unet_a.hada_w1_a": torch.zeros(2), "lora_unet_a.lora_down.weight": torch.zeros(2)}, same.denoiser)


# --------------------------------------------------------------------------- the trainer


def _demo_cfg(out: Path, **settings: object) -> TrainingConfig:
    return demo_cfg(out, network__rank=RANK, network__alpha=ALPHA, **settings)


@pytest.mark.slow
def test_continue_training_starts_from_the_loaded_weights(tmp_path):
    from guitrainer.engine.trainer import Trainer

    torch.set_num_threads(1)
    first = Trainer(_demo_cfg(tmp_path / "a", schedule__max_steps=3, optimizer__lr=1e-2, network__train_text_encoder=True))
    s1 = first.run()
    assert s1.status == "finished", s1.message
    _, meta = L.read_lora(s1.lora_path)
    assert meta["ss_network_alpha"] == "8" and meta["ss_network_dim"] == "4" and "ss_training_finished_at" in meta
    assert json.loads(meta["ss_tag_frequency"]) and meta["modelspec.architecture"] == "guitrainer-demo/lora"

    cont_cfg = _demo_cfg(tmp_path / "b", schedule__max_steps=1, model__init_lora=s1.lora_path, network__train_text_encoder=True)
    cont_rep = NullReporter()
    cont = Trainer(cont_cfg, cont_rep)
    assert cont.run().status == "finished"
    assert not cont_rep.warnings  # text encoder part used too

    # the same run, its LoRA set from the first trainer's memory instead of the file
    ref_cfg = _demo_cfg(tmp_path / "c", schedule__max_steps=1, network__train_text_encoder=True)
    ref_rep = NullReporter()
    ref = Trainer(ref_cfg, ref_rep)
    setup = ref._setup

    def setup_then_copy():
        session = setup()
        pairs = zip(first.session.params, ref.session.params)
        with torch.no_grad():
            for a, b in pairs:
                b.copy_(a)
        return session

    ref._setup = setup_then_copy
    assert ref.run().status == "finished"
    fresh_rep = NullReporter()
    Trainer(_demo_cfg(tmp_path / "d", schedule__max_steps=1, network__train_text_encoder=True), fresh_rep).run()
    assert cont_rep.steps[0].loss == pytest.approx(ref_rep.steps[0].loss, rel=1e-6, abs=1e-7)
    assert cont_rep.steps[0].loss != pytest.approx(fresh_rep.steps[0].loss, rel=1e-4)


@pytest.mark.slow
def test_trainer_writes_diffusers_format_and_fp16_overflow_warning(tmp_path, monkeypatch, caplog):
    from guitrainer.engine.trainer import Trainer

    torch.set_num_threads(1)
    rep = NullReporter()
    cfg = _demo_cfg(tmp_path, schedule__max_steps=1, output__format="diffusers", precision__save="fp16", output__name="ink")
    monkeypatch.setattr(L, "diffusers_state_dict", _with_overflow(L.diffusers_state_dict))
    with caplog.at_level("WARNING"):
        summary = Trainer(cfg, rep).run()
    logged = [r.getMessage() for r in caplog.records if r.getMessage().startswith(X.FP16_WARNING_TAG)]
    assert len(logged) == 1  # once, not by export and again by the run's feedback
    assert summary.status == "finished", summary.message
    assert Path(summary.lora_path) == tmp_path / "ink" and (tmp_path / "ink" / X.DIFFUSERS_WEIGHT_NAME).is_file()
    warn = [w for w in rep.warnings if w.startswith(X.FP16_WARNING_TAG)]
    assert warn and "bf16" in warn[0] and "lora_A.weight" in warn[0]
    _, meta = L.read_lora(tmp_path / "ink" / X.DIFFUSERS_WEIGHT_NAME)
    assert meta["ss_save_precision"] == "bf16" and json.loads(meta["lora_adapter_metadata"])["unet.lora_alpha"] == ALPHA


def _with_overflow(fn):
    def wrapped(*a, **k):
        sd = fn(*a, **k)
        key = next(k for k in sd if k.endswith("lora_A.weight"))
        sd[key] = sd[key].clone()
        sd[key][0, 0] = 1e6
        return sd

    return wrapped
