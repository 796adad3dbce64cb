"""Issue 15: from 1366×768 up nothing is cut off and no page scrolls (no scrolling column inside a
scrolling page), and tab labels are whole ("Regula…" was elided)."""

from __future__ import annotations

import pytest
from PySide6.QtCore import QSettings, Qt

from guitrainer.config.presets import PresetStore
from guitrainer.ui.window.main_window import MainWindow


def clipped_labels(page) -> list[str]:  # noqa: ANN001
    """Wrapped labels shown shorter than their text needs (a squeezed layout cuts lines off, without scrolling)."""
    from PySide6.QtWidgets import QLabel

    return [
        lab.text()[:60]
        for lab in page.findChildren(QLabel)
        if lab.isVisible() and lab.wordWrap() and lab.text() and lab.height() + 1 < lab.heightForWidth(lab.width())
    ]


@pytest.mark.parametrize("size", [(1366, 768), (1920, 1080)])
def test_every_page_fits_without_scrolling(qtbot, tmp_path, size):
    settings = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
    w = MainWindow(store=PresetStore(user_dir=tmp_path / "presets"), settings=settings)
    qtbot.addWidget(w)
    w.setWindowState(Qt.WindowState.WindowNoState)  # offscreen's 800x600 screen opens it maximized
    w.resize(*size)
    w.show()
    qtbot.waitExposed(w)
    for row, page in enumerate(w.pages):
        w.nav.setCurrentRow(row)
        qtbot.wait(30)
        assert page.verticalScrollBar().maximum() == 0, f"{page.title} scrolls vertically at {size}"
        assert page.horizontalScrollBar().maximum() == 0, f"{page.title} scrolls horizontally at {size}"
        assert clipped_labels(page) == [], f"{page.title} cuts text off at {size}"
    tabs = w.dataset_page.tabs
    w.nav.setCurrentRow(0)
    qtbot.wait(30)
    bar = tabs.tabBar()
    for i in range(tabs.count()):
        assert bar.tabRect(i).width() >= bar.fontMetrics().horizontalAdvance(tabs.tabText(i)), tabs.tabText(i)
    assert "Class images" in [tabs.tabText(i) for i in range(tabs.count())]
    w.dataset_page.shutdown()


@pytest.mark.parametrize("device", ["cpu", "cpu_bf16", "gtx1080", "gtx1660", "rx6800", "m1", "rtx4090"])
def test_the_model_page_fits_1366_whatever_the_device_says(qtbot, tmp_path, monkeypatch, device):
    """The precision notes differ per device class (a Turing or RDNA2 caveat was 95-147 px too wide for a
    1366 px screen): every class of device must leave the page without scroll bars."""
    from helpers import fake_device

    from guitrainer.core.device import hardware

    found = fake_device(device)
    monkeypatch.setattr(hardware, "cached", lambda: found)
    settings = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
    w = MainWindow(store=PresetStore(user_dir=tmp_path / "presets"), settings=settings)
    qtbot.addWidget(w)
    w.setWindowState(Qt.WindowState.WindowNoState)  # offscreen's 800x600 screen opens it maximized
    w.resize(1366, 768)
    w.show()
    qtbot.waitExposed(w)
    w.nav.setCurrentRow(w.pages.index(w.model_page))
    qtbot.wait(30)
    assert w.model_page.precision_picker.device() is found
    assert w.model_page.horizontalScrollBar().maximum() == 0, f"Model & Precision scrolls sideways with {device}"
    assert w.model_page.verticalScrollBar().maximum() == 0, f"Model & Precision scrolls with {device}"
    assert clipped_labels(w.model_page) == [], f"Model & Precision cuts text off with {device}"
    w.dataset_page.shutdown()


# ---------------------------------------------------------------------------- the tester's layout issues


def _window(qtbot, tmp_path, monkeypatch, size, device="rtx4090"):  # noqa: ANN001, ANN202
    from helpers import fake_device

    from guitrainer.core.device import hardware

    found = fake_device(device)
    monkeypatch.setattr(hardware, "cached", lambda: found)
    settings = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
    w = MainWindow(store=PresetStore(user_dir=tmp_path / "presets"), settings=settings)
    qtbot.addWidget(w)
    w.setWindowState(Qt.WindowState.WindowNoState)
    w.resize(*size)
    w.show()
    qtbot.waitExposed(w)
    return w


