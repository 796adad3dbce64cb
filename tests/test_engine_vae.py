"""model.vae in the engine: a tiny VAE folder or single file replaces the base model's own, fp16 follows the
VAE's own force_upcast, the latent cache keys on the VAE, and the LoRA's metadata names it (CPU, tiny models)."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from PIL import Image

from guitrainer.config import ModelConfig
from guitrainer.engine.cache import LatentCache
from guitrainer.engine.models.loading import load_base_model
from guitrainer.engine.models.types import ModelLoadError
from guitrainer.engine.models.vae import force_upcast, vae_needs_fp32

sys.path.insert(0, str(Path(__file__).parent))
from helpers import config_with, demo_cfg  # noqa: E402


def demo_like_vae(seed: int, *, force_upcast: bool, latent_channels: int = 4) -> torch.nn.Module:
    """An AutoencoderKL of the demo model's architecture, with other random weights."""
    from diffusers import AutoencoderKL

    torch.manual_seed(seed)
    return AutoencoderKL(
        in_channels=3, out_channels=3, down_block_types=("DownEncoderBlock2D",) * 3,
        up_block_types=("UpDecoderBlock2D",) * 3, block_out_channels=(32, 64, 64), layers_per_block=1,
        latent_channels=latent_channels, norm_num_groups=32, sample_size=64, scaling_factor=0.18215,
        force_upcast=force_upcast,
    )


def same_weights(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k].float(), sb[k].float()) for k in sa)


@pytest.fixture(scope="module")
def fixed_vae(tmp_path_factory) -> tuple[Path, torch.nn.Module]:
    """A demo-shaped VAE folder whose config says it runs in fp16 (as the fp16-fixed SDXL VAE's does)."""
    vae = demo_like_vae(7, force_upcast=False)
    folder = tmp_path_factory.mktemp("vae") / "my_fp16_vae"
    vae.save_pretrained(folder)
    return folder, vae


@pytest.mark.slow
def test_a_vae_folder_replaces_the_base_models_own(fixed_vae):
    folder, reference = fixed_vae
    own = load_base_model(ModelConfig(base="demo"))
    m = load_base_model(ModelConfig(base="demo", vae=str(folder)))
    assert same_weights(m.vae, reference) and not same_weights(m.vae, own.vae)
    assert m.vae_identity and own.vae_identity == "" and m.identity == own.identity  # the base is the same
    assert force_upcast(m.vae) is False and force_upcast(own.vae) is True
    assert not m.vae.training and not any(p.requires_grad for p in m.vae.parameters())


@pytest.mark.slow
def test_a_hub_id_offline_loads_its_snapshot_also_a_pipeline_repos_vae_folder(tmp_path, monkeypatch):
    """A hub id given as the VAE loads from the Hugging Face cache offline: a VAE repo (files at its root, as the
    fp16-fixed SDXL VAE) and a whole pipeline repo (its vae/ folder)."""
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    for repo, inner in (("someone/vae-only", ""), ("someone/whole-pipeline", "vae")):
        reference = demo_like_vae(11, force_upcast=False)
        snap = tmp_path / "hf" / "hub" / ("models--" + repo.replace("/", "--")) / "snapshots" / "abc"
        reference.save_pretrained(snap / inner if inner else snap)
        (snap.parent.parent / "refs").mkdir(parents=True, exist_ok=True)
        (snap.parent.parent / "refs" / "main").write_text("abc")
        m = load_base_model(ModelConfig(base="demo", vae=repo))
        assert same_weights(m.vae, reference), repo


@pytest.mark.slow
def test_a_single_vae_file_in_the_original_layout_loads_offline(tmp_path):
    """A1111's kind of VAE file (ldm keys, no config beside it): built from the base's VAE config, same weights."""
    from safetensors.torch import save_file

    from guitrainer.engine.models.singlefile import vae_to_original

    reference = demo_like_vae(3, force_upcast=True)
    path = tmp_path / "demo_vae.safetensors"
    save_file({k: v.contiguous() for k, v in vae_to_original(reference.state_dict(), 3).items()}, str(path))
    m = load_base_model(ModelConfig(base="demo", vae=str(path)))
    assert same_weights(m.vae, reference)
    diffusers_layout = tmp_path / "diffusers_layout.safetensors"
    save_file({k: v.contiguous() for k, v in reference.state_dict().items()}, str(diffusers_layout))
    assert same_weights(load_base_model(ModelConfig(base="demo", vae=str(diffusers_layout))).vae, reference)


@pytest.mark.slow
def test_a_vae_the_unet_cannot_take_is_refused_naming_both(tmp_path):
    folder = tmp_path / "vae16"
    demo_like_vae(1, force_upcast=False, latent_channels=8).save_pretrained(folder)
    with pytest.raises(ModelLoadError, match="8-channel latents.*takes 4"):
        load_base_model(ModelConfig(base="demo", vae=str(folder)))
    with pytest.raises(ModelLoadError, match="was not found"):
        load_base_model(ModelConfig(base="demo", vae=str(tmp_path / "nowhere")))


