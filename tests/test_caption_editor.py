"""The caption editor's preview: an idle page with an image shown does no work (no layout loop)."""

from __future__ import annotations

import resource

from PIL import Image
from PySide6.QtCore import QEvent, QObject

from guitrainer.config import TrainingConfig
from guitrainer.ui.binding import ConfigBinding
from guitrainer.ui.dataset.page import DatasetPage


class _Counter(QObject):
    def __init__(self) -> None:
        super().__init__()
        self.counts: dict[QEvent.Type, int] = {}

    def eventFilter(self, _obj: QObject, e: QEvent) -> bool:  # noqa: N802 - Qt's name
        self.counts[e.type()] = self.counts.get(e.type(), 0) + 1
        return False


def test_an_idle_page_showing_an_image_stays_idle(qtbot, tmp_path):
    page = DatasetPage(ConfigBinding(TrainingConfig()))
    qtbot.addWidget(page)
    page.resize(1280, 860)
    page.show()
    try:
        for i in range(3):  # square and captioned: the shape that set off the loop
            Image.new("RGB", (64, 64), (30, 140, 90 + i)).save(tmp_path / f"{i}.png")
            (tmp_path / f"{i}.txt").write_text("tag, red", encoding="utf-8")
        with qtbot.waitSignal(page.import_finished, timeout=10000):
            page.add_paths([tmp_path])
        preview = page.editor.preview
        qtbot.waitUntil(lambda: preview.has_image(), timeout=5000)
        qtbot.wait(300)  # thumbnails, summary and first layouts settle

        counter = _Counter()
        preview.installEventFilter(counter)
        before = resource.getrusage(resource.RUSAGE_SELF)
        qtbot.wait(500)
        after = resource.getrusage(resource.RUSAGE_SELF)
        preview.removeEventFilter(counter)
        cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
        # Before the fix the preview's pixmap re-laid the page out, which resized the preview, ... forever:
        # hundreds of resizes a second and a GUI thread (and the GIL) 100 % busy.
        assert counter.counts.get(QEvent.Type.Resize, 0) <= 2, counter.counts
        assert cpu < 0.25, f"{cpu:.2f} s of CPU in 0.5 s idle"

        pm = preview.scaled_pixmap()  # the image is painted, scaled to fit, aspect kept
        assert not pm.isNull() and pm.width() <= preview.width() and pm.height() <= preview.height()
        assert pm.width() == pm.height() == min(preview.width(), preview.height()) - 12
    finally:
        page.shutdown()