def _show(qtbot, w, page) -> None:  # noqa: ANN001
    w.nav.setCurrentRow(w.pages.index(page))
    qtbot.wait(30)


def _fits(page, what: str) -> None:  # noqa: ANN001
    assert page.verticalScrollBar().maximum() == 0, f"{what} scrolls by {page.verticalScrollBar().maximum()} px"
    assert page.horizontalScrollBar().maximum() == 0, f"{what} scrolls sideways"
    assert clipped_labels(page) == [], f"{what} cuts text off: {clipped_labels(page)}"


@pytest.mark.parametrize("size", [(1366, 745), (1920, 1050)])
@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_training_charts_after_a_run_keep_their_axes_and_the_page_its_height(qtbot, tmp_path, monkeypatch, size, precision):
    """Issue: the loss-scale note covered the loss chart's axis, the small charts lost theirs, the loss chart
    was 70 px at 1920×1080, the legend sat on the curve, and a warning after the run pushed the page down."""
    from guitrainer.core.events import StepMetrics

    w = _window(qtbot, tmp_path, monkeypatch, size)
    w.binding.set("precision.training", precision)
    page = w.training_page
    _show(qtbot, w, page)
    charts = page.charts
    charts.set_scaler_visible(precision == "fp16")
    for s in range(1, 61):
        charts.add(StepMetrics(step=s, total_steps=60, epoch=1 + s // 20, loss=0.2 + s % 7 / 70, lr=1e-4,
                               grad_scale=65536.0 if precision == "fp16" else None, skipped=False,
                               seconds_per_step=0.3, images_per_second=3.0))  # fmt: skip
    charts.redraw()
    page.progress.show_step(StepMetrics(step=23, total_steps=60, epoch=1, loss=0.1, lr=1e-4, grad_scale=None,
                                        skipped=False, seconds_per_step=0.3, images_per_second=3.0), 3, 12.0)  # fmt: skip
    qtbot.wait(30)
    top = page.charts_host.mapTo(page, page.charts_host.rect().topLeft())
    button = page.stop_button.mapTo(page, page.stop_button.rect().center())
    page.progress.say("Finished: 60 steps, the LoRA is saved. " * 5)
    page.progress.warn("fp16 save: 3 tensors over 65,504: saved as bf16 instead (see the Output page) " * 3)
    page.controls.apply(page.state, "A blocking problem with a long explanation " * 4, False, False)
    qtbot.wait(30)
    assert page.charts_host.mapTo(page, page.charts_host.rect().topLeft()) == top, "a status line moved the page"
    assert page.stop_button.mapTo(page, page.stop_button.rect().center()) == button, "a click would miss"
    assert page.warning_label.toolTip() and page.status_label.toolTip()  # clipped: the whole text on hover
    _fits(page, f"Training at {size}")
    cells = [charts.loss_widget, charts.lr_widget, charts.scale_cell, charts.sps_widget]
    rects = [c.geometry() for c in cells]
    for i, a in enumerate(rects):
        assert charts.plots_area.rect().contains(a), f"{cells[i].objectName()} sticks out of the charts"
        assert a.height() >= cells[i].minimumHeight() > 0
        for b in rects[i + 1 :]:
            assert not a.intersects(b), "two charts overlap (a note over an axis)"
    assert rects[0].height() >= max(r.height() for r in rects[1:]), "the loss chart is smaller than the small ones"
    assert charts.loss_plot.legend is None and "smoothed" in charts.legend_names()  # the legend is in the title
    assert charts.scale_hint.toolTip() and charts.scale_hint.height() <= charts.scale_hint.fontMetrics().height() + 2


