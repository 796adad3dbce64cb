"""Regularization panel: a real drop on it fills dataset.regularization_folders; the Training page's
bound prior loss weight; the generate dialog with the demo model; screenshot."""

from __future__ import annotations

from pathlib import Path

import pytest
from PIL import Image, ImageDraw
from PySide6.QtCore import QMimeData, QPointF, Qt, QUrl
from PySide6.QtGui import QDragEnterEvent, QDropEvent
from PySide6.QtWidgets import QApplication, QDoubleSpinBox, QLabel, QLineEdit

from guitrainer.config import DatasetFolder, TrainingConfig
from guitrainer.ui.binding import ConfigBinding, bound_editors
from guitrainer.ui.dataset.regularization_panel import PREVIEW_SIZE, RegularizationPanel

COLOURS = [(196, 120, 60), (120, 90, 60), (220, 200, 170), (90, 70, 50), (160, 110, 80), (60, 50, 40)]


def dog(path: Path, seed: int) -> Path:
    """A toy 'photo of a dog': a brown blob with ears on a sky."""
    path.parent.mkdir(parents=True, exist_ok=True)
    im = Image.new("RGB", (192, 192), (150 + seed * 12 % 90, 190, 230))
    d = ImageDraw.Draw(im)
    c = COLOURS[seed % len(COLOURS)]
    d.rectangle([0, 140, 192, 192], fill=(90, 160, 80))
    d.ellipse([40 + seed * 3, 70, 150, 150], fill=c)
    d.ellipse([100, 40, 160, 100], fill=c)
    d.polygon([(104, 52), (112, 20), (124, 48)], fill=c)
    d.ellipse([132, 60, 140, 68], fill=(0, 0, 0))
    im.save(path)
    return path


def drop_on(widget, paths: list[Path]) -> QDropEvent:
    md = QMimeData()
    md.setUrls([QUrl.fromLocalFile(str(p)) for p in paths])
    pos = widget.rect().center()
    enter = QDragEnterEvent(pos, Qt.DropAction.CopyAction, md, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier)
    QApplication.sendEvent(widget, enter)
    assert enter.isAccepted()
    ev = QDropEvent(QPointF(pos), Qt.DropAction.CopyAction, md, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier)
    QApplication.sendEvent(widget, ev)
    return ev


@pytest.fixture
def page(dataset_page):
    return dataset_page


def test_drop_on_panel_sets_regularization_folders(page, qtbot, tmp_path, artifacts_dir):
    train = tmp_path / "10_rex"
    for i in range(3):
        dog(train / f"rex_{i}.png", i)
        (train / f"rex_{i}.txt").write_text("rex, a dog")
    page.binding.set("dataset.folders", [DatasetFolder(str(train), 10)])  # 30 training draws per epoch
    qtbot.waitUntil(lambda: len(page.items) == 3)
    classes = tmp_path / "2_dog"
    for i in range(6):
        dog(classes / f"dog_{i:02d}.png", i + 1)
    (classes / "notes.md").write_text("not an image")

    panel = page.regularization
    assert isinstance(panel, RegularizationPanel)
    page.show()
    page.tabs.setCurrentWidget(panel)
    qtbot.waitExposed(page)
    assert panel.drop_hint.isVisible() and not panel.table.isVisible()

    ev = drop_on(panel, [classes])
    assert ev.isAccepted()
    cfg = page.binding.config.dataset
    assert [(f.path, f.repeats) for f in cfg.regularization_folders] == [(str(classes), 2)]  # kohya N_name
    assert cfg.folders == [DatasetFolder(str(train), 10)]  # the drop did not go to the training set
    assert len(page.items) == 3
    assert panel.image_count() == 6
    assert panel.table.rowCount() == 1 and panel.table.item(0, 1).text() == "6"
    assert "6</b> class images" in panel.count_label.text()
    assert "30 training draws + 30 class draws" in panel.count_label.text()
    assert panel.table.isVisible() and not panel.drop_hint.isVisible()

    # repeats editable per folder; a training folder is refused; removing works
    spin = panel.table.cellWidget(0, 2)
    spin.setValue(5)
    assert page.binding.config.dataset.regularization_folders[0].repeats == 5
    assert panel.table.cellWidget(0, 2) is spin  # updated in place, not rebuilt under the user's cursor
    page.binding.set("dataset.regularization_folders", [DatasetFolder(str(classes), 4)])  # e.g. a preset
    assert spin.value() == 4
    assert "30 training draws + 30 class draws" in panel.count_label.text()  # 24 available, cycled up to 30
    spin.setValue(5)
    assert panel.add_folders([train]) == []
    assert "training folder" in panel.status.text()
    assert page.binding.config.errors() == []

    # bound class prompt / prior loss weight editors
    editors = bound_editors(panel)
    assert isinstance(editors["dataset.class_prompt"], QLineEdit)
    editors["dataset.class_prompt"].setText("a photo of a dog")
    editors["dataset.class_prompt"].editingFinished.emit()
    assert page.binding.config.dataset.class_prompt == "a photo of a dog"
    editors["dataset.prior_loss_weight"].setValue(0.75)
    assert page.binding.config.dataset.prior_loss_weight == pytest.approx(0.75)

    # thumbnails of a few class images
    qtbot.waitUntil(lambda: all(lab.pixmap() is not None and not lab.pixmap().isNull()
                                for lab in panel.preview_labels[:6]), timeout=10000)  # fmt: skip
    assert panel.preview_labels[0].pixmap().width() <= PREVIEW_SIZE
    assert not panel.preview_labels[6].isVisible()
    qtbot.wait(300)  # the page's own summary strip refreshes on a 150 ms timer
    page.grab().save(str(artifacts_dir / "regularization_panel.png"))
    assert (artifacts_dir / "regularization_panel.png").stat().st_size > 10000

    panel.table.cellWidget(0, 3).click()
    assert page.binding.config.dataset.regularization_folders == []
    assert panel.image_count() == 0 and panel.drop_hint.isVisible()


