"""Output page: file-name preview, fp16 advice, metadata fields, and the Verify button (real check, demo model)."""

from __future__ import annotations

from pathlib import Path

import pytest

from guitrainer.config import TrainingConfig
from guitrainer.ui.binding import ConfigBinding, bound_editors
from guitrainer.ui.output.page import OutputPage


@pytest.fixture
def page(qtbot, tmp_path):
    cfg = TrainingConfig()
    cfg.output.folder = str(tmp_path / "out")
    cfg.output.name = "ink_style"
    cfg.model.base = "demo"
    binding = ConfigBinding(cfg)
    p = OutputPage(binding)
    qtbot.addWidget(p)
    p.resize(760, 1000)
    p.show()
    return p


def test_preview_follows_name_format_and_schedule(page, tmp_path):
    out = tmp_path / "out"
    assert page.preview_paths() == [str(out / "ink_style.safetensors"), str(out / "ink_style_state")]
    editors = bound_editors(page)
    editors["output.name"].setText("ink2")
    editors["output.name"].textEdited.emit("ink2")
    assert "ink2.safetensors" in page.preview.text()
    combo = editors["output.format"]
    combo.setCurrentIndex(combo.findData("diffusers"))
    assert page.binding.get("output.format") == "diffusers"
    assert page.preview_paths()[0] == str(out / "ink2")
    page.binding.set("output.save_every_n_epochs", 5)
    assert page.preview_paths()[1] == str(out / "ink2-000005") and "Every 5 epochs" in page.preview.text()
    for name in ("title", "author", "description", "trigger_words", "license", "keep_last", "folder"):
        assert f"output.{name}" in editors
    assert "precision.save" in editors


def test_fp16_overflow_advice_switches_to_bf16(page, qtbot):
    page.binding.set("precision.save", "fp16")
    assert not page.advice_label.isVisible()
    page.set_fp16_overflow({"lora_unet_mid_block_attentions_0_proj_out.lora_up.weight": 1.2e6})
    assert page.advice_label.isVisible() and "65504" in page.advice_label.text()
    qtbot.mouseClick(page.advice_button, __import__("PySide6.QtCore", fromlist=["Qt"]).Qt.MouseButton.LeftButton)
    assert page.binding.get("precision.save") == "bf16" and not page.advice_label.isVisible()
    page.note_warning("[fp16 save] 1 tensor of the LoRA hold values beyond fp16's ±65504 ... saved as bf16 instead.")
    assert page.advice_label.isVisible() and page.advice_label.text().startswith("1 tensor")
    page.note_warning("something else")  # other warnings are not this page's business


@pytest.mark.slow
def test_verify_button_checks_a_real_file(page, qtbot, tmp_path, artifacts_dir):
    import torch

    from guitrainer.config import ModelConfig
    from guitrainer.engine import export as X
    from guitrainer.engine.models.loading import load_base_model
    from guitrainer.engine.network import lora as L

    torch.set_num_threads(1)
    m = load_base_model(ModelConfig(base="demo"))
    L.inject_unet_lora(m.denoiser, 4, 8.0)
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in L.lora_parameters(m.denoiser):
            p.copy_(torch.randn(p.shape, generator=g) * 0.1)
    path = tmp_path / "check.safetensors"
    X.export_lora(path, m.denoiser, save_precision="fp16", alpha=8.0)
    page.verify_path.setText(str(path))
    with qtbot.waitSignal(page.verified, timeout=60000) as sig:
        page.verify_button.click()
        assert not page.verify_button.isEnabled()
    qtbot.waitUntil(lambda: "diffusers reads this file" in page.verify_result.text(), timeout=5000)
    assert sig.args[0].ok and "every key used" in page.verify_result.text()
    assert "<b>check.safetensors</b>" in page.verify_result.text()  # the result names the file it is about
    assert "lora: ComfyUI / Forge, A1111, LyCORIS, diffusers, kohya&#x27;s networks.lora read it." in page.verify_result.text()
    assert page.verify_button.isEnabled()
    page.set_fp16_overflow({"lora_unet_down_blocks_0_attentions_0_proj_in.lora_up.weight": 7.1e4})
    page.grab().save(str(artifacts_dir / "output_page.png"))
    assert Path(artifacts_dir / "output_page.png").stat().st_size > 0