def test_progress_text_is_drawn_over_the_fill_in_the_highlighted_colour(qtbot):
    from PySide6.QtGui import QPalette

    from guitrainer.ui.training.controls import ReadableProgressBar

    bar = ReadableProgressBar()
    qtbot.addWidget(bar)
    bar.resize(300, 24)
    bar.setRange(0, 60)
    bar.setValue(30)
    bar.setFormat("step 30 / 60 wwwwwwwwwwwwwwwwwwwwwwwwwwww")
    bar.show()
    qtbot.waitExposed(bar)
    assert not bar.isTextVisible() and "step 30" in bar.text()  # the style draws no text the fill could cover
    img = bar.grab().toImage()
    light = bar.palette().color(QPalette.ColorRole.HighlightedText)
    on_fill = [img.pixelColor(x, y) for x in range(20, bar.fill_width() - 2) for y in range(4, 20)]
    assert sum(c.lightness() >= light.lightness() - 10 for c in on_fill) > 20, "no readable text on the fill"


@pytest.mark.parametrize("device", ["rtx4090", "gtx1080", "cpu"])
def test_the_model_page_fits_1366_with_sdxl_fp16_advice(qtbot, tmp_path, monkeypatch, device):
    w = _window(qtbot, tmp_path, monkeypatch, (1366, 745), device)
    _show(qtbot, w, w.model_page)
    w.binding.set("model.family", "sdxl")
    w.binding.set("precision.training", "fp16")
    qtbot.wait(30)
    assert w.model_page.precision_picker.advice(), "no advice to show"
    _fits(w.model_page, f"Model & Precision with SDXL + fp16 on {device}")


def test_the_output_page_fits_1366_with_a_save_report_and_verify_does_not_jump(qtbot, tmp_path, monkeypatch):
    from guitrainer.core.precision.numerics import SaveReport, TensorFinding

    w = _window(qtbot, tmp_path, monkeypatch, (1366, 745))
    page = w.output_page
    _show(qtbot, w, page)
    _fits(page, "Output")
    found = tuple(TensorFinding(f"lora_unet_{i}.lora_up.weight", 64, peak=1.2e5, over_max=3, nonzero=64) for i in range(30))
    page.show_save_report(SaveReport(str(tmp_path / "demo.safetensors"), "fp16", "bf16", found))
    page.note_warning("fp16 save: 2 tensors over range")
    qtbot.wait(30)
    _fits(page, "Output with a save report")
    assert page.save_report_view.table.isVisible() and page.save_report_view.table.height() >= 90
    page._verifier = lambda _p, _c: type("R", (), {"ok": True, "message": "fine"})()
    page.verify_path.setText(str(tmp_path / "x.safetensors"))
    qtbot.mouseClick(page.verify_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: page.verify_button.isEnabled(), timeout=5000)
    assert page.verticalScrollBar().value() == 0
    assert w.focusWidget() is not page.save_report_view.table, "Verify handed focus to the table: the page jumps"


def test_the_vae_edit_is_wide_and_shows_the_whole_path_on_hover(qtbot, tmp_path, monkeypatch):
    w = _window(qtbot, tmp_path, monkeypatch, (1366, 745))
    _show(qtbot, w, w.model_page)
    path = str(tmp_path / "models--madebyollin--sdxl-vae-fp16-fix" / "snapshots" / "abc")
    w.binding.set("model.vae", path)
    edit = w.model_page.vae_picker.edit
    assert edit.width() >= 240 and path in edit.toolTip()
    assert edit.cursorPosition() == len(path)  # the end (the file's name) shows when it does not fit


def test_a_missing_vae_path_is_said_in_full(qtbot, tmp_path, monkeypatch):
    w = _window(qtbot, tmp_path, monkeypatch, (1366, 745))
    _show(qtbot, w, w.model_page)
    w.binding.set("model.vae", str(tmp_path / "models--madebyollin--sdxl-vae-fp16-fix" / "snapshots" / "abc"))
    qtbot.wait(30)
    _fits(w.model_page, "Model & Precision with a VAE path")


@pytest.mark.parametrize("width", [1366, 1920])
def test_vram_legend_entries_never_break(qtbot, tmp_path, monkeypatch, width):
    w = _window(qtbot, tmp_path, monkeypatch, (width, 745))
    legend = w.vram_meter.legend
    from guitrainer.ui.model.vram_meter import shown_parts

    meter = w.vram_meter
    parts = [p.label for p in shown_parts(meter.breakdown)] if meter.breakdown else []
    assert any(" " in p for p in parts)
    entries = legend.text().split("&nbsp;&nbsp; ")
    for label in parts:
        (entry,) = [e for e in entries if label in e]
        assert entry.startswith("<span style='white-space:nowrap'>"), f"“{label}” could wrap inside"
    assert legend.height() <= 3 * legend.fontMetrics().lineSpacing()


