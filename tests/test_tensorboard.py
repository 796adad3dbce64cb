"""TensorBoard event files: written beside the output when asked, read back by tensorboard's own reader."""

from __future__ import annotations

import pytest
from helpers.configs import demo_cfg

from guitrainer.core.events import NullReporter
from guitrainer.core.runs.store import RunStore
from guitrainer.engine.recording import recording

DEMO = "Demo — tiny built-in model (CPU, about a minute)"


def _events(folder):
    event_accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    acc = event_accumulator.EventAccumulator(str(folder), size_guidance={event_accumulator.SCALARS: 0})
    acc.Reload()
    return acc


def _demo_run(tmp_path, tensorboard: bool):
    from guitrainer.engine.trainer import Trainer

    cfg = demo_cfg(tmp_path / "out", schedule__max_steps=8)
    cfg.precision.save = "fp16"
    cfg.output.tensorboard = tensorboard
    inner = NullReporter()
    with recording(inner, cfg, source="test", store_path=tmp_path / "runs.sqlite3") as rec:
        trainer = Trainer(cfg, rec.reporter)
        rec.attach(trainer)
        summary = trainer.run()
        rec.finish(summary)
    assert summary.status == "finished", summary.message
    return rec, inner


@pytest.mark.slow
def test_event_files_hold_the_same_losses_as_the_run(tmp_path):
    rec, inner = _demo_run(tmp_path, tensorboard=True)
    logs = tmp_path / "out" / "logs"
    (folder,) = logs.iterdir()  # <output>/logs/<name>_<time>: kohya's layout
    assert folder.name.startswith("demo_lora_") and str(folder) == rec.tensorboard_folder
    acc = _events(folder)
    assert {"loss/current", "lr/unet", "time/seconds_per_step"} <= set(acc.Tags()["scalars"])
    assert "loss/scale" not in acc.Tags()["scalars"]  # fp32: no GradScaler, nothing written
    loss = acc.Scalars("loss/current")
    reported = [(m.step, m.loss) for m in inner.steps]
    assert len(reported) == 8
    assert [e.step for e in loss] == [s for s, _ in reported]
    for event, (_, value) in zip(loss, reported, strict=True):
        assert event.value == pytest.approx(value, rel=1e-6)  # stored as float32
    assert [e.value for e in acc.Scalars("lr/unet")] == pytest.approx([m.lr for m in inner.steps], rel=1e-6)
    with RunStore(tmp_path / "runs.sqlite3") as store:
        kinds = {a["kind"]: a["path"] for a in store.artifacts(rec.run_id)}
        assert kinds["logs"] == str(folder)  # listed with the run's files (deleting the run can remove it)


@pytest.mark.slow
def test_no_event_files_unless_asked(tmp_path):
    _demo_run(tmp_path, tensorboard=False)
    assert not (tmp_path / "out" / "logs").exists()


def test_output_page_has_one_switch_for_it_off_by_default(qtbot):
    from PySide6.QtCore import QPoint, Qt

    from guitrainer.config import TrainingConfig
    from guitrainer.ui.binding import ConfigBinding
    from guitrainer.ui.output.page import OutputPage

    binding = ConfigBinding(TrainingConfig())
    page = OutputPage(binding)
    qtbot.addWidget(page)
    page.show()
    qtbot.waitExposed(page)
    switch = page.tensorboard_switch
    assert not switch.isChecked() and binding.config.output.tensorboard is False
    assert "logs/" in switch.toolTip()
    qtbot.mouseClick(switch, Qt.MouseButton.LeftButton, pos=QPoint(8, switch.height() // 2))
    assert binding.config.output.tensorboard is True
    assert "tensorboard = true" in binding.config.to_toml()
