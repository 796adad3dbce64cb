"""VramMeter: the live VRAM estimate as a stacked bar, with one-click fixes and a precise check.

Re-estimates on every config change (coalesced with a 0-ms single-shot timer; an estimate takes
microseconds). "Check precisely" measures one real training step in a background thread
(:mod:`guitrainer.engine.memory`, which imports torch only then).
"""

from __future__ import annotations

import logging
import traceback
from types import SimpleNamespace
from typing import Any

from PySide6.QtCore import QEvent, QObject, QRectF, QSize, Qt, QThread, QTimer, Signal, Slot
from PySide6.QtGui import QColor, QHelpEvent, QPainter, QPaintEvent, QPen
from PySide6.QtWidgets import (
    QHBoxLayout,
    QLabel,
    QProgressBar,
    QPushButton,
    QSizePolicy,
    QToolTip,
    QVBoxLayout,
    QWidget,
)

from guitrainer.core import vram
from guitrainer.ui.binding import ConfigBinding

log = logging.getLogger(__name__)

LEVEL_COLORS = {"ok": QColor("#2e9d4f"), "warn": QColor("#e0a000"), "over": QColor("#d03030"), "unknown": QColor("#7a7a7a")}
PART_COLORS = {
    "cuda_context": "#8d8d8d",
    "unet": "#3f6fb5",
    "text_encoders": "#6a8fd0",
    "vae": "#9ab3e0",
    "lora_weights": "#8e5bb5",
    "lora_grads": "#b07ad6",
    "optimizer": "#c99be8",
    "activations": "#e07b39",
    "workspace": "#e8a36e",
    "slack": "#c8c8c8",
}
WARN_FRACTION = 0.85
MAX_HINTS = 3