def test_restored_size_is_never_tiny():
    from PySide6.QtCore import QRect, QSize

    from guitrainer.ui.window.workspace import MIN_RESTORED, restored_size

    big = QRect(0, 0, 1920, 1050)
    assert restored_size(QSize(844, 510), big).width() >= 1344 and restored_size(QSize(844, 510), big).height() >= 735
    assert restored_size(QSize(1600, 900), big) == QSize(1600, 900)  # a sensible size stays
    assert restored_size(QSize(3000, 2000), big) == QSize(1920, 1050)  # never beyond the screen
    small = QRect(0, 0, 1366, 740)
    assert restored_size(QSize(844, 510), small) == QSize(MIN_RESTORED.width(), MIN_RESTORED.height())
    assert restored_size(QSize(844, 510), None) == MIN_RESTORED


def test_a_window_saved_tiny_and_maximized_opens_usable(qtbot, tmp_path):
    settings = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
    first = MainWindow(store=PresetStore(user_dir=tmp_path / "presets"), settings=settings)
    qtbot.addWidget(first)
    first.setWindowState(Qt.WindowState.WindowNoState)
    first.resize(844, 510)
    first.show()
    qtbot.waitExposed(first)
    first.showMaximized()
    qtbot.wait(50)
    first._dirty = False
    first.close()
    first.dataset_page.shutdown()
    assert str(settings.value("window/maximized")).lower() == "true"
    again = MainWindow(store=PresetStore(user_dir=tmp_path / "presets"), settings=settings)
    qtbot.addWidget(again)
    assert again.windowState() & Qt.WindowState.WindowMaximized, "the maximized window came back unmaximized"
    avail = again.screen().availableGeometry()
    normal = again.normalGeometry().size() if again.normalGeometry().isValid() else again.size()
    assert normal.width() >= min(avail.width(), 1180) and normal.height() >= min(avail.height(), 700)
    again.dataset_page.shutdown()


# ---------------------------------------------------------------------------- the second tester's layout issues


def _text_rects(axis):  # noqa: ANN001, ANN202
    """The tick labels an axis would draw now, as rectangles."""
    from PySide6.QtGui import QImage, QPainter

    img = QImage(10, 10, QImage.Format.Format_ARGB32)
    p = QPainter(img)
    try:
        specs = axis.generateDrawSpecs(p)
    finally:
        p.end()
    return [rect for rect, _flags, text in (specs[2] if specs else []) if text]


def _axis_whole(plot, widget, side: str) -> bool:  # noqa: ANN001
    """The axis (line, ticks and labels) lies inside its plot widget: nothing of it is cut off."""
    r = plot.getAxis(side).sceneBoundingRect()
    return r.top() >= 0 and r.bottom() <= widget.height() + 0.5 and r.left() >= 0 and r.right() <= widget.width() + 0.5


