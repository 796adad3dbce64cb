"""One-line labels whose text never changes the layout: elided to the width they get, the full text in
the tooltip, and their line kept when empty or hidden (a status line that comes and goes moves nothing)."""

from __future__ import annotations

from PySide6.QtCore import QSize, Qt
from PySide6.QtGui import QPainter, QPaintEvent, QResizeEvent
from PySide6.QtWidgets import QLabel, QSizePolicy, QStyle, QStyleOption, QWidget


class ElidedLabel(QLabel):
    """A plain-text, one-line QLabel that elides (``mode``) instead of widening or wrapping.

    ``text()`` is the full text; the tooltip holds it while it does not fit (unless a tooltip was set
    explicitly with :meth:`setToolTip`). The label keeps its height when hidden, so showing it later does
    not push the page down.
    """

    def __init__(
        self, text: str = "", parent: QWidget | None = None, *, mode: Qt.TextElideMode = Qt.TextElideMode.ElideRight
    ):
        super().__init__(text, parent)
        self._mode = mode
        self._own_tip: str | None = None
        self.setTextFormat(Qt.TextFormat.PlainText)
        self.setWordWrap(False)
        policy = QSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Fixed)
        policy.setRetainSizeWhenHidden(True)
        self.setSizePolicy(policy)

    def sizeHint(self) -> QSize:  # noqa: N802
        fm = self.fontMetrics()
        m = self.contentsMargins()
        return QSize(fm.horizontalAdvance(self.text()) + m.left() + m.right(), fm.height() + m.top() + m.bottom())

    def minimumSizeHint(self) -> QSize:  # noqa: N802
        return QSize(0, self.sizeHint().height())

    def elided(self) -> bool:
        """The text is cut short right now."""
        return self.fontMetrics().horizontalAdvance(self.text()) > self.contentsRect().width()

    def setText(self, text: str) -> None:  # noqa: N802
        super().setText(text)
        self._sync_tip()

    def setToolTip(self, tip: str) -> None:  # noqa: N802
        self._own_tip = tip or None
        super().setToolTip(tip)

    def _sync_tip(self) -> None:
        if self._own_tip is None:
            super().setToolTip(self.text() if self.elided() else "")

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802
        super().resizeEvent(event)
        self._sync_tip()

    def paintEvent(self, _event: QPaintEvent) -> None:  # noqa: N802
        p = QPainter(self)
        opt = QStyleOption()
        opt.initFrom(self)
        self.style().drawPrimitive(QStyle.PrimitiveElement.PE_Widget, opt, p, self)
        r = self.contentsRect()
        shown = self.fontMetrics().elidedText(self.text(), self._mode, r.width())
        across = self.alignment() & Qt.AlignmentFlag.AlignHorizontal_Mask
        p.setPen(self.palette().color(self.foregroundRole()))
        p.drawText(r, across | Qt.AlignmentFlag.AlignVCenter, shown)
