"""Continue from LoRA is checked before Train, in the app's words, and agrees with what the engine's loader does."""

from __future__ import annotations

import copy

import pytest
from helpers import config_with
from PySide6.QtCore import QSettings
from PySide6.QtWidgets import QFileDialog
from tiny_models import build_tiny

from guitrainer.config import NetworkConfig
from guitrainer.core.checks.start import check_start
from guitrainer.core.model.init_lora import init_lora_problem
from guitrainer.engine import export
from guitrainer.engine.network import lora, lycoris_keys, variants

TYPES = ("lora", "locon", "loha", "lokr", "dora")


def _network(kind: str) -> NetworkConfig:
    return NetworkConfig(type=kind, rank=4, alpha=2.0, conv_rank=2, conv_alpha=2.0, lokr_factor=4)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """A file of each type from the tiny SD 1.5, and the plain model to continue them on."""
    from diffusers import UNet2DConditionModel
    from transformers import CLIPTextModel

    folder = build_tiny(tmp_path_factory.mktemp("sd15"), "sd15")
    unet = UNet2DConditionModel.from_pretrained(folder / "unet")
    te = CLIPTextModel.from_pretrained(folder / "text_encoder")
    out = {}
    for kind in TYPES:
        u, t = copy.deepcopy(unet), copy.deepcopy(te)
        variants.inject_unet(u, _network(kind))
        variants.inject_text_encoder(t, _network(kind))
        path = tmp_path_factory.mktemp(kind) / f"{kind}.safetensors"
        export.export_lora(path, u, [t], save_precision="fp32")
        out[kind] = path
    return out, (unet, te)


def _engine_accepts(path, network_type: str, base) -> bool:
    """What the run's set-up does with the file (engine/session.py's _continue_from), on a fresh network."""
    unet, te = copy.deepcopy(base[0]), copy.deepcopy(base[1])
    variants.inject_unet(unet, _network(network_type))
    variants.inject_text_encoder(te, _network(network_type))
    try:
        if network_type != "lora":
            return lycoris_keys.load_variant_file(lora.read_lora_as_kohya(path)[0], unet, [te], skipped=[]) > 0
        return lora.load_kohya_lora(path, unet, [te], strict=False, skipped=[]) > 0
    except lora.LoraFormatError:
        return False


@pytest.mark.slow
@pytest.mark.parametrize("file_kind", TYPES)
def test_the_check_before_train_agrees_with_the_engines_loader(files, file_kind):
    paths, base = files
    for network_type in TYPES:
        problem = init_lora_problem(str(paths[file_kind]), network_type)
        assert (problem == "") == _engine_accepts(paths[file_kind], network_type, base), (file_kind, network_type, problem)


@pytest.mark.slow
def test_a_wrong_type_is_named_with_the_apps_words_and_the_way_out(files):
    paths, _ = files
    problem = init_lora_problem(str(paths["lokr"]), "dora")
    assert "is a LoKr file, but Network type (Training page) is DoRA" in problem
    assert "set Network type to LoKr" in problem and "clear Continue from LoRA" in problem
    assert "set Network type to LoRA or LoCon or DoRA" in init_lora_problem(str(paths["lora"]), "loha")
    cfg = config_with(model__init_lora=str(paths["lokr"]), network__type="dora")
    assert any("is a LoKr file" in e for e in check_start(cfg).errors)  # before the model loads
    resuming = config_with(model__init_lora=str(paths["lokr"]), network__type="dora", schedule__resume_from="/x")
    assert not any("LoKr file" in e for e in check_start(resuming).errors)  # a resume continues its state


def test_missing_and_unreadable_files_are_named(tmp_path):
    assert "was not found" in init_lora_problem(str(tmp_path / "gone.safetensors"), "lora")
    bad = tmp_path / "bad.safetensors"
    bad.write_text("not a safetensors file at all")
    assert "cannot be read as a .safetensors LoRA" in init_lora_problem(str(bad), "lora")
    assert init_lora_problem("", "lora") == ""


@pytest.mark.slow
def test_the_model_page_says_it_and_blocks_train_and_its_file_button_picks(files, qtbot, tmp_path, monkeypatch):
    from helpers import fake_device
    from PySide6.QtCore import Qt

    from guitrainer.ui.binding import ConfigBinding
    from guitrainer.ui.model.page import ModelPage

    paths, _ = files
    binding = ConfigBinding()
    settings = QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat)
    page = ModelPage(binding, settings=settings, probe=lambda: fake_device("t4"), auto_probe=False)
    qtbot.addWidget(page)
    page.show()
    monkeypatch.setattr(QFileDialog, "getOpenFileName", staticmethod(lambda *a, **k: (str(paths["loha"]), "")))
    with qtbot.waitSignal(page.errors_changed) as blocker:
        qtbot.mouseClick(page.init_lora.file_button, Qt.MouseButton.LeftButton)
    assert binding.get("model.init_lora") == str(paths["loha"])
    assert blocker.args == [True] and "is a LoHa file" in page.error_text()
    assert page.init_lora.status.isVisible() and "is a LoHa file" in page.init_lora.status.text()
    with qtbot.waitSignal(page.errors_changed) as blocker:
        binding.set("network.type", "loha")  # what the message says to do
    assert blocker.args == [False] and not page.init_lora.status.isVisible()
