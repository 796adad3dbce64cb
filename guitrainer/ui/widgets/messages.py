"""Message boxes: every one the app shows is made here (a warning, an error with details, a question, About).

One place for how a box looks and answers: each is at least as wide as its title (:func:`fit_title`), a
question's buttons say what each answer is (:class:`Button`), and the caller hears the answer as a word
("save", "yes") instead of a button object. Non-blocking boxes (:func:`warning`, :func:`error`, :func:`ask`)
are opened with ``open()`` and returned, so a test (or the real-window tests' ``ModalAnswerer``) finds and
answers them; :func:`question` waits for its answer (``exec()``). Tests may patch these functions.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QAbstractButton, QGridLayout, QMessageBox, QSizePolicy, QSpacerItem, QWidget

#: The type of the boxes these functions return (callers keep the open ones, tests answer them).
MessageBox = QMessageBox

#: "ok", "yes", "no", "cancel": Qt's standard buttons (their own, translated text unless one is given);
#: "accept", "reject", "destructive": a button of that role, with the text given.
ButtonKind = Literal["ok", "yes", "no", "cancel", "accept", "reject", "destructive"]

_STANDARD = {
    "ok": QMessageBox.StandardButton.Ok,
    "yes": QMessageBox.StandardButton.Yes,
    "no": QMessageBox.StandardButton.No,
    "cancel": QMessageBox.StandardButton.Cancel,
}
_ROLES = {
    "accept": QMessageBox.ButtonRole.AcceptRole,
    "reject": QMessageBox.ButtonRole.RejectRole,
    "destructive": QMessageBox.ButtonRole.DestructiveRole,
}


@dataclass(frozen=True)
class Button:
    """One button of a question. Clicking it answers ``answer`` (the kind's name when not given).

    Escape (or closing the box) clicks the button Qt picks for it: Cancel, else the one "reject" button,
    else No.
    """

    kind: ButtonKind
    text: str = ""
    answer: str = ""
    name: str = ""  # object name, for tests


YES_NO = (Button("yes"), Button("no"))


def fit_title(box: QMessageBox) -> QMessageBox:
    """Make a message box at least as wide as its title, so window managers do not cut the title off.

    A spacer row in the box's own grid widens it (Qt's documented way); a style-sheet minimum width on the
    message label instead made Qt lay the text out for one width and show it at another, cutting lines off.
    Call it last: a later setText / setInformativeText rebuilds the box's layout.
    """
    need = box.fontMetrics().horizontalAdvance(box.windowTitle()) + 160  # buttons and frame of the title bar
    grid = box.layout()
    if isinstance(grid, QGridLayout):
        spacer = QSpacerItem(need, 0, QSizePolicy.Policy.Minimum, QSizePolicy.Policy.Expanding)
        grid.addItem(spacer, grid.rowCount(), 0, 1, grid.columnCount())
    return box


def _box(icon: QMessageBox.Icon, parent: QWidget | None, title: str, text: str, info: str, name: str) -> QMessageBox:
    box = QMessageBox(icon, title, text, QMessageBox.StandardButton.NoButton, parent)
    if name:
        box.setObjectName(name)
    if info:
        box.setInformativeText(info)
    return box


def _add_buttons(box: QMessageBox, buttons: Sequence[Button], default: str) -> dict[QAbstractButton, str]:
    """Put ``buttons`` on ``box``; returns each one's answer by the button Qt made."""
    answers: dict[QAbstractButton, str] = {}
    for b in buttons:
        if b.kind in _STANDARD:
            made = box.addButton(_STANDARD[b.kind])
            if b.text:
                made.setText(b.text)
        else:
            made = box.addButton(b.text, _ROLES[b.kind])
        if b.name:
            made.setObjectName(b.name)
        answers[made] = b.answer or b.kind
        if answers[made] == default:
            box.setDefaultButton(made)
    return answers


def _answer(box: QMessageBox, answers: dict[QAbstractButton, str]) -> str:
    """The answer of the button that closed ``box`` ("" when none did)."""
    return answers.get(box.clickedButton(), "")


def _show(box: QMessageBox) -> QMessageBox:
    fit_title(box)
    box.open()
    return box


def warning(parent: QWidget | None, title: str, text: str, *, info: str = "", name: str = "") -> QMessageBox:
    """A warning with OK, not blocking (opened and returned): something did not work, or cannot."""
    box = _box(QMessageBox.Icon.Warning, parent, title, text, info, name)
    box.addButton(QMessageBox.StandardButton.Ok)
    return _show(box)


def error(
    parent: QWidget | None, title: str, text: str, *, info: str = "", details: str = "", name: str = ""
) -> QMessageBox:
    """An error with OK, not blocking: the message (selectable, to copy it), ``info`` below it (what to try),
    and ``details`` (a traceback) under "Show Details…", never in the message itself."""
    box = _box(QMessageBox.Icon.Critical, parent, title, text, info, name)
    box.addButton(QMessageBox.StandardButton.Ok)
    box.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
    if details:
        box.setDetailedText(details)
    return _show(box)


def ask(
    parent: QWidget | None,
    title: str,
    text: str,
    buttons: Sequence[Button],
    answered: Callable[[str], None],
    *,
    info: str = "",
    default: str = "",
    name: str = "",
) -> QMessageBox:
    """A question, not blocking (opened and returned); ``answered(answer)`` follows when a button is clicked.

    ``default``: the answer of the button Return clicks ("" lets Qt choose).
    """
    box = _box(QMessageBox.Icon.Question, parent, title, text, info, name)
    answers = _add_buttons(box, buttons, default)
    box.finished.connect(lambda _result: answered(_answer(box, answers)))
    return _show(box)


def question(
    parent: QWidget | None,
    title: str,
    text: str,
    buttons: Sequence[Button] = YES_NO,
    *,
    info: str = "",
    default: str = "",
    name: str = "",
) -> str:
    """A question that must be answered before anything else happens (``exec()``); returns the answer.

    Yes / No unless ``buttons`` says otherwise; ``default`` as in :func:`ask`.
    """
    box = _box(QMessageBox.Icon.Question, parent, title, text, info, name)
    answers = _add_buttons(box, buttons, default)
    fit_title(box)
    box.exec()
    return _answer(box, answers)


def about(parent: QWidget | None, title: str, text: str) -> None:
    """Help ▸ About: the app's icon, name and version (rich text), and OK."""
    QMessageBox.about(parent, title, text)
