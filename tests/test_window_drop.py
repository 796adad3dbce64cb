"""Drops anywhere on the main window reach the Dataset page: images and folders are imported, others reported."""

from __future__ import annotations

from pathlib import Path

from PIL import Image
from PySide6.QtCore import QMimeData, QPoint, QPointF, Qt, QUrl
from PySide6.QtGui import QDragEnterEvent, QDropEvent
from PySide6.QtWidgets import QApplication, QWidget

from guitrainer.ui.window.main_window import MainWindow

TRAINING_ROW = 2


def image(path: Path, colour=(200, 80, 40)) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (32, 24), colour).save(path)
    return path


def drag_and_drop(target: QWidget, paths: list[Path]) -> tuple[QDragEnterEvent, QDropEvent]:
    """What the platform sends: a drag enter at a point of ``target``, then the drop there.

    Qt offers the drag enter to ``target`` and then to its parents until one accepts drops, and
    delivers the drop to the widget that accepted the drag.
    """
    md = QMimeData()
    md.setUrls([QUrl.fromLocalFile(str(p)) for p in paths])
    pos = target.rect().center()
    buttons, mods = Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier
    enter = QDragEnterEvent(pos, Qt.DropAction.CopyAction, md, buttons, mods)
    QApplication.sendEvent(target, enter)
    drop = QDropEvent(QPointF(pos), Qt.DropAction.CopyAction, md, buttons, mods)
    QApplication.sendEvent(target, drop)
    return enter, drop


def names(window: MainWindow) -> list[str]:
    return sorted(it.name for it in window.dataset_page.items)


def test_images_and_a_folder_dropped_on_another_page_land_in_the_dataset(window, qtbot, tmp_path):
    folder = tmp_path / "5_mychar"
    for i in range(3):
        image(folder / f"f{i}.png", (40 * i, 120, 200))
    (folder / "f0.txt").write_text("mychar, smiling", encoding="utf-8")
    loose = [image(tmp_path / "loose" / "a.jpg"), image(tmp_path / "loose" / "b.webp")]
    window.nav.setCurrentRow(TRAINING_ROW)
    qtbot.wait(20)
    assert window.stack.currentWidget() is window.training_page and window.training_page.isVisible()

    with qtbot.waitSignal(window.dataset_page.import_finished, timeout=10000) as blocker:
        enter, drop = drag_and_drop(window.training_page, [folder, *loose])
        assert enter.isAccepted() and drop.isAccepted()  # the window took the drag the page did not
    assert names(window) == ["a.jpg", "b.webp", "f0.png", "f1.png", "f2.png"]
    assert blocker.args[0].added == 5 and not blocker.args[0].rejected
    assert window.nav.currentRow() == 0 and window.stack.currentWidget() is window.dataset_page
    item = {it.name: it for it in window.dataset_page.items}["f0.png"]
    assert item.caption == "mychar, smiling" and item.repeats == 5
    folders = {Path(f.path).name: f.repeats for f in window.binding.get("dataset.folders")}
    assert folders == {"5_mychar": 5, "loose": 1}

    # Straight onto the window (its page list, the frame): more images, same result.
    window.nav.setCurrentRow(TRAINING_ROW)
    more = image(tmp_path / "more" / "c.png")
    with qtbot.waitSignal(window.dataset_page.import_finished, timeout=10000):
        enter, drop = drag_and_drop(window.nav, [more])
        assert enter.isAccepted() and drop.isAccepted()
    assert "c.png" in names(window) and window.stack.currentWidget() is window.dataset_page


def test_unsupported_file_dropped_on_the_window_is_reported_not_imported(window, qtbot, tmp_path):
    pdf = tmp_path / "notes.pdf"
    pdf.write_bytes(b"%PDF-1.4 not an image")
    window.nav.setCurrentRow(TRAINING_ROW)
    with qtbot.waitSignal(window.dataset_page.import_finished, timeout=10000) as blocker:
        enter, drop = drag_and_drop(window, [pdf])
        assert enter.isAccepted() and drop.isAccepted()
    report = blocker.args[0]
    assert report.added == 0 and [Path(p).name for p, _ in report.rejected] == ["notes.pdf"]
    assert names(window) == [] and window.binding.get("dataset.folders") == []
    assert window.stack.currentWidget() is window.dataset_page
    assert "Not imported: notes.pdf" in window.dataset_page.status.text()


def test_remote_urls_are_refused_by_the_window(window, qtbot):
    md = QMimeData()
    md.setUrls([QUrl("https://example.com/a.png")])
    enter = QDragEnterEvent(QPoint(5, 5), Qt.DropAction.CopyAction, md, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier)
    QApplication.sendEvent(window, enter)
    assert not enter.isAccepted()
    window.dropEvent(QDropEvent(QPointF(5, 5), Qt.DropAction.CopyAction, md, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier))
    qtbot.wait(50)
    assert names(window) == [] and window.dataset_page.last_report is None
