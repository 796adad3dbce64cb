"""The Demo as a new user meets it, in a real window: the Demo preset, "Use the demo images" on the Dataset page,
Train, then the Samples tab: the base model's picture of each prompt beside the LoRA's, and what the Demo's measure
reads in them. The screenshot goes to ``artifacts/screenshots/demo_samples.png`` (``docs/demo_samples.png`` is one)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from PySide6.QtWidgets import QComboBox, QPushButton, QTabWidget
from xinput import choose_in_combo, open_page, pump, train_and_wait, wait_for

from guitrainer.config.presets import DEMO_PRESET
from guitrainer.core.demo.shapes import CONCEPT, CONTROL_PROMPT

SHOT = Path(__file__).resolve().parent.parent.parent / "artifacts" / "screenshots" / "demo_samples.png"


@pytest.mark.slow
def test_demo_run_shows_base_and_lora_side_by_side(main_window, xin, tmp_path, monkeypatch):  # noqa: ANN001
    window = main_window
    monkeypatch.setenv("GUITRAINER_HOME", str(tmp_path / "home"))  # the demo images are drawn fresh
    choose_in_combo(xin, window.findChild(QComboBox, "preset_combo"), DEMO_PRESET)
    window.binding.set("output.folder", str(tmp_path / "out"))
    open_page(window, xin, "Dataset")
    page = window.dataset_page
    xin.click(page.findChild(QPushButton, "use_demo_images"))
    wait_for(lambda: len(page.items) == 12, 20, lambda: f"the 12 demo images, got {len(page.items)}")

    train_and_wait(window, xin, timeout_s=400)
    training = window.training_page
    tabs = training.findChild(QTabWidget, "training_tabs")
    bar = tabs.tabBar()
    xin.click(bar, bar.tabRect(tabs.indexOf(training.samples_tab)).center())
    wait_for(lambda: tabs.currentWidget() is training.samples_tab, 5, "the Samples tab")
    view = training.before_after
    wait_for(lambda: len(view.measures()) == 2, 10, "both prompts measured")
    verdicts = {p.prompt: p.verdict for p in view.measures()}
    assert verdicts == {CONCEPT.prompt: "learned", CONTROL_PROMPT: "kept"}, [p.describe() for p in view.measures()]
    assert [r.before_caption.text() for r in view.rows] == ["step 0: the base model"] * 2
    wait_for(lambda: all(r.measure.isVisible() and r.after.isVisible() for r in view.rows), 5, "the rows shown")
    SHOT.parent.mkdir(parents=True, exist_ok=True)
    pump(300)
    subprocess.run(["import", "-window", "root", str(SHOT)], timeout=30, check=True)