def test_training_page_has_bound_prior_loss_weight(qtbot):
    from guitrainer.ui.training.page import TrainingPage

    binding = ConfigBinding(TrainingConfig())
    tp = TrainingPage(binding)
    qtbot.addWidget(tp)
    editor = bound_editors(tp)["dataset.prior_loss_weight"]
    assert isinstance(editor, QDoubleSpinBox)
    assert tp.settings_panel.isAncestorOf(editor)
    editor.setValue(0.4)
    assert binding.config.dataset.prior_loss_weight == pytest.approx(0.4)
    binding.set("dataset.prior_loss_weight", 2.0)
    assert editor.value() == pytest.approx(2.0)
    hint = tp.findChild(QLabel, "prior_loss_hint")
    assert "no effect" in hint.text()
    binding.set("dataset.regularization_folders", [DatasetFolder("/somewhere/dogs", 1)])
    assert "1 class image folder" in hint.text()


@pytest.mark.slow
def test_generate_dialog_makes_images_and_adds_the_folder(page, qtbot, tmp_path, artifacts_dir):
    panel = page.regularization
    page.binding.set("dataset.class_prompt", "")
    dlg = panel.open_generate_dialog()
    qtbot.waitExposed(dlg)
    dlg.prompt.setText("a photo of a shape")
    assert dlg.folder.text().endswith("a_photo_of_a_shape")  # the default folder follows the prompt
    dlg.count.setValue(3)
    dlg.size.setValue(64)
    dlg.steps.setValue(2)
    folder = tmp_path / "generated"
    dlg.folder.setText(str(folder))
    dlg.grab().save(str(artifacts_dir / "regularization_generate_dialog.png"))
    with qtbot.waitSignal(dlg.generated, timeout=60000) as blocker:
        assert dlg.start()
        assert dlg.is_running() and not dlg.generate_button.isEnabled()
    folder_arg, result = blocker.args
    assert folder_arg == str(folder)
    assert (result.written, result.cancelled) == (3, False)
    assert dlg.progress.value() == 3 and "Made 3 class images" in dlg.status.text()
    cfg = page.binding.config.dataset
    assert [f.path for f in cfg.regularization_folders] == [str(folder)]
    assert cfg.class_prompt == "a photo of a shape"
    assert panel.image_count() == 3
    assert (folder / "class_00000.txt").read_text() == "a photo of a shape"
    qtbot.waitUntil(lambda: not dlg.is_running())
    dlg.cancel_or_close()
    assert not dlg.isVisible()


@pytest.mark.slow
def test_generate_dialog_cancel(page, qtbot, tmp_path):
    dlg = page.regularization.open_generate_dialog()
    dlg.prompt.setText("a photo of a shape")
    dlg.count.setValue(50)
    dlg.size.setValue(64)
    dlg.steps.setValue(2)
    dlg.folder.setText(str(tmp_path / "gen"))
    with qtbot.waitSignal(dlg.generated, timeout=60000) as blocker:
        dlg.start()
        qtbot.waitUntil(lambda: dlg.progress.maximum() == 50 and dlg.progress.value() >= 1, timeout=30000)
        dlg.close()  # closing while running cancels and keeps the dialog until the worker stops
        assert dlg.isVisible() or dlg.is_running()
    result = blocker.args[1]
    assert result.cancelled and 1 <= result.written < 50
    assert "Cancelled" in dlg.status.text()
    assert len(list((tmp_path / "gen").glob("*.png"))) == result.written
