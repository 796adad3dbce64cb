"""Issue 32's families through the real Trainer on tiny models, each test once per family (Chroma, Z-Image, Qwen-Image): from a
diffusers folder, one file and split files (the loss falls); a stopped run resumes bit-exactly in fp32 and bf16;
4-bit (nf4) frozen weights train; half the blocks in RAM train the same LoRA; the validation loss, the numerics
monitor, samples and the run history; the precision lab; --check; and the kohya file merges, by ComfyUI's rules, to
exactly what the run trained."""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType
from typing import Any

import pytest
import torch
from helpers import comfy_reader, demo_cfg, tiny_chroma, tiny_qwenimage, tiny_zimage
from helpers.doubles import StopAt
from PIL import Image

from guitrainer.core.events import Control, NullReporter
from guitrainer.core.precision.lab import Candidate
from guitrainer.core.precision.measurements import MeasurementStore
from guitrainer.engine.families import registry
from guitrainer.engine.families.chroma import convert as chroma_convert
from guitrainer.engine.families.zimage import convert as zimage_convert
from guitrainer.engine.network.lora import ADAPTER, lora_layers, read_lora
from guitrainer.engine.trainer import Trainer

pytestmark = pytest.mark.slow


@dataclass(frozen=True)
class Case:
    """What differs between the families in these tests."""

    family: str
    helper: ModuleType
    text_part: str  # the split install's text-encoder file
    frozen: str  # the warning when the text encoder is asked to train
    kohya_key: str  # a key of the kohya file
    metadata: dict[str, str]
    to_original: Any  # diffusers-named weights -> ComfyUI's model keys
    patches: int  # modules ComfyUI patches for attention_ff_proj
    second_stack: str  # a block list the numerics monitor names besides "transformer.block.0."
    kept: tuple[str, ...]  # module prefixes 4-bit storage keeps in bf16
    quantised: str  # a layer 4-bit storage stores
    #: the learning rate the loss-falls tests use: 3e-3, but the tiny Qwen-Image's one image barely moves at it in 24
    #: steps (mean loss of the first and last 6 steps: 1.78 and 1.78; at 1e-2: 1.72 and 1.45)
    lr: float = 3e-3


def _same_names(state: dict[str, torch.Tensor], prefix: str = "") -> dict[str, torch.Tensor]:
    """Qwen-Image's weights under ComfyUI's names: diffusers' own (``comfy/ldm/qwen_image/model.py`` keeps them)."""
    return {prefix + k: v for k, v in state.items()}


CASES = {
    "chroma": Case(
        "chroma", tiny_chroma, "t5", "T5-XXL stays frozen", "lora_unet_double_blocks_0_img_attn_qkv",
        {"ss_base_model_version": "chroma", "modelspec.architecture": "chroma/lora", "ss_apply_t5_attn_mask": "True"},
        chroma_convert.diffusers_to_bfl,
        2 * 8 + 2 * 2,  # double blocks: 2 qkv + 2 proj + 4 mlp; single blocks: linear1 + linear2
        "transformer.single.0.", ("distilled_guidance_layer",), ".attn.to_q",
    ),
    "zimage": Case(
        "zimage", tiny_zimage, "qwen3", "Qwen3-4B stays frozen", "lora_unet_layers_0_attention_qkv",
        {"ss_base_model_version": "z_image", "modelspec.architecture": "Z-Image/lora"},
        zimage_convert.diffusers_to_original,
        4 * 5 + 3,  # qkv, out, w1, w2, w3 in 2 layers and 2 refiners; the modulation of the layers and the noise refiner
        "transformer.refiner.0.", ("t_embedder", "cap_embedder", "all_"), ".attention.to_q",
    ),
    "qwenimage": Case(
        "qwenimage", tiny_qwenimage, "qwen25vl", "Qwen2.5-VL-7B stays frozen", "lora_unet_transformer_blocks_0_attn_to_q",
        {"ss_base_model_version": "qwen_image", "modelspec.architecture": "Qwen-Image/lora"},
        _same_names,
        2 * (8 + 4 + 2),  # per block: 8 attention, 4 MLP and 2 modulation Linears
        "transformer.block.1.", ("time_text_embed", "img_in", "txt_in", "txt_norm", "norm_out", "proj_out"),
        ".attn.to_q", lr=1e-2,
    ),
}


@pytest.fixture(scope="module", params=sorted(CASES))
def fam(request, tmp_path_factory):
    case = CASES[request.param]
    folder = tmp_path_factory.mktemp(f"tiny_{case.family}")
    tiny = case.helper.build(seed=3)
    return {"case": case, "tiny": tiny, "folder": case.helper.save_diffusers(tiny, folder / "diffusers"),
            "config_dir": case.helper.tiny_config_dir(tiny, folder / "configs"),
            "split": case.helper.save_split(tiny, folder / "split"),
            "single": case.helper.save_comfy_checkpoint(tiny, folder / "tiny-all.safetensors")}


