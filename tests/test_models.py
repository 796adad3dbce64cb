"""Base-model loading: tiny SD 1.5 / SDXL as diffusers folders and as original-layout single files, offline.

The tiny models (random weights, a few hundred kB) use the real CLIP tokenizer from resources/models,
so the generated vocabulary is exercised too.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
import torch

from guitrainer.base.paths import resources_dir
from guitrainer.config import ModelConfig
from guitrainer.engine.families.stable_diffusion import CONFIG_FILES, SDXL_CONFIG_FILES, check_config_dir
from guitrainer.engine.models.loading import load_base_model, load_folder
from guitrainer.engine.models.singlefile import to_original_layout
from guitrainer.engine.models.types import ModelLoadError

RES = resources_dir() / "models"

sys.path.insert(0, str(Path(__file__).parent))
from tiny_models import build_tiny  # noqa: E402


def config_only(src: Path, dst: Path) -> Path:
    """A copy of a diffusers folder without any weights: what resources/models/<family> is for real models."""
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("*.safetensors", "*.bin"))
    return dst


def save_single_file(folder: Path, family: str, target: Path) -> Path:
    """The folder's weights as one original-layout .safetensors (the civitai kind)."""
    from safetensors.torch import save_file

    m = load_folder(folder, family)
    save_file(to_original_layout(m.denoiser, m.vae, m.text_encoders, family), str(target))
    return target


@pytest.fixture(scope="module", params=["sd15", "sdxl"])
def tiny(request, tmp_path_factory):
    torch.set_num_threads(1)
    fam = request.param
    root = tmp_path_factory.mktemp(f"tiny_{fam}")
    folder = build_tiny(root / "folder", fam)
    single = save_single_file(folder, fam, root / f"tiny_{fam}.safetensors")
    return fam, folder, single, config_only(folder, root / "configs")


def _same_weights(a: torch.nn.Module, b: torch.nn.Module) -> None:
    sa, sb = a.state_dict(), b.state_dict()
    assert set(sa) == set(sb)
    bad = [k for k in sa if not torch.equal(sa[k], sb[k])]
    assert not bad, bad[:5]


@pytest.mark.slow
def test_folder_and_single_file_load_offline_with_equal_weights(tiny, monkeypatch):
    fam, folder, single, configs = tiny
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    a = load_base_model(ModelConfig(base=str(folder), family="auto"))
    b = load_base_model(ModelConfig(base=str(single), family="auto"), config_dir=configs)
    assert a.family == b.family == fam and a.source == "folder" and b.source == "single_file"
    assert len(a.text_encoders) == len(b.text_encoders) == (2 if fam == "sdxl" else 1)
    for x, y in zip([a.denoiser, a.vae, *a.text_encoders], [b.denoiser, b.vae, *b.text_encoders]):
        _same_weights(x, y)
    assert a.identity and b.identity and a.identity != b.identity
    ids = a.tokenizer("a photo of a cat").input_ids
    assert ids == b.tokenizer("a photo of a cat").input_ids == [49406, 320, 1125, 539, 320, 2368, 49407]
    if fam == "sdxl":
        assert b.tokenizers[1].pad_token == "!" and b.vae.config.force_upcast
        assert b.denoiser.config.addition_embed_type == "text_time"
    assert not any(p.requires_grad for p in b.denoiser.parameters())


@pytest.mark.slow
@pytest.mark.parametrize("tiny", ["sd15"], indirect=True)
def test_pickle_checkpoint_with_weights_only_loads(tiny, tmp_path):
    fam, _folder, single, configs = tiny
    from safetensors.torch import load_file

    ckpt = tmp_path / "model.ckpt"
    torch.save({"state_dict": load_file(str(single)), "global_step": 7}, ckpt)
    a = load_base_model(ModelConfig(base=str(single), family="auto"), config_dir=configs)
    b = load_base_model(ModelConfig(base=str(ckpt), family="auto"), config_dir=configs)
    _same_weights(a.denoiser, b.denoiser)


class _Evil:
    marker = ""

    def __reduce__(self):
        import builtins

        return (builtins.exec, (f"open({self.marker!r}, 'w').write('pwned')",))


def test_malicious_pickle_is_refused_and_never_runs(tmp_path):
    marker = tmp_path / "PWNED"
    evil = _Evil()
    evil.marker = str(marker)
    for name, save in (
        ("zip.ckpt", lambda p: torch.save({"state_dict": {"w": torch.zeros(1)}, "x": evil}, p)),
        ("legacy.pt", lambda p: torch.save({"x": evil}, p, _use_new_zipfile_serialization=False)),
    ):
        path = tmp_path / name
        save(path)
        assert not marker.exists()
        with pytest.raises(ModelLoadError, match="refused"):
            load_base_model(ModelConfig(base=str(path), family="auto"))
        assert not marker.exists(), "the pickle's payload ran"


