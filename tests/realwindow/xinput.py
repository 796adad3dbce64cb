"""Real input for real-window tests: xdotool moves the X pointer and presses keys while Qt's loop runs.

Every action runs ``xdotool`` as a separate X client and keeps processing Qt events until it is done,
so the app sees the events the X server delivers, exactly as from a person's mouse and keyboard.
Actions that open a modal dialog (whose ``exec()`` runs a nested event loop) are started with
``wait=False``; :class:`ModalAnswerer` then answers the dialog from a timer, which also runs in the
nested loop.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import shiboken6
from PySide6.QtCore import QEvent, QEventLoop, QObject, QPoint, QRect, Qt, QTimer
from PySide6.QtWidgets import (
    QAbstractButton,
    QApplication,
    QDialog,
    QLabel,
    QListWidget,
    QMessageBox,
    QProgressBar,
    QPushButton,
    QWidget,
)


def pump(ms: int = 20) -> None:
    """Let Qt handle what arrived (X events, timers, queued signals) for about ``ms`` milliseconds."""
    app = QApplication.instance()
    deadline = time.monotonic() + ms / 1000
    while True:
        app.processEvents(QEventLoop.ProcessEventsFlag.AllEvents, 10)
        if time.monotonic() >= deadline:
            return
        time.sleep(0.003)


def wait_for(condition: Callable[[], object], timeout_s: float = 5.0, what: str | Callable[[], str] = "") -> None:
    """Process events until ``condition()`` is true; AssertionError naming ``what`` (a text, or a function
    that describes the state at that moment) after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            described = what() if callable(what) else what
            raise AssertionError(f"timed out after {timeout_s:g} s waiting for {described or condition}")
        pump(15)


def global_point(widget: QWidget, local: QPoint | None = None) -> QPoint:
    """Screen coordinates of ``local`` of ``widget`` (default: the centre of its part not hidden by a scroll area)."""
    if local is None:
        visible = widget.visibleRegion().boundingRect()
        if visible.isEmpty():
            raise AssertionError(f"{widget.objectName() or type(widget).__name__} cannot be clicked: it is hidden or scrolled away")
        local = visible.center()
    return widget.mapToGlobal(local)


def global_rect(widget: QWidget, local: QRect) -> QRect:
    return QRect(widget.mapToGlobal(local.topLeft()), local.size())


