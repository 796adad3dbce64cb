"""ui.widgets.messages: every message box of the app is made there, answers with a word, and is as wide as
its title."""

from __future__ import annotations

import re
from pathlib import Path

from PySide6.QtCore import Qt, QTimer
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QMessageBox, QWidget

from guitrainer.ui.widgets import messages
from guitrainer.ui.widgets.messages import Button

UI = Path(__file__).resolve().parent.parent / "guitrainer" / "ui"


def test_no_other_ui_module_makes_a_message_box():
    """One helper per idiom: a QMessageBox made elsewhere would skip fit_title and the answers' words."""
    found = [
        f"{path.relative_to(UI)}:{n}"
        for path in sorted(UI.rglob("*.py"))
        if path.name != "messages.py" or path.parent.name != "widgets"
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if re.search(r"\bQMessageBox\b", line)
    ]
    assert found == []


def parent(qtbot) -> QWidget:  # noqa: ANN001
    """A shown window for the boxes (keep a reference: a window Python lets go of is deleted, boxes and all)."""
    w = QWidget()
    qtbot.addWidget(w)
    w.show()
    qtbot.waitExposed(w)
    return w


def by_text(box: QMessageBox, text: str):  # noqa: ANN201
    return next(b for b in box.buttons() if b.text().replace("&", "") == text)


SAVE_DISCARD_CANCEL = (
    Button("accept", "Save as preset…", "save"), Button("destructive", "Discard changes", "discard"), Button("cancel"),
)  # fmt: skip


def test_ask_opens_and_answers_with_the_clicked_buttons_word(qtbot):
    answers: list[str] = []
    owner = parent(qtbot)
    box = messages.ask(owner, "Load another preset?", "Unsaved.", SAVE_DISCARD_CANCEL, answers.append,
                       info="It replaces them.", default="save", name="preset_change_box")  # fmt: skip
    assert box.isVisible() and answers == []  # not blocking
    assert box.objectName() == "preset_change_box" and box.informativeText() == "It replaces them."
    assert box.icon() == QMessageBox.Icon.Question
    assert box.defaultButton() is by_text(box, "Save as preset…")
    assert box.buttonRole(by_text(box, "Discard changes")) == QMessageBox.ButtonRole.DestructiveRole
    by_text(box, "Discard changes").click()
    assert answers == ["discard"] and not box.isVisible()


def test_escape_answers_with_the_cancel_button_and_a_standard_button_keeps_its_identity(qtbot):
    answers: list[str] = []
    owner = parent(qtbot)
    box = messages.ask(owner, "Start anyway?", "Before you start:", (Button("yes", "Start anyway"), Button("cancel")),
                       answers.append, default="cancel")  # fmt: skip
    yes = box.button(QMessageBox.StandardButton.Yes)  # a standard Yes, relabelled (tests find it as such)
    assert yes is not None and yes.text() == "Start anyway" and box.buttonRole(yes) == QMessageBox.ButtonRole.YesRole
    assert box.defaultButton() is box.button(QMessageBox.StandardButton.Cancel)
    QTest.keyClick(box, Qt.Key.Key_Escape)
    assert answers == ["cancel"]
    box = messages.ask(owner, "Start anyway?", "Before you start:", (Button("yes", "Start anyway"), Button("cancel")),
                       answers.append)  # fmt: skip
    box.button(QMessageBox.StandardButton.Yes).click()
    assert answers == ["cancel", "yes"]


def test_question_waits_for_its_answer(qtbot):
    owner = parent(qtbot)

    def click_stop() -> None:
        box = owner.findChild(QMessageBox, "close_box")
        assert box is not None and box.isVisible()
        by_text(box, "Stop and save").click()

    QTimer.singleShot(0, click_stop)
    answer = messages.question(owner, "Training is running", "Training is still running.",
                               (Button("accept", "Stop and save", "stop"), Button("reject", "Keep training", "keep")),
                               default="keep", name="close_box")  # fmt: skip
    assert answer == "stop"


def test_question_asks_yes_or_no_unless_told_otherwise(qtbot):
    owner = parent(qtbot)
    seen: list[list[str]] = []

    def answer_no() -> None:
        box = owner.findChild(QMessageBox, "delete_box")
        seen.append(sorted(b.text().replace("&", "") for b in box.buttons()))
        box.button(QMessageBox.StandardButton.No).click()

    QTimer.singleShot(0, answer_no)
    assert messages.question(owner, "Delete preset", "Delete your preset “Mine”?", name="delete_box") == "no"
    assert seen == [["No", "Yes"]]


def test_an_error_keeps_the_traceback_under_details_and_its_text_selectable(qtbot):
    owner = parent(qtbot)
    box = messages.error(owner, "Training failed", "CUDA out of memory.", info="<b>What to try:</b> a batch of 1",
                         details="Traceback (most recent call last):\n  ...", name="training_error_box")  # fmt: skip
    assert box.isVisible() and box.icon() == QMessageBox.Icon.Critical
    assert box.text() == "CUDA out of memory." and "Traceback" not in box.text() and "Traceback" in box.detailedText()
    assert box.textInteractionFlags() & Qt.TextInteractionFlag.TextSelectableByMouse
    assert [b.text().replace("&", "") for b in box.buttons() if box.buttonRole(b) != QMessageBox.ButtonRole.ActionRole] == ["OK"]


def test_every_box_is_as_wide_as_its_title(qtbot):
    title = "This preset file cannot be used, and here is a title longer than its text"
    owner = parent(qtbot)
    box = messages.warning(owner, title, "No.", name="error_box")
    qtbot.waitUntil(box.isVisible)
    assert box.icon() == QMessageBox.Icon.Warning
    assert box.width() >= box.fontMetrics().horizontalAdvance(title) + 60