@pytest.mark.parametrize("precision", ["fp16", "fp32"])
def test_a_run_moves_nothing_on_the_training_page_and_the_charts_keep_their_axes(qtbot, tmp_path, monkeypatch, precision):
    """Issue: pressing Train shrank the loss chart from ~158 to ~110 px (the Numerics tab's size hint grew the
    tabs), cutting its x labels; the GradScaler chart overlapped its note; the readout hid behind Export CSV;
    the x axis ran to 11 for a 9-step run."""
    from helpers.doubles import fake_factory

    w = _window(qtbot, tmp_path, monkeypatch, (1366, 745))
    w.binding.set("precision.training", precision)
    page = w.training_page
    _show(qtbot, w, page)
    qtbot.waitUntil(lambda: page._charts is not None)
    charts = page.charts
    cells = [charts.loss_widget, charts.lr_widget, charts.scale_cell, charts.sps_widget, page.tabs]
    qtbot.wait(30)
    before = [c.mapTo(page, c.rect().topLeft()) for c in cells], [c.size() for c in cells]
    meter = w.vram_meter.height()
    w.binding.set("schedule.max_steps", 9)  # the run planned is the fake's 9 steps (the Demo preset plans 240)
    page.trainer_factory = fake_factory(steps=9)
    page.start()
    qtbot.waitUntil(lambda: not page.is_active, timeout=20000)
    charts.redraw()
    qtbot.wait(50)
    after = [c.mapTo(page, c.rect().topLeft()) for c in cells], [c.size() for c in cells]
    assert after == before, "a run moved or resized the charts"
    assert w.vram_meter.height() == meter
    _fits(page, f"Training after a {precision} run")
    rects = [c.geometry() for c in cells[:4]]
    for i, a in enumerate(rects):
        assert a.height() >= cells[i].minimumHeight() > 0, f"{cells[i].objectName()} squeezed below its minimum"
        for b in rects[i + 1 :]:
            assert not a.intersects(b), "two charts overlap"
    for plot, widget in ((charts.loss_plot, charts.loss_widget), (charts.lr_plot, charts.lr_widget)):
        assert _axis_whole(plot, widget, "bottom") and _axis_whole(plot, widget, "left"), f"{widget.objectName()} axis cut"
    if precision == "fp16":
        scale = charts.scale_widget.geometry()
        assert charts.scale_hint.geometry().top() >= scale.bottom(), "the note sits on the scale chart's axis"
        assert _axis_whole(charts.scale_plot, charts.scale_widget, "bottom")
    assert charts.loss_plot.getViewBox().viewRange()[0] == pytest.approx([0.0, 9.0]), "the x axis runs past the run"
    r = charts.readout
    assert not r.elided(), f"the readout is cut: {r.text()} ({r.width()} px)"
    w.dataset_page.shutdown()


def test_a_new_run_clears_the_last_runs_axes_and_the_empty_scale_axis_is_readable(qtbot, tmp_path, monkeypatch):
    from guitrainer.core.events import StepMetrics

    w = _window(qtbot, tmp_path, monkeypatch, (1366, 745))
    w.binding.set("precision.training", "fp16")
    page = w.training_page
    _show(qtbot, w, page)
    qtbot.waitUntil(lambda: page._charts is not None)
    charts = page.charts
    qtbot.wait(30)
    labels = _text_rects(charts.scale_plot.getAxis("left"))
    assert 2 <= len(labels) <= 5, f"{len(labels)} labels on the empty scale axis"
    for i, a in enumerate(labels):
        assert not any(a.intersects(b) for b in labels[i + 1 :]), "the empty scale axis' labels overlap"
    for s in range(1, 7):
        charts.add(StepMetrics(step=s, total_steps=6, epoch=1, loss=0.3, lr=1e-3, grad_scale=65536.0, skipped=False,
                               seconds_per_step=0.3, images_per_second=3.0))  # fmt: skip
    charts.redraw()
    assert charts.loss_plot.getViewBox().viewRange()[0] == pytest.approx([0.0, 6.0]), "6 steps, the axis ends at 6"
    charts.clear(40)  # what Train does before "Loading the model…"
    for plot in (charts.loss_plot, charts.lr_plot, charts.sps_plot, charts.scale_plot):
        assert plot.getViewBox().viewRange()[0] == pytest.approx([0.0, 40.0]), "the last run's axes stayed"
    assert charts.lr_plot.getViewBox().viewRange()[1] == pytest.approx([0.0, 1.0])
    w.dataset_page.shutdown()


def test_the_vram_savers_row_keeps_its_height(qtbot, tmp_path, monkeypatch):
    w = _window(qtbot, tmp_path, monkeypatch, (1366, 745))
    meter = w.vram_meter
    w.binding.set("precision.cache_latents", False)  # a saver left to offer (the Demo preset caches latents)
    heights = {}
    for precision in ("fp16", "fp32", "bf16", "fp32"):
        w.binding.set("precision.training", precision)
        meter.refresh()
        qtbot.wait(30)
        heights[(precision, bool(meter.hint_buttons()))] = meter.height()
    assert {has for _p, has in heights} == {True, False}, f"no setting both showed and hid the savers: {heights}"
    assert len(set(heights.values())) == 1, f"the VRAM bar changes height with its savers: {heights}"
    w.dataset_page.shutdown()


