"""Make docs/numerics_tab.png and docs/save_report.png from a real demo run (CPU, fp16 AMP, ~1 minute).

The run is the Demo preset with the numerics check every 3 steps. To give the pictures something to show,
two things are injected from outside the engine, as the tests do:

* a forward hook multiplies the output of ``up_blocks.1.attentions.0.transformer_blocks.0.attn2.to_v`` by a
  factor that grows 10x every 12 steps, until it overflows fp16: that block's headroom falls through 4x (the
  tab turns orange), the step is skipped and named; the factor then stays at its value of 3 steps before;
* after the last step four values of one LoRA weight are set to 150,000 before the final fp16 save, so the
  save check finds values over 65,504 and writes bf16 instead.

    QT_QPA_PLATFORM=offscreen .venv/bin/python docs/numerics_screens.py
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from guitrainer.config.presets import DEFAULT_PRESET, PresetStore  # noqa: E402
from guitrainer.core.events import NullReporter, StepMetrics  # noqa: E402

TO_V = "up_blocks.1.attentions.0.transformer_blocks.0.attn2.to_v"
STEPS = 60


class Ramp(NullReporter):
    """Grows ``TO_V``'s output until a step is skipped; spoils one LoRA weight before the final save."""

    def __init__(self) -> None:
        super().__init__()
        self.trainer = None
        self.hold: float | None = None  # after the skip: the factor of a few steps before it

    def on_status(self, text: str) -> None:
        super().on_status(text)
        if text.startswith("training "):
            module = self.trainer.session.model.unet.get_submodule(TO_V)
            module.register_forward_hook(self._ramp)

    def _ramp(self, _module, _args, out):  # noqa: ANN001, ANN202
        step = self.trainer.progress.global_step + 1
        return out * (self.hold if self.hold is not None else 10 ** (step / 12))

    def on_step(self, metrics: StepMetrics) -> None:
        super().on_step(metrics)
        if metrics.skipped and self.hold is None:
            self.hold = 10 ** ((metrics.step - 3) / 12)  # headroom stays under 4x: the tab stays orange
        if metrics.step == STEPS:
            unet = self.trainer.session.model.unet
            weight = unet.get_submodule("mid_block.attentions.0.transformer_blocks.0.attn1.to_q").lora_B["default"].weight
            with torch.no_grad():
                weight[:4, 0] = 1.5e5  # four values fp16 cannot hold


def run() -> Ramp:
    from guitrainer.engine.trainer import Trainer

    torch.set_num_threads(1)
    cfg = PresetStore().get(DEFAULT_PRESET).config()
    cfg.output.folder = tempfile.mkdtemp(prefix="numerics_screens_")
    cfg.precision.training = "fp16"
    cfg.precision.save = "fp16"
    cfg.precision.cache_latents = True
    cfg.precision.cache_to_disk = False
    cfg.precision.numerics_every = 3
    cfg.schedule.max_steps = STEPS
    rep = Ramp()
    tr = Trainer(cfg, rep)
    rep.trainer = tr
    summary = tr.run()
    print(summary.status, summary.message, f"skipped {summary.skipped_steps}")
    return rep


def main() -> None:
    rep = run()
    from PySide6.QtCore import QSettings
    from PySide6.QtWidgets import QApplication

    from guitrainer.config.presets import PresetStore as Store
    from guitrainer.ui.window.main_window import MainWindow

    app = QApplication.instance() or QApplication([])
    tmp = Path(tempfile.mkdtemp(prefix="numerics_ui_"))
    settings = QSettings(str(tmp / "settings.ini"), QSettings.Format.IniFormat)
    w = MainWindow(store=Store(user_dir=tmp / "presets"), settings=settings)
    w.resize(1400, 900)
    w.show()
    page = w.training_page
    w.nav.setCurrentRow(w.pages.index(page))
    from guitrainer.ui.training.numerics_chart import add_numerics_tab

    _ = page.charts  # built on first use
    chart = add_numerics_tab(page.tabs, "fp16", every=3)  # what attach_numerics does when a run starts
    for m in rep.steps:
        page.charts.add(m)
        chart.add(m)
    chart.redraw()
    page.charts.redraw()
    page.tabs.setCurrentWidget(chart)
    app.processEvents()
    page.tabs.parentWidget().setSizes([260, 560])  # the charts / tabs splitter: room for the Numerics tab
    app.processEvents()
    w.grab().save(str(ROOT / "docs" / "numerics_tab.png"))
    (saved,) = [s for s in rep.saved if s.kind == "lora"]
    w.output_page.show_save_report(saved.save_report)
    w.nav.setCurrentRow(w.pages.index(w.output_page))
    app.processEvents()
    w.output_page.ensure_report_visible()
    app.processEvents()
    w.grab().save(str(ROOT / "docs" / "save_report.png"))
    print(saved.save_report.headline())
    w.dataset_page.shutdown()


if __name__ == "__main__":
    main()