class XInput:
    """xdotool on one display; ``env`` is that display's environment."""

    def __init__(self, env: dict[str, str]) -> None:
        self.env = env

    def run(self, *args: str, wait: bool = True, timeout_s: float = 30.0) -> subprocess.Popen:
        """``xdotool ARGS...``; with ``wait``, process Qt events until it has exited (and check it succeeded)."""
        proc = subprocess.Popen(["xdotool", *args], env=self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        if wait:
            wait_for(lambda: proc.poll() is not None, timeout_s, f"xdotool {' '.join(args)}")
            if proc.returncode != 0:
                raise RuntimeError(f"xdotool {' '.join(args)} failed: {proc.stderr.read().decode(errors='replace')}")
            pump(30)  # the events it caused
        return proc

    def activate(self, window: QWidget) -> None:
        """Give ``window`` the keyboard focus through the window manager, as a click on its title would."""
        self.run("windowactivate", "--sync", str(int(window.winId())))
        wait_for(window.isActiveWindow, 10, "the window to become active")

    def move(self, widget: QWidget, local: QPoint | None = None) -> QPoint:
        p = global_point(widget, local)
        self.run("mousemove", str(p.x()), str(p.y()))
        return p

    def click(self, widget: QWidget, local: QPoint | None = None, *, wait: bool = True, button: int = 1) -> None:
        p = global_point(widget, local)
        self.run("mousemove", str(p.x()), str(p.y()), "click", str(button), wait=wait)

    def double_click(self, widget: QWidget, local: QPoint | None = None) -> None:
        p = global_point(widget, local)
        self.run("mousemove", str(p.x()), str(p.y()), "click", "--repeat", "2", "--delay", "80", "1")

    def type(self, text: str, delay_ms: int = 25) -> None:
        """Type ``text`` as key presses into the focused widget."""
        self.run("type", "--delay", str(delay_ms), "--", text)

    def key(self, *keys: str, wait: bool = True) -> subprocess.Popen:
        """Press key combinations, e.g. ``key("ctrl+a")``, ``key("Escape")``."""
        return self.run("key", "--delay", "40", *keys, wait=wait)


@dataclass
class SeenDialog:
    """What a modal dialog said when it appeared."""

    title: str
    text: str
    informative: str
    buttons: dict[str, QMessageBox.ButtonRole] = field(default_factory=dict)


class ModalAnswerer(QObject):
    """Watches for modal dialogs and answers each once, with a real click or key.

    ``answer(dialog)`` returns xdotool arguments (for example ``["key", "Escape"]``) or None to leave
    the dialog alone. :func:`click_args` makes the arguments for clicking one of its buttons.
    """

    def __init__(self, xin: XInput, answer: Callable[[QDialog], list[str] | None]) -> None:
        super().__init__(QApplication.instance())
        self.xin = xin
        self.answer = answer
        self.seen: list[SeenDialog] = []
        self._answered: set[int] = set()
        self._timer = QTimer(self)
        self._timer.setInterval(60)
        self._timer.timeout.connect(self._tick)
        self._timer.start()

    def _tick(self) -> None:
        w = QApplication.activeModalWidget()
        # the C++ object, not the Python wrapper: a wrapper dropped by the app is rebuilt with another id()
        key = shiboken6.getCppPointer(w)[0] if isinstance(w, QDialog) else 0
        if not isinstance(w, QDialog) or not w.isVisible() or key in self._answered:
            return
        handle = w.windowHandle()
        if handle is None or not handle.isExposed() or not w.isActiveWindow():
            return
        self._answered.add(key)
        info = SeenDialog(w.windowTitle(), "", "")
        if isinstance(w, QMessageBox):
            info = SeenDialog(
                w.windowTitle(), w.text(), w.informativeText(), {b.text(): w.buttonRole(b) for b in w.buttons()}
            )
        self.seen.append(info)
        args = self.answer(w)
        if args:
            subprocess.Popen(["xdotool", *args], env=self.xin.env)  # no waiting: we are inside its exec()

    def stop(self) -> None:
        self._timer.stop()
        self.deleteLater()


def click_args(button: QAbstractButton) -> list[str]:
    """xdotool arguments that click ``button`` in the middle."""
    p = global_point(button)
    return ["mousemove", str(p.x()), str(p.y()), "click", "1"]


def button_with_role(box: QMessageBox, *roles: QMessageBox.ButtonRole) -> QAbstractButton | None:
    """The first button of ``box`` with one of ``roles`` (in the order given)."""
    for role in roles:
        for b in box.buttons():
            if box.buttonRole(b) == role:
                return b
    return None


def click_discard(box: QDialog) -> list[str] | None:
    """A :class:`ModalAnswerer` answer: click the button that throws the changes away (Discard / Don't save)."""
    if not isinstance(box, QMessageBox):
        return None
    button = button_with_role(box, QMessageBox.ButtonRole.DestructiveRole, QMessageBox.ButtonRole.NoRole)
    assert button is not None, {b.text(): box.buttonRole(b) for b in box.buttons()}
    return click_args(button)


def choose_in_combo(xin: XInput, combo, text: str) -> None:  # noqa: ANN001 - a QComboBox
    """Open ``combo`` with a click and click the entry reading ``text`` in its pop-up list."""
    row = combo.findText(text)
    assert row >= 0, f"{text!r} is not offered: {[combo.itemText(i) for i in range(combo.count())]}"
    xin.click(combo)
    view = combo.view()
    wait_for(lambda: view.isVisible() and view.window().windowHandle() is not None, 10, "the pop-up list")
    pump(150)  # the pop-up animates into place
    index = view.model().index(row, combo.modelColumn(), view.rootIndex())
    view.scrollTo(index)
    pump(30)
    xin.click(view.viewport(), view.visualRect(index).center())
    wait_for(lambda: not view.isVisible(), 10, "the pop-up list to close")


def maximize_by_title_bar(xin: XInput, window: QWidget) -> bool:
    """Double-click ``window``'s title bar (the window manager maximizes it); False if that did not work."""
    frame, inner = window.frameGeometry(), window.geometry()
    title_y = frame.top() + max(4, (inner.top() - frame.top()) // 2)
    xin.run("mousemove", str(frame.center().x()), str(title_y), "click", "--repeat", "2", "--delay", "60", "1")
    try:
        wait_for(window.isMaximized, 5, "the window to maximize")
    except AssertionError:
        return False
    pump(300)
    return True


def open_page(window: QWidget, xin: XInput, title: str) -> None:
    """Click the page called ``title`` in the main window's page list."""
    nav = window.findChild(QListWidget, "page_nav")
    (item,) = nav.findItems(title, Qt.MatchFlag.MatchExactly)
    xin.click(nav.viewport(), nav.visualItemRect(item).center())
    wait_for(lambda: nav.currentItem() is item, 10, f"the {title} page")


def close_discarding(window: QWidget, xin: XInput) -> None:
    """Close ``window`` at the end of a test, answering any "unsaved changes" question with its discard button."""

    def answer(box):  # noqa: ANN001, ANN202
        if isinstance(box, QMessageBox):
            b = button_with_role(box, QMessageBox.ButtonRole.DestructiveRole, QMessageBox.ButtonRole.NoRole)
            if b is not None:
                return click_args(b)
        return ["key", "Escape"]

    answerer = ModalAnswerer(xin, answer)
    try:
        window.close()
        # until it is really gone: a question answered after the test would stay open, and the next test's
        # answerer would meet it (a loaded X server takes seconds to deliver the click)
        wait_for(lambda: not window.isVisible(), 20, "the window to close at the end of the test")
    finally:
        answerer.stop()
    shutdown = getattr(getattr(window, "dataset_page", None), "shutdown", None)
    if shutdown is not None:
        shutdown()
    window.deleteLater()
    QApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete.value)  # processEvents() leaves deletions
    pump(50)


def train_and_wait(window, xin: XInput, timeout_s: float = 120) -> str:  # noqa: ANN001
    """Press Train (answering "Start anyway?" with its start button, if asked), wait for the end of the run
    with the progress bar full; returns the status line."""
    open_page(window, xin, "Training")
    badge = window.training_page.findChild(QLabel, "state_badge")

    def start_anyway(box):  # noqa: ANN001, ANN202
        if isinstance(box, QMessageBox) and box.objectName() == "start_confirm_box":
            return click_args(button_with_role(box, QMessageBox.ButtonRole.YesRole, QMessageBox.ButtonRole.AcceptRole))
        return None

    answers = ModalAnswerer(xin, start_anyway)
    try:
        xin.click(window.training_page.findChild(QPushButton, "train_button"))
        wait_for(lambda: badge.text() in ("Done", "Failed"), timeout_s, f"the run to end (badge: {badge.text()!r})")
    finally:
        answers.stop()
    status = window.training_page.findChild(QLabel, "status_label").text()
    assert badge.text() == "Done", status
    bar = window.training_page.findChild(QProgressBar, "progress_bar")
    assert bar.maximum() > 1 and bar.value() == bar.maximum(), (bar.value(), bar.maximum())
    return status