def test_the_output_page_fits_with_a_long_verdict_and_a_save_warning_and_its_columns_stay(qtbot, tmp_path, monkeypatch):
    """Issue: a LoKr/DoRA verdict (4-6 lines) made the page scroll ~44 px, the red fp16 save warning pushed
    "Check a LoRA file" off screen, and the right column started at x=775, then x=868 as contents changed."""
    w = _window(qtbot, tmp_path, monkeypatch, (1366, 745))
    page = w.output_page
    _show(qtbot, w, page)
    about = page.findChild(type(page.save_report_view.parent()), None)  # noqa: F841 - the page's body
    boxes = {b.title(): b for b in page.findChildren(__import__("PySide6.QtWidgets").QtWidgets.QGroupBox)}
    right = boxes["About this LoRA (saved in the file)"]
    x = right.mapTo(page, right.rect().topLeft()).x()
    page.note_warning("fp16 save: 12 tensors over 65,504 (the largest 1.2e5) would be inf in an fp16 file: "
                      "saved as bf16 instead; choose bf16 or fp32 to keep every value " * 2)  # fmt: skip
    verdict = ("LoKr file: ComfyUI and A1111 (with the LyCORIS extension) read it; diffusers does not. "
               "Every one of the 264 modules matches the network as trained within 1e-3 of its effect. " * 4)  # fmt: skip
    page._show_result(str(tmp_path / "x.safetensors"), True, verdict)
    qtbot.wait(50)
    _fits(page, "Output with a long verdict and a save warning")
    check = boxes["Check a LoRA file"]
    assert check.mapTo(page, check.rect().bottomLeft()).y() <= page.viewport().height(), "Check a LoRA file is cut"
    assert right.mapTo(page, right.rect().topLeft()).x() == x, "the columns' split moved with the contents"
    assert abs(x - page.viewport().width() / 2) < 30, f"the columns are not equal: the right one starts at {x}"
    w.dataset_page.shutdown()


def test_the_output_page_fits_1366_with_every_file_of_a_run_named_and_the_last_run_listed(qtbot, tmp_path, monkeypatch):
    """Issue 27: the preview names every file of the next run (LoRA, epoch saves, state, samples, TensorBoard logs)
    and "Last run wrote" lists a run's LoRA, state, samples and other saves: still no scrolling at 1366 x 768."""
    from guitrainer.core.events import RunSummary, SampleImage, SavedFile

    w = _window(qtbot, tmp_path, monkeypatch, (1366, 745))
    page = w.output_page
    out = tmp_path / "a rather long folder name for the outputs" / "of this project, kept on the second disk"
    for key, value in {"output.folder": str(out), "output.name": "portrait_of_a_cat_in_watercolour",
                       "output.save_every_n_epochs": 2, "output.keep_last": 3, "output.tensorboard": True,
                       "sampling.every_n_steps": 50, "sampling.prompts": ["a cat"]}.items():  # fmt: skip
        w.binding.set(key, value)
    _show(qtbot, w, page)
    assert len(page.preview_paths()) == 5
    _fits(page, "Output with every file of the next run")
    lora = str(out / "portrait_of_a_cat_in_watercolour_2.safetensors")
    page.begin_run(object())
    for i in range(6):
        page._note_written(SampleImage(str(out / "samples" / f"portrait_of_a_cat_in_watercolour_2_step{i:06d}_0.png"), "a cat", i))
    page._note_written(SavedFile(str(out / "portrait_of_a_cat_in_watercolour_2-000002.safetensors"), "lora", 20, 2))
    page.show_last_run(RunSummary("finished", 60, 6, 0.1, lora_path=lora,
                                  state_path=str(out / "portrait_of_a_cat_in_watercolour_2_state")))  # fmt: skip
    page.note_warning("[fp16 save] 2 tensors lose small values to zero in fp16 (up to 0.4% of lora_unet_up_blocks_0_"
                      "attentions_0_transformer_blocks_0_attn1_to_q.lora_up.weight); bf16 or fp32 keep them.")
    qtbot.wait(50)
    assert "6 sample images" in page.last_run_label.text() and "1 other save" in page.last_run_label.text()
    _fits(page, "Output after a run with samples and intermediate saves")
    w.dataset_page.shutdown()


