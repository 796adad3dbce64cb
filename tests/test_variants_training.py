"""Network variants in the trainer: the demo model trains each type, the file is what the model holds,
resume continues exactly, and a file continues a fresh network (issue 21 #5)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from helpers import demo_cfg, lycoris_reader
from safetensors.torch import load_file

from guitrainer.core.events import NullReporter
from guitrainer.engine.network import variants
from guitrainer.engine.trainer import Trainer

pytestmark = pytest.mark.slow  # every test here trains the demo model

TYPES = ("locon", "loha", "lokr", "dora")


def _cfg(out: Path, kind: str, **settings: object):
    base: dict[str, object] = dict(
        network__type=kind, network__rank=4, network__alpha=2.0, network__conv_rank=2, network__conv_alpha=3.0,
        network__train_text_encoder=True, optimizer__lr=1e-2,
    )
    return demo_cfg(out, **{**base, **settings})


def _base_copy(trainer: Trainer):
    """Fresh (un-injected) copies of the trainer's base model, to read the file against."""
    from guitrainer.engine.models.loading import load_base_model

    m = load_base_model(trainer.config.model)
    return m.denoiser.float(), [te.float() for te in m.text_encoders]


@pytest.mark.parametrize("kind", TYPES)
def test_a_trained_variant_file_is_the_models_weights_and_resume_is_exact(tmp_path, kind):
    torch.set_num_threads(1)
    straight = Trainer(_cfg(tmp_path / "a", kind, schedule__max_steps=3))
    s1 = straight.run()
    assert s1.status == "finished", s1.message
    sd = load_file(s1.lora_path)
    unet, tes = _base_copy(straight)
    merged, consumed = lycoris_reader.merged_weights(sd, unet, tes)
    assert consumed == set(sd)
    trained = straight.session.model
    groups = [(unet, trained.denoiser), *zip(tes, trained.text_encoders)]
    count = 0
    for clean_model, model in groups:
        for name, layer in variants.adapter_layers(model).items():
            clean = clean_model.get_submodule(name)
            expected = clean.weight.detach().float() + variants.effective_delta(layer)
            assert torch.allclose(merged[clean], expected, atol=1e-5, rtol=1e-5), name
            count += 1
    assert count == len(merged) and any(variants.is_conv_kernel(m) for m in merged)

    # two steps, then resumed to three: the same file as three steps in one go
    first = Trainer(_cfg(tmp_path / "b", kind, schedule__max_steps=2)).run()
    assert first.status == "finished", first.message
    resumed = Trainer(_cfg(tmp_path / "b", kind, schedule__max_steps=3, schedule__resume_from=first.state_path)).run()
    assert resumed.status == "finished" and resumed.steps == 3, resumed.message
    again = load_file(resumed.lora_path)
    assert set(again) == set(sd)
    for key, value in sd.items():
        assert torch.allclose(again[key], value, atol=1e-6, rtol=1e-5), key


@pytest.mark.parametrize("kind", TYPES)
def test_continue_from_a_file_of_the_same_type_starts_from_its_weights(tmp_path, kind):
    torch.set_num_threads(1)
    first = Trainer(_cfg(tmp_path / "a", kind, schedule__max_steps=2)).run()
    assert first.status == "finished", first.message
    rep = NullReporter()
    cont = Trainer(_cfg(tmp_path / "b", kind, schedule__max_steps=1, model__init_lora=first.lora_path,
                        optimizer__lr=1e-30, optimizer__text_encoder_lr=1e-30), rep)
    assert cont.run().status == "finished"
    assert not rep.warnings, rep.warnings  # every module of the file found its layer
    again = load_file(Path(cont.lora_path))
    before = load_file(first.lora_path)
    assert set(again) == set(before)
    for key, value in before.items():  # lr 1e-30: the continued network is the file's
        assert torch.allclose(again[key], value, atol=1e-6, rtol=1e-5), key
