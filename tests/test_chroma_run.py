"""Chroma through the real Trainer on a tiny model: from a diffusers folder, one file and split files (the loss
falls); a stopped run resumes bit-exactly in fp32 and bf16; 4-bit (nf4) frozen weights train; half the blocks in
RAM train the same LoRA; the validation loss, the numerics monitor and the run history; the precision lab; --check;
and the LoRA file merges, by ComfyUI's rules, to exactly what the run trained."""

from __future__ import annotations

import pytest
import torch
from helpers import comfy_reader, demo_cfg, tiny_chroma
from helpers.doubles import StopAt
from PIL import Image

from guitrainer.core.events import Control, NullReporter
from guitrainer.core.precision.lab import Candidate
from guitrainer.core.precision.measurements import MeasurementStore
from guitrainer.engine.families.chroma import convert
from guitrainer.engine.families.chroma.family import Chroma
from guitrainer.engine.network.lora import ADAPTER, lora_layers, read_lora
from guitrainer.engine.trainer import Trainer

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def chroma(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tiny_chroma")
    tiny = tiny_chroma.build(seed=3)
    return {"tiny": tiny, "folder": tiny_chroma.save_diffusers(tiny, folder / "diffusers"),
            "config_dir": tiny_chroma.tiny_config_dir(tiny, folder / "configs"),
            "split": tiny_chroma.save_split(tiny, folder / "split"),
            "single": tiny_chroma.save_comfy_checkpoint(tiny, folder / "chroma-tiny-all.safetensors")}


@pytest.fixture
def chroma_configs(chroma, monkeypatch):
    """One file and split files take their configs from the tiny folder (the shipped ones are full size)."""
    monkeypatch.setattr(Chroma, "default_config_dir", lambda self: chroma["config_dir"])
    return chroma


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
def test_chroma_from_each_kind_of_files_trains_and_the_loss_falls(tmp_path, chroma_configs, kind):
    data = _images(tmp_path / "data", 1)  # one image, learnt again and again: its loss must fall
    extra = {}
    base = chroma_configs[kind]
    if kind == "split":
        parts = chroma_configs["split"]
        base = parts["transformer"]
        extra = {"model__text_encoders": [str(parts["t5"])], "model__vae": str(parts["vae"])}
    cfg = _config(tmp_path / "out", data, base, schedule__max_steps=24, optimizer__lr=3e-3,
                  flow__timestep_sampling="uniform", network__train_text_encoder=kind == "folder", **extra)
    summary, rep, trainer = _run(cfg)
    assert trainer.session.model.family == "chroma"
    if kind == "folder":  # asked to train the text encoder: T5 stays frozen, and the log says so
        assert any("T5-XXL stays frozen" in w for w in rep.warnings), rep.warnings
        assert not any(p.requires_grad for p in trainer.session.model.text_encoders[0].parameters())
    losses = [s.loss for s in rep.steps]
    assert len(losses) == 24
    assert sum(losses[-6:]) / 6 < sum(losses[:6]) / 6, losses
    tensors, meta = read_lora(summary.lora_path)
    assert any(k.startswith("lora_unet_double_blocks_0_img_attn_qkv") for k in tensors)
    assert meta["ss_base_model_version"] == "chroma" and meta["modelspec.architecture"] == "chroma/lora"
    assert meta["ss_apply_t5_attn_mask"] == "True"


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_a_stopped_chroma_run_resumes_bit_exactly(tmp_path, chroma, precision):
    data = _images(tmp_path / "data")
    common = {"schedule__max_steps": 4, "precision__training": precision}
    straight, straight_rep, _ = _run(_config(tmp_path / "a", data, chroma["folder"], **common))
    control = Control()
    first_rep = StopAt(control, 2)
    first, _, _ = _run(_config(tmp_path / "b", data, chroma["folder"], **common), first_rep, control)
    assert first.status == "stopped" and first.steps == 2
    second, second_rep, _ = _run(_config(tmp_path / "b", data, chroma["folder"], schedule__resume_from=first.state_path,
                                         **common))
    assert [s.loss for s in straight_rep.steps] == [s.loss for s in first_rep.steps + second_rep.steps]
    a, _ = read_lora(straight.lora_path)
    b, _ = read_lora(second.lora_path)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_four_bit_frozen_weights_train(tmp_path, chroma):
    pytest.importorskip("bitsandbytes")
    data = _images(tmp_path / "data", 1)
    cfg = _config(tmp_path / "out", data, chroma["folder"], schedule__max_steps=16, optimizer__lr=3e-3,
                  precision__training="bf16", precision__base_weights="nf4", flow__timestep_sampling="uniform")
    summary, rep, trainer = _run(cfg)
    quantised = [n for n, m in trainer.session.model.denoiser.named_modules() if type(m).__name__ == "Linear4bit"]
    assert any(".attn.to_q" in n for n in quantised)
    assert not any(n.startswith("distilled_guidance_layer") for n in quantised)  # the approximator stays bf16
    losses = [s.loss for s in rep.steps]
    assert all(torch.isfinite(torch.tensor(losses))) and sum(losses[-4:]) / 4 < sum(losses[:4]) / 4, losses


def test_the_lora_file_merges_by_comfyuis_rules_to_what_the_run_trained(tmp_path, chroma):
    tiny = tiny_chroma.build(seed=3)
    base = tiny.transformer.state_dict()
    cfg = _config(tmp_path / "out", _images(tmp_path / "data"), chroma["folder"], schedule__max_steps=3,
                  optimizer__lr=1e-2, network__target_modules="attention_ff_proj")
    summary, _rep, trainer = _run(cfg)
    tensors, _meta = read_lora(summary.lora_path)
    comfy_model = {f"diffusion_model.{k}": v for k, v in convert.diffusers_to_bfl(base).items()}
    merged, loaded = comfy_reader.merge(comfy_model, tensors)
    # every Linear of the blocks: double 2 x (2 qkv + 2 proj + 4 mlp), single 2 x (linear1 + linear2)
    assert loaded.not_loaded == [] and len(loaded.patches) == 2 * 8 + 2 * 2
    trained = {f"{n}.weight": layer.get_delta_weight(ADAPTER).detach().float()
               for n, layer in lora_layers(trainer.session.model.denoiser).items()}
    assert any(d.abs().max() > 0 for d in trained.values())
    expected = convert.diffusers_to_bfl({k: v + trained.get(k, 0) for k, v in base.items()}, prefix="diffusion_model.")
    for k, v in expected.items():
        torch.testing.assert_close(merged[k], v, rtol=0, atol=1e-5, msg=k)


def test_validation_numerics_and_the_run_history(tmp_path, chroma):
    from guitrainer.core.runs.store import RunStore
    from guitrainer.engine.recording import recording

    db = tmp_path / "runs.sqlite3"
    cfg = _config(tmp_path / "out", _images(tmp_path / "data", 6), chroma["folder"], schedule__max_steps=4,
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
    sampled = [s for s in rep.steps if s.headroom]
    blocks = [name for name, _ in sampled[0].headroom]
    assert any(b.startswith("transformer.block.0.") for b in blocks) and any(b.startswith("transformer.single.0.") for b in blocks), blocks
    assert [s.step for s in rep.samples] == [4] and Image.open(rep.samples[0].path).size == (64, 64)
    with RunStore(db) as store:
        (run,) = store.list_runs()
        assert store.run(run.id).row.status == "finished" and store.run(run.id).row.steps == 4


def test_half_the_blocks_in_ram_train_the_same_lora(tmp_path, chroma, monkeypatch):
    from helpers.offload_poison import PoisonTransport

    from guitrainer.engine import offload

    monkeypatch.setitem(offload.TRANSPORTS, "cpu", PoisonTransport)
    data = _images(tmp_path / "data")
    common = {"schedule__max_steps": 3, "precision__training": "fp32", "precision__gradient_checkpointing": True}
    plain, plain_rep, _ = _run(_config(tmp_path / "plain", data, chroma["folder"], **common))
    summary, rep, trainer = _run(_config(tmp_path / "off", data, chroma["folder"], precision__offload_blocks=0.5, **common))
    assert trainer.session.offloader is not None and trainer.session.offloader.stats.offloads > 0
    assert [s.loss for s in rep.steps] == [s.loss for s in plain_rep.steps]
    a, _ = read_lora(plain.lora_path)
    b, _ = read_lora(summary.lora_path)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_the_precision_lab_measures_fp32_and_bf16(tmp_path, chroma):
    from guitrainer.engine.lab.precision_lab import compare_precisions

    cfg = _config(tmp_path / "out", _images(tmp_path / "data"), chroma["folder"])
    report = compare_precisions(cfg, [Candidate("fp32"), Candidate("bf16")], steps=1, warmup=1,
                                store=MeasurementStore(tmp_path / "measured.json"))
    got = {r.candidate.training: r for r in report.results}
    assert got["fp32"].status == "ran" and got["bf16"].status == "ran", [(r.candidate, r.reason) for r in report.results]
    assert got["bf16"].loss_drift is not None


def test_check_reads_the_model_and_prints_its_advice(tmp_path, chroma, capsys):
    from guitrainer.cli import main

    base = chroma["folder"]
    code = main(["--preset", "demo", "--set", f"model.base={base}", "--set", "model.family=auto",
                 "--set", "network.train_text_encoder=false", "--set", "network.type=lora",
                 "--set", f"output.folder={tmp_path / 'out'}", "--set", "precision.training=fp16", "--check"])
    out, err = capsys.readouterr()
    assert code in (0, 1), err
    assert f'base = "{base}"' in out and "Chroma" in out + err