@pytest.fixture
def fam_configs(fam, monkeypatch):
    """One file and split files take their configs from the tiny folder (the shipped ones are full size)."""
    monkeypatch.setattr(type(registry.family(fam["case"].family)), "default_config_dir", lambda self: fam["config_dir"])
    return fam


def _images(folder, n=4):
    folder.mkdir(exist_ok=True)
    for i in range(n):
        Image.new("RGB", (64, 64), (60 * i, 200 - 40 * i, 90)).save(folder / f"{i}.png")
        (folder / f"{i}.txt").write_text(f"a photo of shape {i}")
    return folder


def _config(out, data, base, **settings):
    settings.setdefault("network__train_text_encoder", False)
    settings.setdefault("network__target_modules", "attention_ff")
    return demo_cfg(out, model__base=str(base), model__family="auto", dataset__folders=[str(data)],
                    dataset__resolution=64, schedule__batch_size=1, **settings)


def _run(cfg, reporter=None, control=None):
    torch.set_num_threads(1)
    rep = reporter or NullReporter()
    trainer = Trainer(cfg, rep, control) if control else Trainer(cfg, rep)
    summary = trainer.run()
    assert summary.status in ("finished", "stopped"), summary.message
    return summary, rep, trainer


@pytest.mark.parametrize("kind", ["folder", "single", "split"])
def test_each_kind_of_files_trains_and_the_loss_falls(tmp_path, fam_configs, kind):
    case = fam_configs["case"]
    data = _images(tmp_path / "data", 1)  # one image, learnt again and again: its loss must fall
    extra = {}
    base = fam_configs[kind]
    if kind == "split":
        parts = fam_configs["split"]
        base = parts["transformer"]
        extra = {"model__text_encoders": [str(parts[case.text_part])], "model__vae": str(parts["vae"])}
    cfg = _config(tmp_path / "out", data, base, schedule__max_steps=24, optimizer__lr=case.lr,
                  flow__timestep_sampling="uniform", network__train_text_encoder=kind == "folder", **extra)
    summary, rep, trainer = _run(cfg)
    assert trainer.session.model.family == case.family
    if kind == "folder":  # asked to train the text encoder: it stays frozen, and the log says so
        assert any(case.frozen in w for w in rep.warnings), rep.warnings
        assert not any(p.requires_grad for p in trainer.session.model.text_encoders[0].parameters())
    losses = [s.loss for s in rep.steps]
    assert len(losses) == 24
    assert sum(losses[-6:]) / 6 < sum(losses[:6]) / 6, losses
    tensors, meta = read_lora(summary.lora_path)
    assert any(k.startswith(case.kohya_key) for k in tensors)  # output.format kohya
    assert {k: meta[k] for k in case.metadata} == case.metadata


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_a_stopped_run_resumes_bit_exactly(tmp_path, fam, precision):
    data = _images(tmp_path / "data")
    common = {"schedule__max_steps": 4, "precision__training": precision}
    straight, straight_rep, _ = _run(_config(tmp_path / "a", data, fam["folder"], **common))
    control = Control()
    first_rep = StopAt(control, 2)
    first, _, _ = _run(_config(tmp_path / "b", data, fam["folder"], **common), first_rep, control)
    assert first.status == "stopped" and first.steps == 2
    second, second_rep, _ = _run(_config(tmp_path / "b", data, fam["folder"], schedule__resume_from=first.state_path,
                                         **common))
    assert [s.loss for s in straight_rep.steps] == [s.loss for s in first_rep.steps + second_rep.steps]
    a, _ = read_lora(straight.lora_path)
    b, _ = read_lora(second.lora_path)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_four_bit_frozen_weights_train(tmp_path, fam):
    pytest.importorskip("bitsandbytes")
    case = fam["case"]
    data = _images(tmp_path / "data", 1)
    cfg = _config(tmp_path / "out", data, fam["folder"], schedule__max_steps=16, optimizer__lr=case.lr,
                  precision__training="bf16", precision__base_weights="nf4", flow__timestep_sampling="uniform")
    summary, rep, trainer = _run(cfg)
    quantised = [n for n, m in trainer.session.model.denoiser.named_modules() if type(m).__name__ == "Linear4bit"]
    assert any(case.quantised in n for n in quantised)
    assert not any(n.startswith(case.kept) for n in quantised)  # the family's skip list stays bf16
    losses = [s.loss for s in rep.steps]
    assert all(torch.isfinite(torch.tensor(losses))) and sum(losses[-4:]) / 4 < sum(losses[:4]) / 4, losses