@pytest.mark.parametrize(
    ("precision", "family", "upcast", "device", "fp32"),
    [
        ("fp16", "sdxl", True, "cuda", True),  # SDXL's own VAE overflows in fp16
        ("fp16", "sdxl", False, "cuda", False),  # the fp16-fixed one says it need not
        ("fp16", "sd15", True, "cuda", False),  # SD 1.5's VAE runs in fp16 (diffusers' default config says true)
        ("fp16", "sdxl", False, "cpu", True),  # no fast fp16 convolutions on a CPU
        ("bf16", "sdxl", True, "cuda", False),  # bf16 has fp32's range
        ("fp32", "sdxl", True, "cuda", False),
    ],
)
def test_the_vae_stays_fp32_only_where_it_needs_to(precision, family, upcast, device, fp32):
    from guitrainer.core.families.registry import facts

    assert vae_needs_fp32(precision, facts(family).precision.vae_upcast, upcast, device) is fp32


def test_the_latent_cache_key_changes_with_the_vae(tmp_path):
    image = tmp_path / "a.png"
    Image.new("RGB", (64, 64), (200, 30, 30)).save(image)
    g = SimpleNamespace(bucket=(64, 64), resized=(64, 64), left=0, top=0)

    def key(vae_identity: str = "") -> str:
        return LatentCache(None, "model", torch.float32, torch.float16, vae_identity).key(image, g, False)

    assert key() != key("vae-a") != key("vae-b") and key() != key("vae-b")
    assert key("vae-a") == key("vae-a")
    # the base's own VAE keeps the key it always had: caches made before model.vae existed stay valid
    assert key() == LatentCache(None, "model", torch.float32, torch.float16).key(image, g, False)


@pytest.mark.slow
def test_a_run_encodes_with_the_chosen_vae_and_never_reuses_the_other_vaes_latents(tmp_path, fixed_vae, monkeypatch):
    from guitrainer.base import paths
    from guitrainer.core.events import NullReporter
    from guitrainer.engine.trainer import Trainer

    monkeypatch.setattr(paths, "cache_dir", lambda: tmp_path / "cache")
    data = tmp_path / "data"
    data.mkdir()
    for i, color in enumerate(((200, 30, 30), (30, 200, 30))):
        Image.new("RGB", (64, 64), color).save(data / f"{i}.png")
        (data / f"{i}.txt").write_text("a photo of a square")

    def run(out: str, vae: str) -> Trainer:
        torch.set_num_threads(1)
        cfg = demo_cfg(tmp_path / out, dataset__folders=[str(data)], schedule__max_steps=1, model__vae=vae,
                       precision__cache_latents=True, precision__cache_to_disk=True)
        tr = Trainer(cfg, NullReporter())
        assert tr.run().status == "finished"
        return tr

    own = run("o1", "")
    chosen = run("o2", str(fixed_vae[0]))
    assert chosen.caches.latent_store.misses == 2 and chosen.caches.latent_store.hits == 0  # not the own VAE's
    assert not torch.equal(own.caches.latents[(0, False)], chosen.caches.latents[(0, False)])
    again = run("o3", str(fixed_vae[0]))
    assert again.caches.latent_store.hits == 2 and again.caches.latent_store.misses == 0
    for k, v in chosen.caches.latents.items():
        assert torch.equal(v, again.caches.latents[k])


def test_the_lora_metadata_names_the_vae():
    from guitrainer.engine.export import build_metadata

    def meta(vae: str) -> dict[str, str]:
        cfg = config_with(model__vae=vae)
        return build_metadata(cfg, "sdxl", num_images=1, epochs=1, steps=1, started=0.0, finished=1.0,
                              tag_frequency={}, optimizer_name="AdamW")

    assert "ss_vae_name" not in meta("")
    assert meta("/models/sdxl-vae-fp16-fix/")["ss_vae_name"] == "sdxl-vae-fp16-fix"
    snapshot = "/hf/hub/models--madebyollin--sdxl-vae-fp16-fix/snapshots/207b116d/"
    assert meta(snapshot)["ss_vae_name"] == "sdxl-vae-fp16-fix"


def test_resuming_with_another_vae_warns(tmp_path):
    from guitrainer.engine.resume import resume_warnings

    saved = config_with()
    info = {"config": saved.to_dict()}
    assert resume_warnings(info, saved) == []
    (warning,) = resume_warnings(info, config_with(model__vae="/models/fix"))
    assert "the base model's own VAE" in warning and "/models/fix" in warning and "latents differ" in warning