def test_verify_reports_a_broken_file_in_plain_words(page, qtbot, tmp_path):
    bad = tmp_path / "broken.safetensors"
    bad.write_bytes(b"not a safetensors file")
    page.start_verify(str(bad))
    qtbot.waitUntil(lambda: not page.verify_running, timeout=60000)
    assert "Could not check the file" in page.verify_result.text() and "not a readable" in page.verify_result.text()


def test_a_result_goes_when_another_file_is_named_and_a_new_run_clears_the_last_save_warning(page, qtbot, tmp_path):
    """After the next run the field names the new file: the last file's verdict must not stand beside it."""
    from PySide6.QtCore import Qt

    page._show_result(str(tmp_path / "old.safetensors"), True, "diffusers reads this file")
    page.verify_path.setText(str(tmp_path / "old.safetensors"))
    assert "old.safetensors" in page.verify_result.text()
    page.verify_path.clear()
    qtbot.keyClicks(page.verify_path, str(tmp_path / "new.safetensors"))  # typed, or set by the next run
    assert page.verify_result.text() == ""
    page.show_last_run(type("Summary", (), {"lora_path": str(tmp_path / "newer.safetensors")})())
    assert page.verify_result.text() == ""

    page.note_warning("[fp16 save] 3 tensors lose small values to zero in fp16; bf16 or fp32 keep them.")
    assert page.advice_label.isVisible()
    page.begin_run(object())  # the next run starts (the main window wires the Training page's worker_started)
    assert not page.advice_label.isVisible()
    page.note_warning("[fp16 save] 1 tensor lose small values")  # that run's own warning shows again
    assert page.advice_label.isVisible()
    qtbot.mouseClick(page.advice_button, Qt.MouseButton.LeftButton)
    assert page.binding.get("precision.save") == "bf16"


@pytest.mark.slow
def test_the_preview_names_the_running_runs_files_and_then_what_it_wrote(page, qtbot, tmp_path):
    """One run, one number on the page too: while a run goes on, "This run writes" names its own files (not the
    next run's), and after it "Last run wrote" lists them; the preview goes on to the next run's (issue 27, item 9)."""
    from guitrainer.ui.workers import TrainingWorker
    from tests.helpers.configs import demo_cfg

    out = tmp_path / "out"
    out.mkdir()
    (out / "ink_style.safetensors").write_bytes(b"an earlier run's LoRA")
    page.binding.replace(demo_cfg(out, output__name="ink_style", schedule__max_steps=2, sampling__every_n_steps=1,
                                  sampling__steps=2))  # fmt: skip
    assert page.preview_title.text() == "Next run writes"
    assert page.preview_paths()[:2] == [str(out / "ink_style_2.safetensors"), str(out / "ink_style_2_state")]
    worker = TrainingWorker(page.binding.config, record=False)
    page.begin_run(worker)
    during: list[tuple[str, list[str]]] = []
    worker.checkpoint_saved.connect(lambda _s: during.append((page.preview_title.text(), page.preview_paths())))
    summary = worker.work()  # in this thread: the signals reach the page at once
    assert summary.status == "finished", summary.message
    # while it ran, its own files were named, even after they existed (the next run's names are _3)
    assert during and all(title == "This run writes" for title, _ in during)
    assert all(paths[:2] == [str(out / "ink_style_2.safetensors"), str(out / "ink_style_2_state")] for _, paths in during)
    page.show_last_run(summary)
    text = page.last_run_label.text()
    assert str(out / "ink_style_2.safetensors") in text and "<b>state</b> ink_style_2_state" in text
    assert "2 sample images" in text and str(out / "ink_style_2_state") in page.last_run_label.toolTip()
    assert page.preview_title.text() == "Next run writes"
    assert page.preview_paths()[:2] == [str(out / "ink_style_3.safetensors"), str(out / "ink_style_3_state")]
    assert page.preview_paths()[2] == str(out / "samples" / "ink_style_3_step*_*.png")
