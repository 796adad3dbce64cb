"""VramMeter: the live VRAM estimate as a stacked bar with a legend, one-click fixes and a precise check.

Re-estimates on every config change (coalesced with a 0-ms single-shot timer; an estimate takes
microseconds). Every part is named with its size in the legend under the bar (no hover needed) and in
a tooltip over its piece of the bar. "Check precisely" measures one real training step through
:func:`~guitrainer.ui.workers.run_in_thread` (:mod:`guitrainer.engine.memory` imports torch only then);
the measured peak then replaces the estimate's number until a setting changes.
"""

from __future__ import annotations

import contextlib
import html
import logging
import re
from types import SimpleNamespace
from typing import Any

from PySide6.QtCore import QEvent, QPointF, QRectF, QSize, Qt, QThread, QTimer, Signal, Slot
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

from guitrainer.base import units
from guitrainer.base.errors import first_line
from guitrainer.base.paths import expand
from guitrainer.core.dataset.folder_check import look_at_folders
from guitrainer.core.memory import estimate, hints, system_ram
from guitrainer.core.memory.measured import compare as compare_measured
from guitrainer.core.precision import advisor
from guitrainer.ui.binding import ConfigBinding
from guitrainer.ui.model.fit_dialog import FitDialog
from guitrainer.ui.workers import BaseWorker, run_in_thread

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
    "offload_stream": "#5fa8a0",
}
WARN_FRACTION = 0.85
MAX_HINTS = 3
TARGET_COLOR = "#2e9d4f"
_CARD_SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*GB\b")


def preset_card_bytes(name: str) -> int | None:
    """The card size a preset is made for, from its name ("SD 1.5 character — 6 GB" -> 6 GiB)."""
    m = _CARD_SIZE.search(name or "")
    return int(float(m.group(1)) * units.GiB) if m else None


def shown_parts(b: estimate.VramBreakdown) -> list[estimate.VramPart]:
    """The parts worth showing: the non-empty ones (the estimate itself leaves out what the device does not have:
    no CUDA context or allocator slack on a CPU, nor before the device is known)."""
    return [p for p in b.parts if p.bytes > 0]


def advised_against(device: Any, config: Any, changes: dict[str, Any]) -> bool:
    """True when the precision panel would warn (or err) about ``changes`` on ``device`` and does not now."""
    if device is None or not hasattr(device, "for_gpu_index"):
        return False
    try:
        before = {a.code for a in advisor.advise(device, config) if a.level in ("warning", "error")}
        changed = config.copy()
        for path, value in changes.items():
            changed.set(path, value)
        after = {a.code for a in advisor.advise(device, changed) if a.level in ("warning", "error")}
    except Exception:  # noqa: BLE001 - a hint filter must not break the meter
        log.exception("precision advice for a hint failed")
        return False
    return bool(after - before)


