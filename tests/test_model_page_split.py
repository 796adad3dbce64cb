"""Model page (offscreen): a split install's files dropped or chosen together go where their tensors say; the
text-encoder row shows for a split install only and names what the set lacks; a one-file model takes no parts."""

from __future__ import annotations

import pytest
from helpers import fake_device
from PySide6.QtCore import QMimeData, QPoint, QPointF, QSettings, Qt, QUrl
from PySide6.QtGui import QDragEnterEvent, QDropEvent
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QFileDialog

from guitrainer.ui.binding import ConfigBinding
from guitrainer.ui.model.page import ModelPage

pytestmark = pytest.mark.slow  # builds a tiny Flux (a few seconds)


@pytest.fixture(scope="module")
def parts(tmp_path_factory):
    from helpers import tiny_flux

    return tiny_flux.save_split(tiny_flux.build(), tmp_path_factory.mktemp("flux_split"))


@pytest.fixture
def page(qtbot, tmp_path):
    settings = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
    page = ModelPage(ConfigBinding(), settings=settings, probe=lambda: fake_device("rtx4090"), auto_probe=False)
    qtbot.addWidget(page)
    page.resize(1300, 740)
    page.show()
    return page


def drop(widget, paths) -> tuple[QDragEnterEvent, QDropEvent]:
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(p)) for p in paths])
    enter = QDragEnterEvent(QPoint(5, 5), Qt.DropAction.CopyAction, mime, Qt.MouseButton.LeftButton,
                            Qt.KeyboardModifier.NoModifier)
    widget.dragEnterEvent(enter)
    ev = QDropEvent(QPointF(5, 5), Qt.DropAction.CopyAction, mime, Qt.MouseButton.LeftButton,
                    Qt.KeyboardModifier.NoModifier)
    widget.dropEvent(ev)
    return enter, ev


def test_four_files_dropped_together_make_one_model(page, parts):
    binding = page.binding
    assert not page.text_encoders.isVisibleTo(page)  # the demo: no split parts to show
    files = [parts["vae"], parts["clip_l"], parts["transformer"], parts["t5"]]  # in no particular order
    enter, ev = drop(page.model_picker.edit, files)
    assert enter.isAccepted() and ev.isAccepted()
    assert binding.get("model.base") == str(parts["transformer"])
    assert binding.get("model.family") == "flux1"
    assert set(binding.get("model.text_encoders")) == {str(parts["clip_l"]), str(parts["t5"])}
    assert binding.get("model.vae") == str(parts["vae"])
    assert page.text_encoders.isVisibleTo(page)
    assert "clip_l.safetensors" in page.text_encoders.files_label.text()
    assert not page.has_errors(), page.error_text()
    assert "split install" in page.model_picker.message_label.text()
    assert "Choose its" not in page.model_picker.message_label.text()  # the row says what is chosen and lacking

    # the demo holds its own text encoders and VAE: the split parts go with the split model
    page.model_picker.choose("demo")
    assert binding.get("model.text_encoders") == [] and binding.get("model.vae") == ""
    assert not page.text_encoders.isVisibleTo(page)


def test_a_set_lacking_t5_blocks_the_start_and_says_so(page, parts, monkeypatch):
    chosen = [str(parts["transformer"]), str(parts["clip_l"]), str(parts["vae"])]
    monkeypatch.setattr(QFileDialog, "getOpenFileNames", staticmethod(lambda *a, **k: (chosen, "")))
    qtbot_click(page.model_picker.file_button)
    assert page.binding.get("model.base") == str(parts["transformer"])
    assert page.has_errors() and "T5" in page.error_text()
    assert "T5" in page.text_encoders.status.text() and page.text_encoders.status.isVisibleTo(page)

    # Files… on the row adds the missing one: the problem goes
    both = [str(parts["clip_l"]), str(parts["t5"])]
    monkeypatch.setattr(QFileDialog, "getOpenFileNames", staticmethod(lambda *a, **k: (both, "")))
    qtbot_click(page.text_encoders.files_button)
    assert page.binding.get("model.text_encoders") == both
    assert not page.has_errors(), page.error_text()

    # Clear empties the list, and the missing parts are named again
    qtbot_click(page.text_encoders.clear_button)
    assert page.binding.get("model.text_encoders") == [] and page.has_errors()


def test_files_without_a_transformer_change_nothing_and_say_why(page, parts):
    enter, ev = drop(page.model_picker.edit, [parts["clip_l"], parts["vae"]])
    assert ev.isAccepted()
    assert page.binding.get("model.base") == "demo" and page.binding.get("model.text_encoders") == []
    assert "transformer" in page.model_picker.message_label.text()
    assert page.model_picker.property("detection_level") == "warning"


def qtbot_click(button) -> None:
    QTest.mouseClick(button, Qt.MouseButton.LeftButton)


@pytest.mark.parametrize(("family", "text_part", "file_word"), [("chroma", "t5", "t5xxl"), ("zimage", "qwen3", "qwen_3"),
                                                             ("qwenimage", "qwen25vl", "qwen_2.5_vl")])
def test_a_new_familys_files_dropped_together_make_one_model(page, tmp_path, family, text_part, file_word):
    """Chroma's, Z-Image's and Qwen-Image's split installs (three files each) go where their tensors say, the family is
    detected, and a set without its text encoder blocks the start naming the file to add."""
    from helpers import tiny_chroma, tiny_qwenimage, tiny_zimage

    helper = {"chroma": tiny_chroma, "zimage": tiny_zimage, "qwenimage": tiny_qwenimage}[family]
    files = helper.save_split(helper.build(), tmp_path / family)
    binding = page.binding
    enter, ev = drop(page.model_picker.edit, [files["vae"], files[text_part], files["transformer"]])
    assert enter.isAccepted() and ev.isAccepted()
    assert binding.get("model.base") == str(files["transformer"]) and binding.get("model.family") == family
    assert binding.get("model.text_encoders") == [str(files[text_part])] and binding.get("model.vae") == str(files["vae"])
    assert page.text_encoders.isVisibleTo(page) and file_word in page.text_encoders.files_label.text()
    assert not page.has_errors(), page.error_text()
    drop(page.model_picker.edit, [files["vae"], files["transformer"]])
    assert page.has_errors() and "is missing" in page.error_text()
