"""The Demo's before / after in the app: the Samples tab, the Runs page, the Output page, "Use the demo images"."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QImage

from guitrainer.config import TrainingConfig
from guitrainer.core.demo.shapes import PALETTE, Drawing, draw
from guitrainer.core.events import SampleImage
from guitrainer.core.runs.store import RunStore
from guitrainer.ui.binding import ConfigBinding
from guitrainer.ui.widgets.before_after import PICTURE_SIZE, BeforeAfterView

TRIANGLE = Drawing("triangle", "purple", "white", 32, 32, 18)
BAR = Drawing("bar", "red", "white", 30, 33, 19)
SQUARE = Drawing("square", "blue", "yellow", 32, 32, 17)


def Sample(prompt: str, step: int, path: str) -> SampleImage:  # noqa: N802 - reads like the record it builds
    return SampleImage(path=path, prompt=prompt, step=step)


def _samples(tmp_path) -> list[SampleImage]:
    """What a Demo run's sampling makes: step 0 (the base) and a later step, for the trigger and the control."""
    out = []
    for step, zorb in ((0, TRIANGLE), (40, TRIANGLE), (240, BAR)):
        for i, (prompt, d) in enumerate((("a red zorb", zorb), ("a blue square", SQUARE))):
            path = tmp_path / f"demo_lora_step{step:06d}_{i}.png"
            draw(d).save(path)
            out.append(SampleImage(str(path), prompt, step))
    return out


def _pixel(label, x, y):
    img: QImage = label.pixmap().toImage()
    c = img.pixelColor(x, y)
    return c.red(), c.green(), c.blue()


def test_before_after_rows_pictures_and_demo_measure(qtbot, tmp_path):
    view = BeforeAfterView()
    qtbot.addWidget(view)
    view.show()
    assert view.empty.isVisible()
    view.clear(demo=True)
    for s in _samples(tmp_path):
        view.add_sample(s)
    assert not view.empty.isVisible()
    assert [r.prompt.text() for r in view.rows] == ["a red zorb", "a blue square"]
    zorb = view.rows[0]
    assert zorb.before_caption.text() == "step 0: the base model" and zorb.after_caption.text() == "step 240"
    assert zorb.before.pixmap().width() == PICTURE_SIZE
    # enlarged by whole pixels: the bar's middle is exactly its red, the corner exactly the background
    assert _pixel(zorb.after, 60, 66) == PALETTE["red"]
    assert _pixel(zorb.after, 2, 2) == PALETTE["white"]
    assert _pixel(zorb.before, 64, 40) == PALETTE["purple"]
    verdicts = {p.prompt: p.verdict for p in view.measures()}
    assert verdicts == {"a red zorb": "learned", "a blue square": "kept"}
    assert "Learned" in zorb.measure.text() and "now: a red bar" in zorb.measure.text()
    qtbot.waitUntil(zorb.measure.isVisible, timeout=2000)  # shown once the event loop runs, as in the app


def test_before_after_of_another_model_has_no_measure(qtbot, tmp_path):
    view = BeforeAfterView()
    qtbot.addWidget(view)
    view.set_samples(_samples(tmp_path), demo=False)
    assert len(view.rows) == 2 and view.measures() == []
    (tmp_path / "demo_lora_step000240_0.png").unlink()
    view.set_samples(_samples(tmp_path)[:4] + [Sample("a red zorb", 300, str(tmp_path / "gone.png"))])
    assert view.rows[0].after.text() == "(file gone)"


def test_training_page_samples_tab_shows_base_beside_lora(qtbot, tmp_path):
    from guitrainer.ui.training.page import TrainingPage

    cfg = TrainingConfig()
    cfg.model.base = "demo"
    page = TrainingPage(ConfigBinding(cfg))
    qtbot.addWidget(page)
    page.show()
    page.before_after.clear(demo=True)
    for s in _samples(tmp_path):
        page._on_sample(s)  # what the worker's sample_ready signal delivers
    assert page.tabs.tabText(page.tabs.indexOf(page.samples_tab)) == "Samples (6)"
    assert page.gallery.count() == 6
    assert [p.verdict for p in page.before_after.measures()] == ["learned", "kept"]


def test_runs_page_samples_tab_and_details(qtbot, tmp_path):
    from guitrainer.ui.runs.page import RunsPage

    cfg = TrainingConfig()
    cfg.model.base = "demo"
    with RunStore(tmp_path / "runs.sqlite3") as store:
        run_id = store.begin_run(name="demo_lora", config=cfg.to_dict(), model="demo", precision="fp32", total_steps=240)
        arts = [{"kind": "sample", "path": s.path, "step": s.step, "prompt": s.prompt} for s in _samples(tmp_path)]
        store.write_batch(run_id, [], arts, run={"steps": 240})
        store.end_run(run_id, "finished")
    page = RunsPage(ConfigBinding(TrainingConfig()), store_path=tmp_path / "runs.sqlite3")
    qtbot.addWidget(page)
    page.resize(1200, 900)
    page.show()
    qtbot.waitExposed(page)
    rect = page.table.visualRect(page.proxy.index(0, 0))
    qtbot.mouseClick(page.table.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())
    assert [r.prompt.text() for r in page.before_after.rows] == ["a red zorb", "a blue square"]
    assert [p.verdict for p in page.before_after.measures()] == ["learned", "kept"]
    text = page.details.toPlainText()
    assert "Demo measure: “a red zorb” (asks for a red bar): step 0 a purple triangle" in text and "— learned" in text


def test_output_page_shows_the_last_runs_pair(qtbot, tmp_path):
    from guitrainer.core.events import RunSummary
    from guitrainer.ui.output.page import OutputPage

    cfg = TrainingConfig()
    cfg.model.base = "demo"
    cfg.output.folder = str(tmp_path)
    page = OutputPage(ConfigBinding(cfg))
    qtbot.addWidget(page)
    page.show()
    assert not page.before_after.isVisible()

    class Worker:  # what begin_run reads of a TrainingWorker: its config (no signals to connect here)
        config = cfg

    page.begin_run(Worker())
    for s in _samples(tmp_path):
        page._note_written(s)  # the worker's sample_ready
    page.show_last_run(RunSummary(status="finished", steps=240, epochs=80, final_loss=0.1, lora_path=str(tmp_path / "demo_lora.safetensors")))
    assert page.before_after.isVisible() and page.before_after_title.title() == "Before / after"
    assert [p.verdict for p in page.before_after.measures()] == ["learned", "kept"]
    assert "6 sample images" in page.last_run_label.text()


@pytest.mark.slow
def test_use_the_demo_images_button_adds_them(qtbot, tmp_path, monkeypatch):
    monkeypatch.setenv("GUITRAINER_HOME", str(tmp_path / "home"))
    from guitrainer.ui.dataset.page import DatasetPage

    page = DatasetPage(ConfigBinding(TrainingConfig()))
    qtbot.addWidget(page)
    page.show()
    with qtbot.waitSignal(page.import_finished, timeout=20_000):
        qtbot.mouseClick(page.demo_images_button, Qt.MouseButton.LeftButton)
    assert len(page.items) == 12
    assert sum(1 for it in page.items if it.caption == "a red zorb") == 8
    assert page.binding.get("dataset.folders")[0].path == str(tmp_path / "home" / "demo_images")