class _Bar(QWidget):
    """Stacked horizontal bar of the estimate's parts against the device memory (custom painted)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.breakdown: vram.VramBreakdown | None = None
        self.level = "unknown"
        self.measured: int | None = None
        self.setMinimumSize(160, 18)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.setMouseTracking(True)

    def sizeHint(self) -> QSize:
        return QSize(400, 22)

    def _scale(self) -> float:
        b = self.breakdown
        if b is None:
            return 1.0
        return float(max(b.total, b.device_total or 0, self.measured or 0, 1))

    def segments(self) -> list[tuple[QRectF, vram.VramPart]]:
        """Rectangles of the non-empty parts, left to right."""
        b = self.breakdown
        if b is None:
            return []
        inner = QRectF(self.rect()).adjusted(1, 1, -1, -1)
        scale = self._scale()
        x = inner.left()
        out = []
        for part in b.parts:
            if part.bytes <= 0:
                continue
            w = inner.width() * part.bytes / scale
            out.append((QRectF(x, inner.top(), w, inner.height()), part))
            x += w
        return out

    def paintEvent(self, event: QPaintEvent) -> None:
        p = QPainter(self)
        p.setRenderHint(QPainter.RenderHint.Antialiasing, False)
        frame = QRectF(self.rect()).adjusted(0.5, 0.5, -0.5, -0.5)
        p.fillRect(frame, self.palette().base())
        for rect, part in self.segments():
            p.fillRect(rect, QColor(PART_COLORS.get(part.key, "#999999")))
        b = self.breakdown
        inner = QRectF(self.rect()).adjusted(1, 1, -1, -1)
        if b is not None and b.device_total:
            x = inner.left() + inner.width() * b.device_total / self._scale()
            p.setPen(QPen(QColor("#202020"), 2))
            p.drawLine(int(x), 0, int(x), self.height())
        if self.measured:
            x = inner.left() + inner.width() * self.measured / self._scale()
            p.setPen(QPen(QColor("#000000"), 1, Qt.PenStyle.DashLine))
            p.drawLine(int(x), 0, int(x), self.height())
        p.setPen(QPen(LEVEL_COLORS[self.level], 2))
        p.drawRect(frame.adjusted(0.5, 0.5, -0.5, -0.5))
        p.end()

    def event(self, e: QEvent) -> bool:
        if e.type() == QEvent.Type.ToolTip:
            he: QHelpEvent = e  # type: ignore[assignment]
            for rect, part in self.segments():
                if rect.contains(he.position()):
                    QToolTip.showText(he.globalPos(), f"<b>{part.label}</b>: {vram.format_bytes(part.bytes)}<br>{part.tooltip}", self)
                    return True
            QToolTip.hideText()
            e.ignore()
            return True
        return super().event(e)


class _MeasureWorker(QObject):
    """Runs engine.memory.measure_training_step in a worker thread."""

    finished = Signal(object)
    failed = Signal(str)

    def __init__(self, config: Any) -> None:
        super().__init__()
        self.config = config

    @Slot()
    def run(self) -> None:
        try:
            from guitrainer.engine.memory import measure_training_step  # imports torch, here only

            self.finished.emit(measure_training_step(self.config))
        except Exception:  # delivered to the GUI, never swallowed
            self.failed.emit(traceback.format_exc())


class VramMeter(QWidget):
    """Live VRAM estimate of the bound config: stacked bar, total, hint buttons, precise check."""

    estimate_updated = Signal(object)  # VramBreakdown
    measurement_finished = Signal(object)  # engine.memory.MemoryMeasurement
    measurement_failed = Signal(str)

    def __init__(self, binding: ConfigBinding, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.binding = binding
        self._device: Any = None
        self._device_name = ""
        self._breakdown: vram.VramBreakdown | None = None
        self._thread: QThread | None = None
        self._worker: _MeasureWorker | None = None
        self._hint_buttons: list[QPushButton] = []

        self.bar = _Bar(self)
        self.bar.setObjectName("vram_bar")
        self.total_label = QLabel(self)
        self.total_label.setObjectName("vram_total")
        self.total_label.setTextFormat(Qt.TextFormat.RichText)
        self.check_button = QPushButton("Check precisely", self)
        self.check_button.setToolTip("Measure one training step of exactly this config (takes a few seconds).")
        self.check_button.clicked.connect(self.check_precisely)
        self.busy = QProgressBar(self)
        self.busy.setRange(0, 0)
        self.busy.setMaximumWidth(70)
        self.busy.setMaximumHeight(12)
        self.busy.setTextVisible(False)
        self.busy.hide()
        self.status_label = QLabel(self)
        self.status_label.setObjectName("vram_status")
        self._hint_row = QHBoxLayout()
        self._hint_row.setSpacing(4)

        top = QHBoxLayout()
        top.addWidget(QLabel("VRAM", self))
        top.addWidget(self.bar, 1)
        top.addWidget(self.total_label)
        top.addWidget(self.busy)
        top.addWidget(self.check_button)
        bottom = QHBoxLayout()
        bottom.addWidget(self.status_label)
        bottom.addStretch(1)
        bottom.addLayout(self._hint_row)
        outer = QVBoxLayout(self)
        outer.setContentsMargins(6, 4, 6, 4)
        outer.setSpacing(3)
        outer.addLayout(top)
        outer.addLayout(bottom)
        self.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Fixed)

        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.setInterval(0)
        self._timer.timeout.connect(self.refresh)
        binding.changed.connect(self._schedule)
        binding.replaced.connect(self._schedule)
        self.refresh()

    # ------------------------------------------------------------------ public
    @property
    def breakdown(self) -> vram.VramBreakdown | None:
        """The estimate currently shown."""
        return self._breakdown

    @property
    def level(self) -> str:
        """'ok' (green), 'warn' (amber, > 85 %), 'over' (red, > 100 %) or 'unknown' (no device)."""
        return self.bar.level

    @property
    def level_color(self) -> QColor:
        return LEVEL_COLORS[self.level]

    def hint_buttons(self) -> list[QPushButton]:
        return list(self._hint_buttons)

    def set_device(self, total_memory_bytes: int | None, name: str = "", info: object | None = None) -> None:
        """The GPU to compare with; None for an unknown device or CPU training.

        ``info`` (a ``core.hardware.DeviceInfo``) lets the hints leave out changes this device cannot
        run (8-bit optimizers without bitsandbytes, bf16 before compute capability 8.0).
        """
        if info is not None:
            self._device = info
        else:
            self._device = SimpleNamespace(total_memory=total_memory_bytes) if total_memory_bytes else None
        self._device_name = name
        self._schedule()

    @Slot()
    def refresh(self) -> None:
        """Re-estimate now (normally coalesced via a 0-ms timer)."""
        cfg = self.binding.config
        try:
            b = vram.estimate(cfg, device=self._device)
            hint_list = vram.hints(cfg, device=self._device)
        except Exception:
            log.exception("VRAM estimate failed")
            self.status_label.setText("No estimate for this model.")
            return
        self._breakdown = b
        frac = b.fraction
        level = "unknown" if frac is None else "over" if frac > 1.0 else "warn" if frac > WARN_FRACTION else "ok"
        self.bar.breakdown = b
        self.bar.level = level
        self.bar.measured = None
        self.bar.update()
        color = LEVEL_COLORS[level].name()
        if b.device_total:
            text = f"<b style='color:{color}'>{b.total / vram.GiB:.1f}</b> / {b.device_total / vram.GiB:.1f} GB"
        else:
            text = f"<b>{b.total / vram.GiB:.1f} GB</b>"
        self.total_label.setText(text)
        parts = [f"{p.label}: {vram.format_bytes(p.bytes)}" for p in b.parts if p.bytes]
        try:
            ram = vram.format_bytes(vram.peak_system_ram_loading(cfg))
        except Exception:  # noqa: BLE001 - a tooltip line is not worth an error
            log.exception("system RAM estimate failed")
        else:
            parts.append(f"\nSystem RAM while loading the base model: about {ram}")
        self.total_label.setToolTip("\n".join(parts))
        if getattr(self._device, "total_memory", None) is None:
            status = "CPU training uses system RAM" + (f" ({self._device_name})" if self._device_name else "") + "; estimate for a GPU"
        elif level == "over":
            status = f"Does not fit {self._device_name or 'the GPU'}: try"
        elif level == "warn":
            status = "Tight fit"
        else:
            status = f"Fits {self._device_name}" if self._device_name else "Fits"
        if b.notes:
            status += f" ({b.notes[0]})"
        self.status_label.setText(status)
        self._show_hints(hint_list if level in ("over", "warn", "unknown") else hint_list[:1])
        self.estimate_updated.emit(b)

    @Slot()
    def check_precisely(self) -> None:
        """Measure one training step of the current config in a background thread."""
        if self._thread is not None:
            return
        self.check_button.setEnabled(False)
        self.busy.show()
        self.status_label.setText("Measuring one training step…")
        self._thread = QThread(self)
        self._worker = _MeasureWorker(self.binding.config.copy())
        self._worker.moveToThread(self._thread)
        self._thread.started.connect(self._worker.run)
        self._worker.finished.connect(self._on_measured)
        self._worker.failed.connect(self._on_failed)
        self._thread.start()

    # ------------------------------------------------------------------ internals
    def _schedule(self, *_args: Any) -> None:
        self._timer.start()

    def _show_hints(self, hint_list: list[vram.Hint]) -> None:
        for btn in self._hint_buttons:
            self._hint_row.removeWidget(btn)
            btn.deleteLater()
        self._hint_buttons = []
        for h in hint_list[:MAX_HINTS]:
            btn = QPushButton(h.text, self)
            btn.setFlat(False)
            btn.setToolTip("Apply: " + ", ".join(f"{k} = {v}" for k, v in h.changes.items()))
            btn.clicked.connect(lambda _=False, changes=h.changes: self._apply(changes))
            self._hint_row.addWidget(btn)
            self._hint_buttons.append(btn)

    def _apply(self, changes: dict[str, Any]) -> None:
        for path, value in changes.items():
            self.binding.set(path, value)

    def _finish_thread(self) -> None:
        if self._thread is not None:
            self._thread.quit()
            self._thread.wait()
            self._thread.deleteLater()
        if self._worker is not None:
            self._worker.deleteLater()
        self._thread = None
        self._worker = None
        self.busy.hide()
        self.check_button.setEnabled(True)

    @Slot(object)
    def _on_measured(self, m: Any) -> None:
        self._finish_thread()
        b = self._breakdown
        est = b.allocated if b else 0
        how = "measured on the GPU" if m.method == "cuda" else "measured (simulated step)"
        self.status_label.setText(
            f"Peak {how}: {vram.format_bytes(m.peak)} allocated; estimated {vram.format_bytes(est)}"
        )
        self.status_label.setToolTip("\n".join(m.notes))
        self.bar.measured = int(m.peak + (b.total - b.allocated if b else 0))
        self.bar.update()
        self.measurement_finished.emit(m)

    @Slot(str)
    def _on_failed(self, message: str) -> None:
        self._finish_thread()
        log.error("VRAM measurement failed:\n%s", message)
        self.status_label.setText("Measurement failed (see log)")
        self.status_label.setToolTip(message)
        self.measurement_failed.emit(message)

    def closeEvent(self, event: Any) -> None:
        if self._thread is not None:
            self._thread.quit()
            self._thread.wait()
        super().closeEvent(event)