@pytest.mark.parametrize(
    "case",
    ["more", "bad_vae", "fp8_advanced"],
)
def test_the_model_page_never_scrolls_sideways_and_fits_its_notes(qtbot, tmp_path, monkeypatch, case):
    """Issue: whenever the Model page scrolled it also scrolled sideways (~3 px); a VAE error pushed the last
    note off screen; fp8 with the advanced savers open showed 5 notes and scrolled ~200 px."""
    from PySide6.QtWidgets import QToolButton

    w = _window(qtbot, tmp_path, monkeypatch, (1366, 745), "gtx1080")
    page = w.model_page
    _show(qtbot, w, page)
    w.binding.set("model.family", "sdxl")
    w.binding.set("precision.training", "fp16")
    if case == "bad_vae":
        w.binding.set("model.vae", str(tmp_path / "nowhere" / "sdxl-vae-fp16-fix" / "diffusion_pytorch_model.safetensors"))
    if case == "fp8_advanced":
        w.binding.set("precision.base_weights", "fp8")
        toggle = next(b for b in page.memory_form.findChildren(QToolButton) if "advanced" in b.text())
        toggle.click()
    qtbot.wait(30)
    picker = page.precision_picker
    if case == "more":
        rows = [r for r in picker.advice_rows() if r.isVisible() and r.collapsible()]
        assert rows, "no note to open"
        rows[0].set_expanded(True)
        qtbot.wait(30)
    _fits(page, f"Model & Precision ({case})")
    notes = [r for r in picker.advice_rows() if r.isVisible()]
    assert notes, "no note shown"
    last = picker.more_notes if picker.more_notes.isVisible() else notes[-1]
    assert last.mapTo(page, last.rect().bottomLeft()).y() <= page.viewport().height(), "the last note is off screen"
    page.verticalScrollBar().setMaximum(50)  # even when it has to scroll, never sideways
    assert page.horizontalScrollBar().maximum() == 0 and page.widget().width() <= page.viewport().width()
    assert page.model_picker.edit.width() >= 240, f"the base model path is {page.model_picker.edit.width()} px"
    w.dataset_page.shutdown()


def test_train_is_off_says_where_and_a_click_goes_there(qtbot, tmp_path, monkeypatch):
    from PySide6.QtCore import Qt as _Qt

    w = _window(qtbot, tmp_path, monkeypatch, (1366, 745))
    page = w.training_page
    page.set_blocking_errors("bf16 is not supported on the Tesla T4 (compute capability 7.5): choose fp16 AMP or fp32 "
                             "on the Model & Precision page, or train on a newer card\nA second problem")  # fmt: skip
    _show(qtbot, w, page)
    label = page.blocked_label
    assert label.isVisible()
    shown = label.fontMetrics().elidedText(label.text(), _Qt.TextElideMode.ElideRight, label.contentsRect().width())
    assert shown.startswith("Train is off: see Model & Precision"), f"the visible text is {shown!r} ({label.width()} px)"
    qtbot.mouseClick(label, _Qt.MouseButton.LeftButton)
    assert w.stack.currentWidget() is w.model_page, "a click on why Train is off did not go to the page"
    w.dataset_page.shutdown()


@pytest.mark.slow  # builds a tiny Flux for its files
@pytest.mark.parametrize("device", ["rtx4090", "gtx1080"])
def test_the_model_page_fits_1366_with_a_split_flux_install_lacking_a_part(qtbot, tmp_path, monkeypatch, device):
    """The text-encoder row and its problem, the Flux fp16 warning and the device's notes at once."""
    from helpers import tiny_flux

    parts = tiny_flux.save_split(tiny_flux.build(), tmp_path / "flux")
    w = _window(qtbot, tmp_path, monkeypatch, (1366, 745), device)
    _show(qtbot, w, w.model_page)
    w.model_page.model_picker.choose_split([str(parts["transformer"]), str(parts["clip_l"]), str(parts["vae"])])
    w.binding.set("precision.training", "fp16")
    qtbot.wait(30)
    assert w.model_page.text_encoders.isVisible() and "T5" in w.model_page.text_encoders.status.text()
    _fits(w.model_page, f"Model & Precision with a split Flux.1 install lacking T5, fp16, on {device}")


