"""Self-tests of the real-window harness, not of the app: the helpers the other real-window tests rely on
read and answer what they claim to (a wrong helper would make those tests pass or fail for nothing)."""

from __future__ import annotations

from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QMessageBox
from readouts import shows_size
from xinput import ModalAnswerer, click_discard, open_page, wait_for


def test_harness_size_reader_reads_what_people_write():
    """readouts.shows_size, which the VRAM hover test uses on tooltips."""
    assert shows_size("<b>UNet weights</b>: 1.6 GB", int(1.6 * 2**30))
    assert shows_size("LoRA: 12 MB", 12 * 2**20 + 300_000)
    assert not shows_size("LoRA: 12 MB", 20 * 2**20)
    assert not shows_size("no number here", 10)


def test_harness_modal_answerer_answers_a_question_run_by_exec(main_window, xin):
    """ModalAnswerer answers a modal question run by exec() (a nested event loop, as a close guard's is) with
    real input: Escape cancels it, click_discard clicks its Discard button."""
    buttons = QMessageBox.StandardButton
    results = []

    def ask() -> None:
        box = QMessageBox(QMessageBox.Icon.Question, "Unsaved changes", "Save your changes?",
                          buttons.Save | buttons.Discard | buttons.Cancel, main_window)
        results.append(buttons(box.exec()))

    for answer, expected in ((lambda _box: ["key", "Escape"], buttons.Cancel), (click_discard, buttons.Discard)):
        answerer = ModalAnswerer(xin, answer)
        try:
            open_page(main_window, xin, "Output")  # real input while nothing is modal yet
            asked = len(results)
            QTimer.singleShot(0, ask)
            wait_for(lambda asked=asked: len(results) > asked, 10, "the answer")
        finally:
            answerer.stop()
        assert results[-1] == expected and answerer.seen[0].title == "Unsaved changes"