class _Bar(QWidget):
    """Stacked horizontal bar of the estimate's parts against the device memory (custom painted)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.breakdown: estimate.VramBreakdown | None = None
        self.parts: list[estimate.VramPart] = []
        self.level = "unknown"
        self.measured: int | None = None
        self.target: int | None = None  # the card size the preset is made for
        self.setMinimumSize(160, 18)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.setMouseTracking(True)

    def sizeHint(self) -> QSize:
        return QSize(400, 22)

    def _scale(self) -> float:
        b = self.breakdown
        if b is None:
            return 1.0
        total = sum(p.bytes for p in self.parts)
        return float(max(total, b.device_total or 0, self.measured or 0, self.target or 0, 1))

    def segments(self) -> list[tuple[QRectF, estimate.VramPart]]:
        """Rectangles of the non-empty parts, left to right."""
        b = self.breakdown
        if b is None:
            return []
        inner = QRectF(self.rect()).adjusted(1, 1, -1, -1)
        scale = self._scale()
        x = inner.left()
        out = []
        for part in self.parts:
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
        if self.target and b is not None:
            x = inner.left() + inner.width() * self.target / self._scale()
            p.setPen(QPen(QColor(TARGET_COLOR), 2, Qt.PenStyle.DotLine))
            p.drawLine(int(x), 0, int(x), self.height())
        if self.measured:
            x = inner.left() + inner.width() * self.measured / self._scale()
            p.setPen(QPen(QColor("#000000"), 1, Qt.PenStyle.DashLine))
            p.drawLine(int(x), 0, int(x), self.height())
        p.setPen(QPen(LEVEL_COLORS[self.level], 2))
        p.drawRect(frame.adjusted(0.5, 0.5, -0.5, -0.5))
        p.end()

    def part_at(self, pos: QPointF) -> estimate.VramPart | None:
        for rect, part in self.segments():
            if rect.contains(pos):
                return part
        return None

    def tooltip_for(self, part: estimate.VramPart) -> str:
        return f"<b>{html.escape(part.label)}</b>: {units.format_bytes(part.bytes)}<br>{html.escape(part.tooltip)}"

    def event(self, e: QEvent) -> bool:
        if e.type() == QEvent.Type.ToolTip:
            he: QHelpEvent = e  # type: ignore[assignment]
            part = self.part_at(QPointF(he.pos()))  # QHelpEvent has pos(), not position(), in PySide6 6.11
            if part is not None:
                QToolTip.showText(he.globalPos(), self.tooltip_for(part), self)
                return True
            QToolTip.hideText()
            e.ignore()
            return True
        return super().event(e)


class _MeasureWorker(BaseWorker):
    """Runs engine.memory.measure_training_step (through run_in_thread: errors reach the GUI thread)."""

    def __init__(self, config: Any) -> None:
        super().__init__()
        self.config = config

    def work(self) -> Any:
        from guitrainer.engine.memory import measure_training_step  # imports torch, here only

        return measure_training_step(self.config)


class VramMeter(QWidget):
    """Live VRAM estimate of the bound config: stacked bar, total, hint buttons, precise check."""

    estimate_updated = Signal(object)  # VramBreakdown
    measurement_finished = Signal(object)  # engine.memory.MemoryMeasurement
    measurement_failed = Signal(str, str)  # message in plain words, details (traceback) for the Log

    def __init__(self, binding: ConfigBinding, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.binding = binding
        self._device: Any = None  # not known until set_device (the probe answers a few seconds after the start)
        self._device_name = ""
        self._probe_problem = ""  # why the device could not be told, when the probe failed
        self._breakdown: estimate.VramBreakdown | None = None
        self._thread: QThread | None = None
        self._worker: _MeasureWorker | None = None
        self._hint_buttons: list[QPushButton] = []
        self._target: tuple[int, str] | None = None
        self._ram: system_ram.RamBreakdown | None = None
        self._image_counts: dict[tuple[Any, ...], int | None] = {}  # folder set -> images, listed once per set

        self.bar = _Bar(self)
        self.bar.setObjectName("vram_bar")
        self.total_label = QLabel(self)
        self.total_label.setObjectName("vram_total")
        self.total_label.setTextFormat(Qt.TextFormat.RichText)
        self.ram_label = QLabel(self)
        self.ram_label.setObjectName("ram_total")
        self.ram_label.setTextFormat(Qt.TextFormat.RichText)
        self.check_button = QPushButton("Check precisely", self)
        self.check_button.setToolTip("Measure one training step of exactly this config (takes a few seconds).")
        self.check_button.clicked.connect(self.check_precisely)
        self.fit_button = QPushButton("Fit to card…", self)
        self.fit_button.setObjectName("fit_to_card")
        self.fit_button.setToolTip("Choose the memory savers that fit this GPU (or a card size you plan for) with the "
                                   "least loss of speed, then of quality: see the changes and the estimate, apply "
                                   "them with one click.")
        self.fit_button.clicked.connect(self.open_fit)
        self.fit_dialog: FitDialog | None = None
        self.busy = QProgressBar(self)
        self.busy.setRange(0, 0)
        self.busy.setMaximumWidth(70)
        self.busy.setMaximumHeight(12)
        self.busy.setTextVisible(False)
        self.busy.hide()
        self.status_label = QLabel(self)
        self.status_label.setObjectName("vram_status")
        self.status_label.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)  # never widens
        # the one-click savers' row keeps a button's height with or without buttons: they come and go as
        # settings change, and everything under the bar must not move with them
        self.status_label.setMinimumHeight(self.check_button.sizeHint().height())
        self.legend = QLabel(self)
        self.legend.setObjectName("vram_legend")
        self.legend.setTextFormat(Qt.TextFormat.RichText)
        self.legend.setWordWrap(True)
        self.legend.setStyleSheet("font-size: 8pt;")
        self._hint_row = QHBoxLayout()
        self._hint_row.setSpacing(4)

        top = QHBoxLayout()
        top.addWidget(QLabel("VRAM", self))
        top.addWidget(self.bar, 1)
        top.addWidget(self.total_label)
        top.addWidget(self.ram_label)
        top.addWidget(self.busy)
        top.addWidget(self.check_button)
        top.addWidget(self.fit_button)
        bottom = QHBoxLayout()
        bottom.addWidget(self.status_label, 1)
        bottom.addLayout(self._hint_row)
        outer = QVBoxLayout(self)
        outer.setContentsMargins(6, 4, 6, 4)
        outer.setSpacing(3)
        outer.addLayout(top)
        outer.addWidget(self.legend)
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
    def breakdown(self) -> estimate.VramBreakdown | None:
        """The estimate currently shown."""
        return self._breakdown

    @property
    def ram(self) -> system_ram.RamBreakdown | None:
        """The system-RAM estimate currently shown beside the bar."""
        return self._ram

    @property
    def level(self) -> str:
        """'ok' (green), 'warn' (amber, > 85 %), 'over' (red, > 100 %) or 'unknown' (no device)."""
        return self.bar.level

    @property
    def level_color(self) -> QColor:
        return LEVEL_COLORS[self.level]

    def hint_buttons(self) -> list[QPushButton]:
        return list(self._hint_buttons)

    def set_target(self, preset_name: str) -> None:
        """Mark the card size the preset is made for ("… — 6 GB"); none when its name gives none."""
        size = preset_card_bytes(preset_name)
        self._target = (size, preset_name) if size else None
        self._schedule()

    def set_device(self, total_memory_bytes: int | None, name: str = "", info: object | None = None) -> None:
        """The device the run trains on: a GPU's memory to compare with, or None for CPU training.

        ``info`` (a ``core.hardware.DeviceInfo``) says its kind (the estimate's GPU-only parts follow it) and lets
        the hints leave out changes this device cannot run (8-bit optimizers without bitsandbytes, bf16 before
        compute capability 8.0). Until this is called the device is not known (see :meth:`device_unknown`).
        """
        if info is not None:
            self._device = info
        elif total_memory_bytes:
            self._device = SimpleNamespace(total_memory=total_memory_bytes)  # a CUDA GPU known by its size
        else:
            self._device = SimpleNamespace(kind="cpu", total_memory=None)
        self._device_name = name
        self._probe_problem = ""
        self._schedule()

    def device_unknown(self, reason: str) -> None:
        """The device probe failed: the estimate stays without GPU-only parts, and the status says why."""
        self._device = None
        self._probe_problem = reason
        self._schedule()

    @Slot()
    def refresh(self) -> None:
        """Re-estimate now (normally coalesced via a 0-ms timer)."""
        cfg = self.binding.config
        try:
            b = estimate.estimate(cfg, device=self._device)
            hint_list = hints.hints(cfg, device=self._device)
        except Exception:
            log.exception("VRAM estimate failed")
            self.status_label.setText("No estimate for this model.")
            return
        self._breakdown = b
        parts = shown_parts(b)
        total = sum(p.bytes for p in parts)
        frac = None if not b.device_total else total / b.device_total
        level = "unknown" if frac is None else "over" if frac > 1.0 else "warn" if frac > WARN_FRACTION else "ok"
        self.bar.breakdown, self.bar.parts, self.bar.level = b, parts, level
        self.bar.measured = None
        self.bar.target = self._target[0] if self._target else None
        self.bar.update()
        self._show_total(total, b.device_total, level, measured=False)
        self._show_ram(cfg)
        self._show_legend(parts)
        self.status_label.setText(self._status(level, b))
        self.status_label.setToolTip("")
        hint_list = [h for h in hint_list if not advised_against(self._device, cfg, h.changes)]
        self._show_hints(hint_list if level in ("over", "warn", "unknown") else hint_list[:1])
        self.estimate_updated.emit(b)

    def _show_total(self, total: int, device_total: int | None, level: str, measured: bool) -> None:
        color = LEVEL_COLORS[level].name()
        what = "measured" if measured else "estimated"
        if device_total:
            text = f"<b style='color:{color}'>{total / units.GiB:.1f}</b> / {device_total / units.GiB:.1f} GB {what}"
        else:  # a CPU run of the demo is tens of MB: "0.0 GB" said nothing
            text = f"<b>{units.format_bytes(total)}</b> {what}"
        self.total_label.setText(text)
        try:
            ram = units.format_bytes(estimate.peak_system_ram_loading(self.binding.config))
        except Exception:  # noqa: BLE001 - a tooltip line is not worth an error
            log.exception("system RAM estimate failed")
            ram = ""
        lines = [f"{p.label}: {units.format_bytes(p.bytes)}" for p in self.bar.parts]
        if ram:
            lines.append(f"\nSystem RAM while loading the base model: about {ram}")
        self.total_label.setToolTip("\n".join(lines))

    def _show_ram(self, cfg: Any) -> None:
        """"RAM 14.2 / 32.0 GB" beside the bar (the run's peak of system RAM against this computer's), its parts in
        the tooltip; amber over 85 %, red over 100 %."""
        try:
            ram = system_ram.estimate_ram(cfg, None, self._device, images=self._images(cfg))
        except Exception:  # noqa: BLE001 - the RAM line is not worth an error
            log.exception("system RAM estimate failed")
            self._ram = None
            self.ram_label.setText("")
            return
        self._ram = ram
        frac = ram.fraction
        level = "unknown" if frac is None else "over" if frac > 1.0 else "warn" if frac > WARN_FRACTION else "ok"
        color = LEVEL_COLORS[level].name() if level != "unknown" else ""
        peak = f"<b style='color:{color}'>{ram.peak / units.GiB:.1f}</b>" if color else f"<b>{ram.peak / units.GiB:.1f}</b>"
        of = f" / {ram.machine_total / units.GiB:.1f} GB" if ram.machine_total else " GB"
        self.ram_label.setText(f"&nbsp;RAM {peak}{of}")
        when = "while loading the base model" if ram.loading > ram.training else "while training"
        lines = [f"System RAM: {units.format_bytes(ram.peak)} at the peak, {when}"
                 + (f", of {units.format_bytes(ram.machine_total)} in this computer" if ram.machine_total else "")]
        lines += [f"{p.label}: {units.format_bytes(p.bytes)}" + (" (while loading)" if p.loading else "")
                  for p in ram.parts if p.bytes > 0]
        lines += list(ram.notes)
        self.ram_label.setToolTip("\n".join(lines))

    def _images(self, cfg: Any) -> int | None:
        """Training and class images in the folders (for the caches' RAM), listed once per set of folders."""
        d = cfg.dataset
        folders = [*d.folders, *d.regularization_folders]
        key = (tuple(str(f.path) for f in folders), tuple(d.exclude), d.caption_extension)
        if key not in self._image_counts:
            count = None
            if folders and all(expand(str(f.path)).is_dir() for f in folders):
                try:
                    count = sum(lk.images for lk in look_at_folders(folders, d.caption_extension, d.exclude))
                except OSError:
                    count = None
            self._image_counts = {key: count}  # only the current set is kept
        return self._image_counts[key]

    def _show_legend(self, parts: list[estimate.VramPart]) -> None:
        """Every part with its colour and size, always visible (hovering a part shows its explanation)."""
        items = [
            f"<span style='color:{PART_COLORS.get(p.key, '#999999')}'>■</span>&nbsp;{html.escape(p.label)} "
            f"{units.format_bytes(p.bytes)}"
            for p in parts
        ]
        if self._target:
            size, name = self._target
            items.append(
                f"<span style='color:{TARGET_COLOR}'>┆</span>&nbsp;{units.format_bytes(size)} card the preset is made for"
            )
        if self._breakdown is not None and self._breakdown.device_total:
            items.append("<b>│</b>&nbsp;your GPU")
        # an entry never breaks across lines ("Temporary / workspace"): the legend wraps between entries only
        self.legend.setText("&nbsp;&nbsp; ".join(f"<span style='white-space:nowrap'>{i}</span>" for i in items))

    def _status(self, level: str, b: estimate.VramBreakdown) -> str:
        kind = estimate.device_kind(self._device)
        named = f" ({self._device_name})" if self._device_name else ""
        if not kind:
            why = f"The device could not be checked ({first_line(self._probe_problem)})" if self._probe_problem \
                else "The device is not known yet"
            status = f"{why}: what a CUDA GPU adds (its context, {units.format_bytes(estimate.CUDA_CONTEXT_BYTES)}, and " \
                "the allocator's slack) is left out until it is"
        elif kind == "cpu":
            status = f"CPU training uses system RAM{named}: this is what the training step needs there"
        elif kind == "mps":
            status = f"The Apple GPU uses the Mac's shared memory{named}"
        elif b.device_total is None:
            status = f"Estimate for {self._device_name or 'this device'}"
        elif level == "over":
            status = f"Does not fit {self._device_name or 'the GPU'}: try"
        elif level == "warn":
            status = "Tight fit"
        else:
            status = f"Fits {self._device_name}" if self._device_name else "Fits"
        if b.notes:
            status += f" ({b.notes[0]})"
        return status

    @Slot()
    def open_fit(self) -> FitDialog:
        """Fit to this card: the dialog for this computer's GPU (or, without one, the card size it is compared with)."""
        cfg = self.binding.config
        dialog = FitDialog(self.binding, self._device, self, machine_ram=system_ram.machine_ram(),
                           images=self._images(cfg), planned=self._target[0] if self._target else None)
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dialog.finished.connect(lambda _code: setattr(self, "fit_dialog", None))
        self.fit_dialog = dialog
        dialog.open()
        return dialog

    @Slot()
    def check_precisely(self) -> None:
        """Measure one training step of the current config in a background thread."""
        if self._thread is not None:
            return
        self.check_button.setEnabled(False)
        self.busy.show()
        self.status_label.setText("Measuring one training step…")
        self.status_label.setToolTip("")
        worker = _MeasureWorker(self.binding.config.copy())
        worker.finished.connect(self._on_measured)
        worker.failed.connect(self._on_failed)
        self._thread = run_in_thread(worker, name="VramMeasure")

    # ------------------------------------------------------------------ internals
    def _schedule(self, *_args: Any) -> None:
        self._timer.start()

    def _show_hints(self, hint_list: list[hints.Hint]) -> None:
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
        self._thread = None  # run_in_thread deletes it and the worker when it ends
        self.busy.hide()
        self.check_button.setEnabled(True)

    @Slot(object)
    def _on_measured(self, m: Any) -> None:
        """One number from now on: the measured peak replaces the estimate (until a setting changes)."""
        self._finish_thread()
        b = self._breakdown
        if b is None:
            return
        # context and allocator slack (a CUDA GPU only) are not in the peak: the estimate's figures are added
        comparison = compare_measured(b, int(m.peak), int(m.static), str(m.method))
        peak = comparison.measured
        device_total = b.device_total
        level = "unknown" if not device_total else "over" if peak > device_total else "warn" if peak > WARN_FRACTION * device_total else "ok"
        self.bar.measured = peak
        self.bar.level = level
        self.bar.update()
        self._show_total(peak, device_total, level, measured=True)
        how = "on the GPU" if m.method == "cuda" else "with a simulated step on this computer"
        self.status_label.setText(
            f"Measured {how}: one training step of these settings needs {units.format_bytes(peak)} (the dashed "
            f"line), {comparison.relative} ({units.format_bytes(comparison.estimated)}; hover for why). This "
            "replaces the estimate until you change a setting."
        )
        self.status_label.setToolTip(
            f"Estimated before measuring: {units.format_bytes(comparison.estimated)}.\n" + "\n".join(comparison.lines)
            + ("\n" + "\n".join(m.notes) if m.notes else "")
        )
        self.measurement_finished.emit(m)

    @Slot(str, str)
    def _on_failed(self, message: str, details: str) -> None:
        """The message on screen in plain words; the details (traceback) go to the Log, not to a tooltip."""
        self._finish_thread()
        first = first_line(message) or "unknown error"
        self.status_label.setText(f"Check precisely failed: {first}. The Log on the Training page has the details.")
        self.status_label.setToolTip("")
        self.measurement_failed.emit(message, details)

    def closeEvent(self, event: Any) -> None:
        if self._thread is not None:
            with contextlib.suppress(RuntimeError):  # already ended and deleted
                self._thread.wait()
        super().closeEvent(event)