@pytest.mark.parametrize("size", [(1366, 745), (1920, 1050)])
@pytest.mark.parametrize("precision", ["fp16", "fp32"])
def test_the_numerics_tab_gets_a_usable_height_and_readable_ticks(qtbot, tmp_path, monkeypatch, size, precision):
    """Issue 27 #8: the Numerics tab's charts were ~40 px tall at 1366×768 and at 1920×1080, their ticks overlapping,
    and in fp32 the line over them printed 38-digit headrooms. Opened (a click on its tab), it takes the height the
    charts above can spare — all of it at 1366×768, where both do not fit — and gives it back with the Log tab."""
    import re

    from helpers.doubles import fake_factory
    from PySide6.QtCore import QPoint, QRect
    from PySide6.QtTest import QTest

    from guitrainer.core.events import StepMetrics
    from guitrainer.ui.training.numerics_chart import PLOT_MIN_HEIGHT

    w = _window(qtbot, tmp_path, monkeypatch, size)
    w.binding.set("precision.training", precision)
    page = w.training_page
    _show(qtbot, w, page)
    page.trainer_factory = fake_factory(steps=9)
    page.start()
    qtbot.waitUntil(lambda: not page.is_active, timeout=20000)
    chart = w.numerics()
    scale = 1.0 if precision == "fp16" else 1e34
    blocks = [f"unet.{where}.{i}.{kind}" for where in ("down", "up") for i in range(3) for kind in ("attn", "ff", "res")]
    for step in range(1, 2001, 50):
        chart.add(StepMetrics(step=step, total_steps=2000, epoch=1, loss=0.1, lr=1e-4, skipped=False,
                              headroom=tuple((b, scale * 10 ** (1 + i % 6)) for i, b in enumerate(blocks)),
                              grad_underflow=0.01 if precision == "fp16" else None))  # fmt: skip
    chart.redraw()
    charts_before = page.charts_host.isVisible(), page.charts_host.height()
    bar = page.tabs.tabBar()
    numerics = page.tabs.indexOf(chart)
    QTest.mouseClick(bar, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier, bar.tabRect(numerics).center())
    qtbot.wait(50)
    assert page.tabs.currentWidget() is chart
    for plot, widget in ((chart.headroom_plot, chart.headroom_widget), (chart.underflow_plot, chart.underflow_widget)):
        if not widget.isVisible():
            continue
        inside = QRect(widget.mapTo(chart, QPoint(0, 0)), widget.size())
        assert widget.height() >= PLOT_MIN_HEIGHT and chart.rect().contains(inside), "a plot is cut off"
        assert _axis_whole(plot, widget, "left") and _axis_whole(plot, widget, "bottom")
        rects = _text_rects(plot.getAxis("left"))
        assert len(rects) >= 2, "the headroom axis has too few labels to read"
        for i, a in enumerate(rects):
            for b in rects[i + 1 :]:
                assert not a.intersects(b), "two tick labels overlap"
    assert (precision == "fp16") == chart.underflow_widget.isVisible()
    readout = chart.readout.text()
    assert not re.search(r"\d{7,}|\d{1,3}(,\d{3}){3,}", readout), f"a headroom with too many digits: {readout}"
    if precision == "fp32":
        assert readout.startswith("fp32: headroom not a concern (max 3.4e38")
    if size == (1920, 1050):
        assert page.charts_host.isVisible()  # room for both: the charts keep their minimum
    QTest.mouseClick(bar, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier, bar.tabRect(0).center())
    qtbot.wait(50)
    assert (page.charts_host.isVisible(), page.charts_host.height()) == charts_before  # the Log tab: as it was
    assert page.charts_host.mapTo(page, QPoint(0, 0)).y() >= 0
    w.dataset_page.shutdown()
