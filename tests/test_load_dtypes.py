"""Each part of the base model is built in the dtype the run places it in (issue 30 item 3: system RAM, not VRAM,
killed runs while a model loaded in fp32 on the CPU).

The proof that nothing changes for the run: the weights a bf16 load builds are, bit for bit, the fp32 load cast
afterwards (main's path), for every family and every kind of file (the files written in fp16, so fp16 → bf16 really
rounds: one rounding either way, as fp16 → fp32 is exact); and a few bf16 training steps through the real Trainer
give the same losses and the same LoRA file both ways. Beside it: the dtypes the session asks for (the VAE in fp32
where the run keeps it there) and what the parts really hold.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
import torch
from helpers import demo_cfg, tiny_flux
from helpers.tiny_sd35 import build_tiny_sd35
from PIL import Image

from guitrainer.config import ModelConfig
from guitrainer.core.events import NullReporter
from guitrainer.engine import session as session_module
from guitrainer.engine.models import loading
from guitrainer.engine.models.demo import ensure_demo_model
from guitrainer.engine.models.loading import LoadDtypes, load_base_model, load_dtypes
from guitrainer.engine.network.lora import read_lora
from guitrainer.engine.trainer import Trainer

sys.path.insert(0, str(Path(__file__).parent))
from tiny_models import build_tiny  # noqa: E402

pytestmark = pytest.mark.slow

F32, F16, BF16 = torch.float32, torch.float16, torch.bfloat16


def _halve(path: Path) -> None:
    """Rewrite every .safetensors at or under ``path`` with its floating-point tensors in fp16 (as most published
    files are), in place."""
    from safetensors import safe_open
    from safetensors.torch import load_file, save_file

    for f in [path] if path.is_file() else sorted(path.rglob("*.safetensors")):
        with safe_open(str(f), "pt") as handle:
            meta = handle.metadata()
        state = {k: v.to(F16) if v.is_floating_point() else v for k, v in load_file(str(f)).items()}
        save_file(state, str(f), metadata=meta)


def _fp16_tree(src: Path, dst: Path) -> Path:
    if src.is_dir():
        shutil.copytree(src, dst)
    else:
        shutil.copy(src, dst)
    _halve(dst)
    return dst


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """fp16 copies of: the demo model, a tiny SD 1.5 as one file, a tiny Flux and a tiny SD 3.5 as a diffusers folder,
    one checkpoint file and split files; name -> (ModelConfig, config_dir)."""
    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("fp16_models")
    found: dict[str, tuple[ModelConfig, Path | None]] = {}
    found["demo"] = (ModelConfig(base=str(_fp16_tree(ensure_demo_model(), root / "demo"))), None)

    from safetensors.torch import save_file

    from guitrainer.engine.models.singlefile import to_original_layout

    sd15 = build_tiny(root / "sd15_folder", "sd15")
    m = loading.load_folder(sd15, "sd15")
    single = root / "tiny_sd15.safetensors"
    save_file({k: v.to(F16) for k, v in to_original_layout(m.denoiser, m.vae, m.text_encoders, "sd15").items()}, str(single))
    configs = shutil.copytree(sd15, root / "sd15_configs", ignore=shutil.ignore_patterns("*.safetensors"))
    found["sd15_single"] = (ModelConfig(base=str(single)), configs)

    tiny = tiny_flux.build(seed=5)
    flux = root / "flux"
    flux_configs = tiny_flux.tiny_config_dir(tiny, flux / "configs")
    found["flux_folder"] = (ModelConfig(base=str(_fp16_tree(tiny_flux.save_diffusers(tiny, flux / "d32"), flux / "d"))), None)
    found["flux_single"] = (ModelConfig(base=str(_fp16_tree(tiny_flux.save_comfy_checkpoint(tiny, flux / "a32.safetensors"),
                                                            flux / "all.safetensors"))), flux_configs)
    split = {k: _fp16_tree(p, flux / f"{k}.safetensors") for k, p in tiny_flux.save_split(tiny, flux / "s32").items()}
    found["flux_split"] = (ModelConfig(base=str(split["transformer"]), text_encoders=[str(split["clip_l"]), str(split["t5"])],
                                       vae=str(split["vae"])), flux_configs)

    sd35 = build_tiny_sd35(root / "sd35_32")
    s = root / "sd35"
    folder = _fp16_tree(sd35.folder, s / "diffusers")
    found["sd35_folder"] = (ModelConfig(base=str(folder)), None)
    found["sd35_single"] = (ModelConfig(base=str(_fp16_tree(sd35.single_file, s / "all.safetensors"))), folder)
    parts = {k: _fp16_tree(getattr(sd35, k), s / f"{k}.safetensors") for k in ("transformer_file", "clip_l", "clip_g", "t5", "vae")}
    found["sd35_split"] = (ModelConfig(base=str(parts["transformer_file"]), vae=str(parts["vae"]),
                                       text_encoders=[str(parts[k]) for k in ("clip_l", "clip_g", "t5")]), folder)
    return found


def _modules(m) -> list[torch.nn.Module]:
    return [m.denoiser, m.vae, *m.text_encoders]


def _placed(m, dtype: torch.dtype):
    """Main's path: the fp32 load, then each part cast as ``session._prepare_model`` casts it (torch's Module.to)."""
    for module in _modules(m):
        torch.nn.Module.to(module, dtype)
    return m


def _tensors(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {**dict(module.named_parameters()), **dict(module.named_buffers())}


@pytest.mark.parametrize("name", ["demo", "sd15_single", "flux_folder", "flux_single", "flux_split", "sd35_folder",
                                  "sd35_single", "sd35_split"])
def test_a_bf16_load_is_the_fp32_load_cast_bit_for_bit(models, name, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    cfg, config_dir = models[name]
    old = _placed(load_base_model(cfg, config_dir=config_dir), BF16)
    new = load_base_model(cfg, config_dir=config_dir, dtypes=LoadDtypes(BF16, BF16, BF16))
    assert new.family == old.family
    for a, b in zip(_modules(old), _modules(new), strict=True):
        ta, tb = _tensors(a), _tensors(b)
        assert ta.keys() == tb.keys()
        assert [k for k in ta if ta[k].dtype != tb[k].dtype or not torch.equal(ta[k], tb[k])] == []
        # it really was built in bf16: every floating-point weight, nothing left in fp32 to cast later
        assert {t.dtype for t in tb.values() if t.is_floating_point()} == {BF16}, type(b).__name__
        assert not any(p.requires_grad for p in b.parameters())


def test_the_files_were_fp16_so_the_cast_rounds(models):
    """The comparison above could fail: the fp16 files hold values bf16 cannot (a cast that truncated instead of
    rounding, or rounded twice through another width, would differ)."""
    from safetensors.torch import load_file

    cfg, _ = models["flux_single"]
    weight = next(v for v in load_file(cfg.base).values() if v.dtype == F16 and v.numel() > 1000)
    assert not torch.equal(weight.to(BF16).to(F16), weight)  # bf16 keeps 8 bits of mantissa, fp16 11
    truncated = (weight.float().view(torch.int32) & ~0xFFFF).view(torch.float32).to(BF16)
    assert not torch.equal(truncated, weight.to(BF16))


def test_the_session_asks_for_the_dtypes_it_places_the_parts_in():
    """bf16: everything bf16. fp16 on a CPU: the VAE fp32 (no fast fp16 convolutions), the rest fp16. fp16 on a GPU:
    a family whose VAE may overflow (SDXL's) loads it in fp32, its config deciding afterwards; the others fp16."""
    assert load_dtypes("bf16", BF16, "cuda") == LoadDtypes(BF16, BF16, BF16)
    assert load_dtypes("bf16", BF16, "cpu") == LoadDtypes(BF16, BF16, BF16)
    assert load_dtypes("fp16", F16, "cpu") == LoadDtypes(F16, F32, F32)
    assert load_dtypes("fp16", F16, "cuda") == LoadDtypes(F16, F16, F32)
    assert load_dtypes("fp32", F32, "cuda") == LoadDtypes()


def test_an_sdxl_vae_loads_in_fp32_under_fp16_on_a_gpu_and_an_sd15_one_in_fp16(tmp_path):
    torch.set_num_threads(1)
    dtypes = load_dtypes("fp16", F16, "cuda")
    for family, vae in (("sdxl", F32), ("sd15", F16)):
        m = loading.load_folder(build_tiny(tmp_path / family, family), family, dtypes=dtypes)
        assert {p.dtype for p in m.vae.parameters()} == {vae}, family
        assert {p.dtype for mod in (m.denoiser, *m.text_encoders) for p in mod.parameters()} == {F16}, family


def _images(folder: Path, n: int = 2) -> Path:
    folder.mkdir(exist_ok=True)
    for i in range(n):
        Image.new("RGB", (64, 64), (70 * i, 180 - 50 * i, 90)).save(folder / f"{i}.png")
        (folder / f"{i}.txt").write_text(f"a photo of shape {i}")
    return folder


def _fp32_then_cast(model_cfg, *, progress=None, dtypes=None, **kw):
    """main's load: fp32 whatever the run asks; ``_prepare_model`` casts afterwards."""
    assert dtypes is not None and dtypes.weights == BF16  # the session did ask for bf16
    return load_base_model(model_cfg, progress=progress, **kw)


@pytest.mark.parametrize(("name", "settings"), [
    ("demo", {}),
    ("demo", {"precision__base_weights": "fp8"}),  # stored in fp8 after the cast: the same from a bf16 load
    ("flux_folder", {"network__target_modules": "attention_ff_proj"}),
    ("sd35_folder", {"network__target_modules": "attention_ff_proj"}),
])
def test_bf16_training_from_a_bf16_load_gives_main_s_lora_bit_for_bit(models, name, settings, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    torch.set_num_threads(1)
    data = _images(tmp_path / "data")
    base = models[name][0].base

    def run(out: str) -> tuple[list[float], dict[str, torch.Tensor]]:
        cfg = demo_cfg(tmp_path / out, model__base=base, model__family="auto", dataset__folders=[str(data)],
                       dataset__resolution=64, schedule__batch_size=1, schedule__max_steps=3,
                       precision__training="bf16", precision__cache_to_disk=False, **settings)
        reporter = NullReporter()  # it keeps every step's metrics
        summary = Trainer(cfg, reporter).run()
        assert summary.status == "finished", summary.message
        return [s.loss for s in reporter.steps], read_lora(summary.lora_path)[0]

    new_losses, new = run("new")
    monkeypatch.setattr(session_module, "load_base_model", _fp32_then_cast)
    old_losses, old = run("old")
    assert len(new_losses) == 3 and new_losses == old_losses
    assert new.keys() == old.keys() and all(torch.equal(new[k], old[k]) for k in new)


class _Loaded(BaseException):  # noqa: N818 - not an error: ends a run after its load, past the Trainer's handlers
    """Raised once the model is loaded and looked at."""


@pytest.mark.parametrize(("precision", "weights", "vae"), [("fp16", F16, F32), ("bf16", BF16, BF16)])
def test_the_session_loads_the_parts_in_the_dtypes_it_trains_them_in(precision, weights, vae, tmp_path, monkeypatch):
    """Through the Trainer on the CPU: what build_session's load returns, before _prepare_model touches it — under
    fp16 the VAE in fp32 (a CPU has no fast fp16 convolutions), everything else fp16; under bf16 all bf16."""
    torch.set_num_threads(1)
    seen: dict[str, set[torch.dtype]] = {}

    def load_and_look(model_cfg, **kw):
        m = load_base_model(model_cfg, **kw)
        seen["vae"] = {p.dtype for p in m.vae.parameters()}
        seen["rest"] = {p.dtype for mod in (m.denoiser, *m.text_encoders) for p in mod.parameters()}
        raise _Loaded  # enough: the run need not train

    monkeypatch.setattr(session_module, "load_base_model", load_and_look)
    cfg = demo_cfg(tmp_path / "out", precision__training=precision, schedule__max_steps=1)
    with pytest.raises(_Loaded):
        Trainer(cfg).run()
    assert seen == {"vae": {vae}, "rest": {weights}}