def test_the_kohya_file_merges_by_comfyuis_rules_to_what_the_run_trained(tmp_path, fam):
    case = fam["case"]
    base = case.helper.build(seed=3).transformer.state_dict()
    cfg = _config(tmp_path / "out", _images(tmp_path / "data"), fam["folder"], schedule__max_steps=3,
                  optimizer__lr=1e-2, network__target_modules="attention_ff_proj")
    summary, _rep, trainer = _run(cfg)
    tensors, _meta = read_lora(summary.lora_path)
    comfy_model = {f"diffusion_model.{k}": v for k, v in case.to_original(base).items()}
    merged, loaded = comfy_reader.merge(comfy_model, tensors)
    assert loaded.not_loaded == [] and len(loaded.patches) == case.patches
    trained = {f"{n}.weight": layer.get_delta_weight(ADAPTER).detach().float()
               for n, layer in lora_layers(trainer.session.model.denoiser).items()}
    assert any(d.abs().max() > 0 for d in trained.values())
    expected = case.to_original({k: v + trained.get(k, 0) for k, v in base.items()}, prefix="diffusion_model.")
    for k, v in expected.items():
        torch.testing.assert_close(merged[k], v, rtol=0, atol=1e-5, msg=k)


def test_validation_numerics_samples_and_the_run_history(tmp_path, fam):
    from guitrainer.core.runs.store import RunStore
    from guitrainer.engine.recording import recording

    db = tmp_path / "runs.sqlite3"
    cfg = _config(tmp_path / "out", _images(tmp_path / "data", 6), fam["folder"], schedule__max_steps=4,
                  validation__split=0.34, validation__every_n_steps=2, precision__training="bf16",
                  precision__numerics_every=2, sampling__prompts=["a photo of shape 1"], sampling__every_n_steps=4,
                  sampling__steps=2, sampling__size=64, sampling__guidance_scale=3.0)
    rep = NullReporter()
    torch.set_num_threads(1)
    with recording(rep, cfg, source="test", store_path=db) as rec:
        trainer = Trainer(cfg, rec.reporter)
        rec.attach(trainer)
        summary = trainer.run()
        rec.finish(summary)
    assert summary.status == "finished", summary.message
    scored = [s for s in rep.steps if s.validation_loss is not None]
    assert scored and all(s.validation_loss > 0 for s in scored)
    blocks = [name for name, _ in next(s for s in rep.steps if s.headroom).headroom]
    assert any(b.startswith("transformer.block.0.") for b in blocks), blocks
    assert any(b.startswith(fam["case"].second_stack) for b in blocks), blocks
    assert [s.step for s in rep.samples] == [4] and Image.open(rep.samples[0].path).size == (64, 64)
    with RunStore(db) as store:
        (run,) = store.list_runs()
        assert store.run(run.id).row.status == "finished" and store.run(run.id).row.steps == 4


def test_half_the_blocks_in_ram_train_the_same_lora(tmp_path, fam, monkeypatch):
    from helpers.offload_poison import PoisonTransport

    from guitrainer.engine import offload

    monkeypatch.setitem(offload.TRANSPORTS, "cpu", PoisonTransport)
    data = _images(tmp_path / "data")
    common = {"schedule__max_steps": 3, "precision__training": "fp32", "precision__gradient_checkpointing": True}
    plain, plain_rep, _ = _run(_config(tmp_path / "plain", data, fam["folder"], **common))
    summary, rep, trainer = _run(_config(tmp_path / "off", data, fam["folder"], precision__offload_blocks=0.5, **common))
    assert trainer.session.offloader is not None and trainer.session.offloader.stats.offloads > 0
    assert [s.loss for s in rep.steps] == [s.loss for s in plain_rep.steps]
    a, _ = read_lora(plain.lora_path)
    b, _ = read_lora(summary.lora_path)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_the_precision_lab_measures_fp32_and_bf16(tmp_path, fam):
    from guitrainer.engine.lab.precision_lab import compare_precisions

    cfg = _config(tmp_path / "out", _images(tmp_path / "data"), fam["folder"])
    report = compare_precisions(cfg, [Candidate("fp32"), Candidate("bf16")], steps=1, warmup=1,
                                store=MeasurementStore(tmp_path / "measured.json"))
    got = {r.candidate.training: r for r in report.results}
    assert got["fp32"].status == "ran" and got["bf16"].status == "ran", [(r.candidate, r.reason) for r in report.results]
    assert got["bf16"].loss_drift is not None


def test_check_reads_the_model_and_prints_its_advice(tmp_path, fam, capsys):
    from guitrainer.cli import main
    from guitrainer.config.families import FAMILY_LABELS

    base = fam["folder"]
    code = main(["--preset", "demo", "--set", f"model.base={base}", "--set", "model.family=auto",
                 "--set", "network.train_text_encoder=false", "--set", "network.type=lora",
                 "--set", f"output.folder={tmp_path / 'out'}", "--set", "precision.training=fp16", "--check"])
    out, err = capsys.readouterr()
    assert code in (0, 1), err
    assert f'base = "{base}"' in out and FAMILY_LABELS[fam["case"].family] in out + err