@pytest.mark.slow
@pytest.mark.parametrize("tiny", ["sd15"], indirect=True)
def test_broken_files_give_errors_naming_the_file(tiny, tmp_path):
    fam, folder, single, configs = tiny
    cut = tmp_path / "cut.safetensors"
    cut.write_bytes(single.read_bytes()[: single.stat().st_size // 2])
    with pytest.raises(ModelLoadError, match=r"cut\.safetensors is truncated"):
        load_base_model(ModelConfig(base=str(cut)), config_dir=configs)
    empty = tmp_path / "empty.safetensors"
    empty.write_bytes(b"")
    with pytest.raises(ModelLoadError, match="empty.safetensors"):
        load_base_model(ModelConfig(base=str(empty)))
    with pytest.raises(ModelLoadError, match="does not exist"):
        load_base_model(ModelConfig(base=str(tmp_path / "gone.safetensors")))
    lora = tmp_path / "lora.safetensors"
    from safetensors.torch import save_file

    save_file({"lora_unet_x.lora_down.weight": torch.zeros(2, 2)}, str(lora))
    with pytest.raises(ModelLoadError, match="is a LoRA"):
        load_base_model(ModelConfig(base=str(lora)))
    junk = tmp_path / "junk.ckpt"
    junk.write_bytes(b"PK\x03\x04 not really a zip")
    with pytest.raises(ModelLoadError, match="junk.ckpt"):
        load_base_model(ModelConfig(base=str(junk)))
    partial = config_only(configs, tmp_path / "partial")
    (partial / "vae" / "config.json").unlink()
    with pytest.raises(ModelLoadError, match=r"vae/config\.json is missing"):
        load_base_model(ModelConfig(base=str(single)), config_dir=partial)
    broken = tmp_path / "broken_folder"
    shutil.copytree(folder, broken)
    (broken / "vae" / "diffusion_pytorch_model.safetensors").write_bytes(b"xx")
    with pytest.raises(ModelLoadError, match="vae"):
        load_base_model(ModelConfig(base=str(broken)))


def test_shipped_config_folders_are_complete():
    from diffusers import DDPMScheduler
    from transformers import CLIPTokenizer

    for fam in ("sd15", "sdxl"):
        check_config_dir(RES / fam, SDXL_CONFIG_FILES if fam == "sdxl" else CONFIG_FILES)
        index = json.loads((RES / fam / "model_index.json").read_text())
        for name, value in index.items():
            if isinstance(value, list) and value[0] is not None:
                assert (RES / fam / name).is_dir(), (fam, name)
        assert DDPMScheduler.from_pretrained(RES / fam, subfolder="scheduler").config.prediction_type == "epsilon"
        for sub in ("tokenizer", "tokenizer_2") if fam == "sdxl" else ("tokenizer",):
            tok = CLIPTokenizer.from_pretrained(RES / fam, subfolder=sub)
            assert len(tok) == 49408
            assert tok("Hello, World").input_ids == [49406, 3306, 267, 1002, 49407]
            # "!" is its own word ("!</w>" = 256) except in tokenizer_2, where it is the pad token (id 0)
            assert tok("World!").input_ids[2] == (0 if sub == "tokenizer_2" else 256)
            assert tok.convert_ids_to_tokens([320, 1125]) == ["a</w>", "photo</w>"]
    assert CLIPTokenizer.from_pretrained(RES / "sdxl", subfolder="tokenizer_2").pad_token_id == 0


@pytest.mark.slow
@pytest.mark.parametrize("tiny", ["sd15"], indirect=True)
def test_v_prediction_single_file_gets_a_v_prediction_scheduler(tiny, tmp_path):
    """A1111 / ComfyUI mark v-prediction checkpoints with a ``v_pred`` key (or modelspec metadata); the shipped
    scheduler config says epsilon, so the detected type must reach the scheduler the trainer takes its target from."""
    from safetensors.torch import load_file, save_file

    fam, folder, single, configs = tiny
    state = load_file(str(single))
    marked = tmp_path / "vpred.safetensors"
    save_file({**state, "v_pred": torch.zeros(0)}, str(marked))
    by_meta = tmp_path / "vpred_meta.safetensors"
    save_file(state, str(by_meta), metadata={"modelspec.prediction_type": "v"})
    ckpt = tmp_path / "vpred.ckpt"
    torch.save({"state_dict": {**state, "v_pred": torch.zeros(0)}}, ckpt)

    plain = load_base_model(ModelConfig(base=str(single), family="auto"), config_dir=configs)
    assert plain.noise_scheduler.config.prediction_type == "epsilon" and plain.prediction_type == "epsilon"
    for path in (marked, by_meta, ckpt):
        v = load_base_model(ModelConfig(base=str(path), family="auto"), config_dir=configs)
        assert v.noise_scheduler.config.prediction_type == "v_prediction", path.name
        assert v.prediction_type == "v_prediction" and v.family == fam
        # only the prediction type differs from the config folder's scheduler
        assert v.noise_scheduler.config.num_train_timesteps == plain.noise_scheduler.config.num_train_timesteps
        _same_weights(plain.denoiser, v.denoiser)

    # a diffusers folder whose scheduler says v_prediction keeps it
    vfolder = tmp_path / "vfolder"
    shutil.copytree(folder, vfolder)
    sched_cfg = vfolder / "scheduler" / "scheduler_config.json"
    sched_cfg.write_text(json.dumps({**json.loads(sched_cfg.read_text()), "prediction_type": "v_prediction"}))
    assert load_base_model(ModelConfig(base=str(vfolder), family="auto")).prediction_type == "v_prediction"


def test_pickle_checkpoints_load_memory_mapped_and_in_the_legacy_format(tmp_path):
    """Zip-format .ckpt files are read with mmap; pre-1.6 (legacy) ones, which mmap refuses, still load."""
    from guitrainer.engine.models.loading import load_pickle_weights

    state = {"model.diffusion_model.x": torch.randn(8, 8), "first_stage_model.y": torch.arange(5.0)}
    torch.save({"state_dict": state}, tmp_path / "zip.ckpt")
    torch.save({"state_dict": state}, tmp_path / "legacy.ckpt", _use_new_zipfile_serialization=False)
    for name in ("zip.ckpt", "legacy.ckpt"):
        got = load_pickle_weights(tmp_path / name)
        assert got.keys() == state.keys() and all(torch.equal(got[k], state[k]) for k in state)
