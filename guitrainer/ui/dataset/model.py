"""Qt model of the dataset: a list model over DatasetItems, a filter proxy and the thumbnail delegate."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from pathlib import Path

from PySide6.QtCore import (
    QAbstractListModel,
    QModelIndex,
    QObject,
    QPersistentModelIndex,
    QRect,
    QRectF,
    QSize,
    QSortFilterProxyModel,
    Qt,
    QTimer,
)
from PySide6.QtGui import QColor, QFont, QFontMetrics, QImage, QPainter, QPainterPath, QPalette, QPen
from PySide6.QtWidgets import QStyle, QStyledItemDelegate, QStyleOptionViewItem

from guitrainer.core.dataset.scan import DatasetItem, Flag, flag_descriptions, split_tags
from guitrainer.ui.dataset.thumbnails import GRID_SIZE, ThumbnailLoader

log = logging.getLogger(__name__)

ItemRole = Qt.ItemDataRole.UserRole + 1
CaptionRole = Qt.ItemDataRole.UserRole + 2
FlagsRole = Qt.ItemDataRole.UserRole + 3
HasCaptionRole = Qt.ItemDataRole.UserRole + 4
PathRole = Qt.ItemDataRole.UserRole + 5
ThumbStateRole = Qt.ItemDataRole.UserRole + 6  # "ready", "loading", "failed"

BADGES: dict[Flag, str] = {
    Flag.UNREADABLE: "ERR",
    Flag.TRUNCATED: "CUT",
    Flag.EMPTY: "0 B",
    Flag.SMALL: "LOW",
    Flag.LARGE: "BIG",
    Flag.CMYK: "CMYK",
    Flag.HIGH_BIT_DEPTH: "16b",
    Flag.ALPHA: "α",
    Flag.PALETTE: "PAL",
    Flag.EXIF_ROTATED: "↻",
    Flag.CAPTION_NOT_UTF8: "ENC",
    Flag.CAPTION_UNREADABLE: "CAP?",
}
_BADGE_ORDER = list(BADGES)


class DatasetModel(QAbstractListModel):
    """The imported images, in import order. Thumbnails come from a shared ThumbnailLoader.

    Thumbnails that become ready are collected and announced together once control returns to the
    event loop: one ``dataChanged`` (DecorationRole only) per run of adjacent rows instead of one per image.
    """

    def __init__(self, loader: ThumbnailLoader, parent: QObject | None = None, thumb_size: int = GRID_SIZE):
        super().__init__(parent)
        self._items: list[DatasetItem] = []
        self._rows: dict[str, int] = {}
        self.loader = loader
        self.thumb_size = thumb_size
        self._thumb_paths: set[str] = set()
        self._thumb_timer = QTimer(self)
        self._thumb_timer.setSingleShot(True)
        self._thumb_timer.setInterval(0)
        self._thumb_timer.timeout.connect(self.flush_thumbnails)
        loader.ready.connect(self._on_thumb)

    # ------------------------------------------------------------------ Qt API
    def rowCount(self, parent: QModelIndex | QPersistentModelIndex = QModelIndex()) -> int:  # noqa: B008
        return 0 if parent.isValid() else len(self._items)

    def data(self, index: QModelIndex | QPersistentModelIndex, role: int = Qt.ItemDataRole.DisplayRole):
        if not index.isValid() or index.row() >= len(self._items):
            return None
        item = self._items[index.row()]
        if role == Qt.ItemDataRole.DisplayRole:
            return item.name
        if role == Qt.ItemDataRole.DecorationRole:
            return self.loader.get(str(item.image_path), self.thumb_size)
        if role == ThumbStateRole:
            key = str(item.image_path)
            if self.loader.failed(key, self.thumb_size):
                return "failed"
            return "ready" if self.loader.get(key, self.thumb_size) is not None else "loading"
        if role == Qt.ItemDataRole.ToolTipRole:
            return tooltip_for(item)
        if role == ItemRole:
            return item
        if role == CaptionRole:
            return item.caption
        if role == FlagsRole:
            return item.flags
        if role == HasCaptionRole:
            return item.has_caption
        if role == PathRole:
            return str(item.image_path)
        return None

    # ------------------------------------------------------------------ items
    @property
    def items(self) -> list[DatasetItem]:
        return self._items

    def item(self, row: int) -> DatasetItem:
        return self._items[row]

    def row_of(self, path: str | Path) -> int | None:
        return self._rows.get(str(path))

    def add_items(self, items: Iterable[DatasetItem]) -> int:
        new = [it for it in items if str(it.image_path) not in self._rows]
        if not new:
            return 0
        first = len(self._items)
        self.beginInsertRows(QModelIndex(), first, first + len(new) - 1)
        for i, it in enumerate(new):
            self._rows[str(it.image_path)] = first + i
        self._items.extend(new)
        self.endInsertRows()
        return len(new)

    def remove_items(self, items: Iterable[DatasetItem]) -> int:
        """Remove items from the dataset (never touches files). Returns how many were removed."""
        rows = sorted({r for it in items if (r := self._rows.get(str(it.image_path))) is not None}, reverse=True)
        # remove contiguous runs from the end so indexes stay valid
        i = 0
        while i < len(rows):
            hi = rows[i]
            lo = hi
            while i + 1 < len(rows) and rows[i + 1] == lo - 1:
                i += 1
                lo = rows[i]
            self.beginRemoveRows(QModelIndex(), lo, hi)
            for it in self._items[lo : hi + 1]:
                self.loader.forget(str(it.image_path))
            del self._items[lo : hi + 1]
            self.endRemoveRows()
            i += 1
        self._rows = {str(it.image_path): n for n, it in enumerate(self._items)}
        return len(rows)

    def clear(self) -> None:
        self.beginResetModel()
        self._items = []
        self._rows = {}
        self.endResetModel()

    def refresh_paths(self, caption_paths: Iterable[Path]) -> list[DatasetItem]:
        """Re-read the captions at these paths and repaint their rows. Returns the items touched."""
        wanted = {Path(p) for p in caption_paths}
        touched = []
        for row, it in enumerate(self._items):
            if it.caption_path in wanted:
                it.reload_caption()
                idx = self.index(row)
                self.dataChanged.emit(idx, idx)
                touched.append(it)
        return touched

    def refresh_item(self, item: DatasetItem) -> None:
        row = self._rows.get(str(item.image_path))
        if row is not None:
            idx = self.index(row)
            self.dataChanged.emit(idx, idx)

    def refresh_all(self) -> None:
        if self._items:
            self.dataChanged.emit(self.index(0), self.index(len(self._items) - 1))

    def _on_thumb(self, path: str, size: int) -> None:
        if size != self.thumb_size:
            return
        self._thumb_paths.add(path)
        if not self._thumb_timer.isActive():
            self._thumb_timer.start()

    def flush_thumbnails(self) -> int:
        """Announce the thumbnails that became ready since the last flush. Returns the dataChanged count."""
        self._thumb_timer.stop()
        paths, self._thumb_paths = self._thumb_paths, set()
        rows = sorted(r for p in paths if (r := self._rows.get(p)) is not None)
        emitted = 0
        roles = [Qt.ItemDataRole.DecorationRole]
        i = 0
        while i < len(rows):
            j = i
            while j + 1 < len(rows) and rows[j + 1] == rows[j] + 1:
                j += 1
            self.dataChanged.emit(self.index(rows[i]), self.index(rows[j]), roles)
            emitted += 1
            i = j + 1
        return emitted


def tooltip_for(item: DatasetItem) -> str:
    lines = [f"<b>{_esc(item.name)}</b>", _esc(str(item.image_path.parent))]
    if item.width:
        lines.append(f"{item.width} × {item.height} px, repeats {item.repeats}")
    if item.flags:  # with the reason the scan found ("… is a HEIC image with a .jpg extension"), not just the flag
        lines.append("<br>".join(f"⚠ {_esc(text)}" for text in flag_descriptions(item)))
    cap = item.caption.strip()
    lines.append(f"<i>{_esc(cap[:300])}</i>" if cap else "<i>no caption</i>")
    return "<br>".join(lines)


def _esc(s: str) -> str:
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


class DatasetFilterProxy(QSortFilterProxyModel):
    """Filter by caption state / flags, a text search in captions and file names, and one tag."""

    MODES = ("all", "captioned", "uncaptioned", "flagged")

    def __init__(self, parent: QObject | None = None):
        super().__init__(parent)
        self._mode = "all"
        self._text = ""
        self._tag = ""
        #: the image being edited: it stays in view until the user moves on, even when an edit (autosave)
        #: makes it stop matching the filter, so typing never lands in another image
        self._pinned: object | None = None
        self._unpin_timer = QTimer(self)
        self._unpin_timer.setSingleShot(True)
        self._unpin_timer.setInterval(0)
        self._unpin_timer.timeout.connect(lambda: self._refilter(lambda: None))

    @property
    def mode(self) -> str:
        return self._mode

    @property
    def tag(self) -> str:
        return self._tag

    def set_mode(self, mode: str) -> None:
        if mode not in self.MODES:
            raise ValueError(f"`mode` must be one of {self.MODES}, got {mode!r}")
        self._change(_mode=mode)

    def set_text(self, text: str) -> None:
        self._change(_text=text.strip().casefold())

    def set_tag(self, tag: str) -> None:
        self._change(_tag=tag.strip())

    def _change(self, **values: str) -> None:
        """A filter the user set applies to every image, the pinned one too (it stays pinned if it matches)."""
        pinned = self._pinned

        def change() -> None:
            for name, value in values.items():
                setattr(self, name, value)
            self._pinned = None

        self._refilter(change)
        if pinned is not None and self.matches(pinned):  # type: ignore[arg-type]
            self._pinned = pinned

    def pin(self, item: object | None) -> None:
        """Keep ``item`` (the image being edited) in view whatever the filter says; the one pinned before
        leaves the view now if it no longer matches (the user moved on)."""
        if item is self._pinned:
            return
        old, self._pinned = self._pinned, item
        if old is not None and self.is_filtering():
            # on the next event-loop turn: this is called while the view changes its current row
            self._unpin_timer.start()

    @property
    def pinned(self) -> object | None:
        return self._pinned

    def _refilter(self, change: Callable[[], None]) -> None:
        """Change the filter and re-run it (Qt >= 6.9 API where available)."""
        if hasattr(self, "beginFilterChange"):
            self.beginFilterChange()
            change()
            self.endFilterChange(QSortFilterProxyModel.Direction.Rows)
        else:  # Qt < 6.9
            change()
            self.invalidateFilter()

    def is_filtering(self) -> bool:
        return self._mode != "all" or bool(self._text) or bool(self._tag)

    def filterAcceptsRow(self, source_row: int, source_parent: QModelIndex | QPersistentModelIndex) -> bool:
        model = self.sourceModel()
        if not isinstance(model, DatasetModel):
            return True
        item = model.item(source_row)
        return item is self._pinned or self.matches(item)

    def matches(self, item: DatasetItem) -> bool:
        """Whether ``item`` passes the filter (pinned or not)."""
        if self._mode == "captioned" and not item.has_caption:
            return False
        if self._mode == "uncaptioned" and item.has_caption:
            return False
        if self._mode == "flagged" and not item.flags:
            return False
        if self._tag and self._tag not in split_tags(item.caption):
            return False
        if self._text:
            return self._text in item.caption.casefold() or self._text in item.name.casefold()
        return True


class ThumbnailDelegate(QStyledItemDelegate):
    """Draws a thumbnail card: image (or a placeholder), name, caption dot and flag badges."""

    PAD = 6
    TEXT_H = 20

    def __init__(self, thumb_size: int = GRID_SIZE, parent: QObject | None = None):
        super().__init__(parent)
        self.thumb_size = thumb_size
        self._badge_font = QFont()
        self._badge_font.setPointSizeF(max(6.5, self._badge_font.pointSizeF() * 0.72))
        self._badge_font.setBold(True)

    def sizeHint(self, option: QStyleOptionViewItem, index: QModelIndex | QPersistentModelIndex) -> QSize:
        return QSize(self.thumb_size + 2 * self.PAD, self.thumb_size + 2 * self.PAD + self.TEXT_H)

    def paint(self, painter: QPainter, option: QStyleOptionViewItem, index: QModelIndex | QPersistentModelIndex) -> None:
        painter.save()
        painter.setRenderHint(QPainter.RenderHint.Antialiasing, True)
        pal = option.palette
        r = option.rect.adjusted(2, 2, -2, -2)
        selected = bool(option.state & QStyle.StateFlag.State_Selected)
        card = QPainterPath()
        card.addRoundedRect(QRectF(r), 6, 6)
        if selected:
            painter.fillPath(card, pal.color(QPalette.ColorRole.Highlight))
        elif option.state & QStyle.StateFlag.State_MouseOver:
            painter.fillPath(card, pal.color(QPalette.ColorRole.AlternateBase))

        box = QRect(r.left() + self.PAD - 2, r.top() + self.PAD - 2, self.thumb_size, self.thumb_size)
        img = index.data(Qt.ItemDataRole.DecorationRole)
        if isinstance(img, QImage) and not img.isNull():
            scaled = QSize(img.width(), img.height()).scaled(box.size(), Qt.AspectRatioMode.KeepAspectRatio)
            target = QRect(0, 0, scaled.width(), scaled.height())
            target.moveCenter(box.center())
            if img.hasAlphaChannel():
                _checker(painter, target)
            painter.drawImage(target, img)
        else:
            state = index.data(ThumbStateRole)
            painter.fillRect(box.adjusted(8, 8, -8, -8), pal.color(QPalette.ColorRole.Mid).lighter(130))
            painter.setPen(pal.color(QPalette.ColorRole.PlaceholderText))
            painter.drawText(box, Qt.AlignmentFlag.AlignCenter, "cannot show" if state == "failed" else "…")

        flags = index.data(FlagsRole) or set()
        if flags:
            painter.save()
            self._badges(painter, box, sorted(flags, key=_BADGE_ORDER.index))
            painter.restore()

        # caption state dot + name
        text_rect = QRect(r.left() + self.PAD, box.bottom() + 4, r.width() - 2 * self.PAD, self.TEXT_H - 2)
        dot = QRect(text_rect.left(), text_rect.center().y() - 4, 8, 8)
        if index.data(HasCaptionRole):
            painter.setPen(Qt.PenStyle.NoPen)
            painter.setBrush(QColor(60, 170, 90))
        else:
            painter.setPen(QPen(pal.color(QPalette.ColorRole.PlaceholderText), 1.2))
            painter.setBrush(Qt.BrushStyle.NoBrush)
        painter.drawEllipse(dot)
        name_rect = text_rect.adjusted(13, 0, 0, 0)
        painter.setPen(pal.color(QPalette.ColorRole.HighlightedText if selected else QPalette.ColorRole.Text))
        fm = QFontMetrics(option.font)
        painter.drawText(
            name_rect,
            int(Qt.AlignmentFlag.AlignVCenter | Qt.AlignmentFlag.AlignLeft),
            fm.elidedText(str(index.data(Qt.ItemDataRole.DisplayRole)), Qt.TextElideMode.ElideMiddle, name_rect.width()),
        )
        painter.restore()

    def _badges(self, painter: QPainter, box: QRect, flags: list[Flag]) -> None:
        painter.setFont(self._badge_font)
        fm = QFontMetrics(self._badge_font)
        x, y = box.left() + 4, box.top() + 4
        for f in flags:
            text = BADGES[f]
            w = fm.horizontalAdvance(text) + 8
            h = fm.height() + 2
            if x + w > box.right() - 2:
                x, y = box.left() + 4, y + h + 3
            rect = QRectF(x, y, w, h)
            path = QPainterPath()
            path.addRoundedRect(rect, 4, 4)
            painter.fillPath(path, QColor(200, 45, 45, 235) if f.severe else QColor(225, 150, 20, 235))
            painter.setPen(QColor(255, 255, 255))
            painter.drawText(rect, Qt.AlignmentFlag.AlignCenter, text)
            x += w + 3


def _checker(painter: QPainter, rect: QRect, cell: int = 8) -> None:
    painter.fillRect(rect, QColor(235, 235, 235))
    dark = QColor(200, 200, 200)
    for yy in range(rect.top(), rect.bottom(), cell):
        for xx in range(rect.left() + ((yy - rect.top()) // cell % 2) * cell, rect.right(), 2 * cell):
            painter.fillRect(QRect(xx, yy, cell, cell).intersected(rect), dark)
