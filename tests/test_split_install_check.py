"""The start check and ``--check`` look at a split install's files as one model (core/checks/inputs.py, through the
family's ``check_parts``): a complete set passes, a missing or wrong part is named with the file it concerns."""

from __future__ import annotations

import pytest

from guitrainer.config import TrainingConfig
from guitrainer.core.checks.inputs import split_install_problems

pytestmark = pytest.mark.slow  # builds a tiny Flux (a few seconds)


@pytest.fixture(scope="module")
def split(tmp_path_factory):
    from helpers import tiny_flux

    return tiny_flux.save_split(tiny_flux.build(), tmp_path_factory.mktemp("flux_split"))


def _cfg(base, text_encoders, vae="") -> TrainingConfig:
    cfg = TrainingConfig()
    cfg.model.family, cfg.model.base = "auto", str(base)
    cfg.model.text_encoders, cfg.model.vae = [str(t) for t in text_encoders], str(vae)
    return cfg


def test_the_four_files_of_a_flux_install_make_one_model(split):
    cfg = _cfg(split["transformer"], [split["clip_l"], split["t5"]], split["vae"])
    assert [p for p in split_install_problems(cfg) if p.level == "error"] == []


def test_a_missing_part_and_a_wrong_one_are_named(split):
    no_vae = split_install_problems(_cfg(split["transformer"], [split["clip_l"], split["t5"]]))
    assert any(p.level == "error" and "VAE" in p.message for p in no_vae), no_vae
    twice = split_install_problems(_cfg(split["transformer"], [split["clip_l"], split["clip_l"]], split["vae"]))
    assert any(p.level == "error" and ("T5" in p.message or "twice" in p.message) for p in twice), twice


def test_the_transformer_file_alone_says_which_files_to_add(split):
    alone = split_install_problems(_cfg(split["transformer"], []))
    assert alone and all(p.field == "model.base" for p in alone)
    assert any("T5" in p.message for p in alone)


def test_text_encoder_files_beside_a_one_file_family_are_refused(tmp_path, split):
    import torch
    from safetensors.torch import save_file

    sd15 = tmp_path / "sd15.safetensors"  # an SD 1.x checkpoint's key layout is enough for detection
    save_file({"model.diffusion_model.input_blocks.0.0.weight": torch.zeros(4, 4, 3, 3),
               "cond_stage_model.transformer.text_model.embeddings.position_ids": torch.zeros(1, 77)}, str(sd15))
    found = split_install_problems(_cfg(sd15, [split["clip_l"]]))
    assert [p.field for p in found] == ["model.text_encoders"]


def test_the_flux_vae_file_of_a_split_install_is_no_vae_problem(split):
    from guitrainer.core.checks.inputs import vae_problems

    cfg = _cfg(split["transformer"], [split["clip_l"], split["t5"]], split["vae"])
    assert [p for p in vae_problems(cfg) if p.level == "error"] == []
