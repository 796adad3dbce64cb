"""The Training page's run controls and progress: buttons, state badge, why Train is off, progress lines.

Widgets and their look only; the page decides when a run starts and what it reports. ``TrainState``
is the page's state machine (its values double as the names shown in tests and logs).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from enum import Enum

from PySide6.QtCore import QRect, Qt, Signal
from PySide6.QtGui import QMouseEvent, QPainter, QPaintEvent, QPalette
from PySide6.QtWidgets import (
    QHBoxLayout,
    QLabel,
    QProgressBar,
    QPushButton,
    QStyle,
    QVBoxLayout,
    QWidget,
)

from guitrainer.base.errors import first_line
from guitrainer.base.units import format_bytes
from guitrainer.core.events import StepMetrics
from guitrainer.ui.widgets.elided import ElidedLabel


class TrainState(str, Enum):  # noqa: UP042 - the value doubles as the name shown in tests and logs
    IDLE = "idle"
    CHECKING = "checking"  # validating before a start (the device probe may run in the background)
    RUNNING = "running"
    PAUSED = "paused"
    STOPPING = "stopping"
    FINISHED = "finished"
    STOPPED = "stopped"  # ended by Stop (or before its first step): the LoRA and a state saved, resumable
    FAILED = "failed"


ACTIVE = (TrainState.CHECKING, TrainState.RUNNING, TrainState.PAUSED, TrainState.STOPPING)
STATE_TEXT = {
    TrainState.IDLE: ("Ready", "#5c677d"),
    TrainState.CHECKING: ("Checking…", "#5c677d"),
    TrainState.RUNNING: ("Training", "#2b8a3e"),
    TrainState.PAUSED: ("Paused", "#e67700"),
    TrainState.STOPPING: ("Stopping…", "#e67700"),
    TrainState.FINISHED: ("Done", "#1971c2"),
    TrainState.STOPPED: ("Stopped", "#5c677d"),
    TrainState.FAILED: ("Failed", "#c92a2a"),
}
TRAIN_TIP = "Check the settings and start training a new LoRA."


def fmt_duration(seconds: float) -> str:
    if not math.isfinite(seconds) or seconds < 0:
        return "—"
    s = int(round(seconds))
    h, rem = divmod(s, 3600)
    m, s = divmod(rem, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


class ReadableProgressBar(QProgressBar):
    """A progress bar whose text stays readable over its fill in any style: drawn by itself, centred, in the
    highlighted-text colour where it lies on the fill and the text colour beside it (Fusion let the fill
    cover the start of "step 23 / 60")."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        super().setTextVisible(False)  # the style draws the bar only; paintEvent adds the text

    def fill_width(self) -> int:
        """How many pixels of the bar are filled now."""
        span = self.maximum() - self.minimum()
        done = (self.value() - self.minimum()) / span if span > 0 else 0.0
        return round(self.rect().width() * min(1.0, max(0.0, done)))

    def paintEvent(self, event: QPaintEvent) -> None:  # noqa: N802
        super().paintEvent(event)
        text = self.text()
        if not text:
            return
        p = QPainter(self)
        r = self.rect()
        shown = self.fontMetrics().elidedText(text, Qt.TextElideMode.ElideRight, r.width() - 8)
        split = self.fill_width()
        pal = self.palette()
        for clip, role in ((QRect(0, 0, split, r.height()), QPalette.ColorRole.HighlightedText),
                           (QRect(split, 0, r.width() - split, r.height()), QPalette.ColorRole.Text)):  # fmt: skip
            p.setClipRect(clip)
            p.setPen(pal.color(role))
            p.drawText(r, Qt.AlignmentFlag.AlignCenter, shown)


class LinkLabel(ElidedLabel):
    """An elided line that is also a link: a click emits :attr:`clicked` (the hand cursor says so)."""

    clicked = Signal()

    def __init__(self, parent: QWidget | None = None):
        super().__init__("", parent)
        self.setCursor(Qt.CursorShape.PointingHandCursor)

    def mouseReleaseEvent(self, event: QMouseEvent) -> None:  # noqa: N802
        if event.button() == Qt.MouseButton.LeftButton and self.rect().contains(event.position().toPoint()):
            self.clicked.emit()
        super().mouseReleaseEvent(event)


class RunControls(QWidget):
    """Train / Pause / Stop, Sample now / Save now, Resume / Open output, the state badge, and a line that
    says why Train is disabled (beside the button, not only in its tooltip).

    Signals:
        fix_requested(): the user clicked why Train is off: show the Model & Precision page.
    """

    fix_requested = Signal()

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.train_button = self._button("Train", "train_button", QStyle.StandardPixmap.SP_MediaPlay, TRAIN_TIP)
        self.train_button.setDefault(True)
        self.train_button.setMinimumWidth(110)
        f = self.train_button.font()
        f.setBold(True)
        self.train_button.setFont(f)
        sp = QStyle.StandardPixmap
        self.pause_button = self._button(
            "Pause", "pause_button", sp.SP_MediaPause, "Pause after the current step; Resume continues."
        )
        self.stop_button = self._button(
            "Stop", "stop_button", sp.SP_MediaStop, "Stop after the current step, saving the LoRA and a resumable state."
        )
        self.sample_button = self._button("Sample now", "sample_button", None, "Make sample images with the LoRA as it is now.")
        self.save_button = self._button(
            "Save now", "save_button", sp.SP_DialogSaveButton, "Save the LoRA (and a resumable state) after this step."
        )
        self.resume_state_button = self._button(
            "Resume from last state", "resume_state_button", sp.SP_BrowserReload,
            "Continue the last stopped run from its saved state (same network and precision settings).",
        )  # fmt: skip
        self.open_output_button = self._button(
            "Open output folder", "open_output_button", sp.SP_DirOpenIcon, "Show the LoRA files in your file manager."
        )
        # in the button row's free space, one elided line: saying why Train is off never moves the page
        # where to go comes first (the reason after it may be cut), and a click goes there
        self.blocked_label = LinkLabel(self)
        self.blocked_label.setObjectName("train_blocked_label")
        self.blocked_label.setStyleSheet("color: #c92a2a; text-decoration: underline;")
        self.blocked_label.clicked.connect(self.fix_requested)
        self.blocked_label.hide()
        self.state_badge = QLabel(self)
        self.state_badge.setObjectName("state_badge")
        self.state_badge.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.state_badge.setMinimumWidth(96)

        row = QHBoxLayout(self)
        row.setContentsMargins(0, 0, 0, 0)
        row.setSpacing(6)
        for w in (self.train_button, self.pause_button, self.stop_button):
            row.addWidget(w)
        row.addSpacing(6)
        row.addWidget(self.sample_button)
        row.addWidget(self.save_button)
        row.addSpacing(6)
        row.addWidget(self.resume_state_button)
        row.addWidget(self.open_output_button)
        row.addSpacing(6)
        row.addWidget(self.blocked_label, 1)
        row.addWidget(self.state_badge)

    def _button(self, text: str, name: str, icon: QStyle.StandardPixmap | None, tip: str) -> QPushButton:
        b = QPushButton(text, self)
        b.setObjectName(name)
        if icon is not None:
            b.setIcon(self.style().standardIcon(icon))
        b.setToolTip(tip)
        return b

    def connect(self, **slots: Callable[[], object]) -> None:
        """``train=..., pause=..., stop=...``: what each button's click does (names without ``_button``)."""
        for name, slot in slots.items():
            getattr(self, f"{name}_button").clicked.connect(lambda _checked=False, slot=slot: slot())

    def apply(self, s: TrainState, blocked_by: str, has_prompts: bool, has_state: bool) -> None:
        """Enable what the state allows; say why Train is off beside it."""
        running = s == TrainState.RUNNING
        live = s in (TrainState.RUNNING, TrainState.PAUSED)
        self.train_button.setEnabled(s not in ACTIVE and not blocked_by)
        self.train_button.setToolTip(f"Fix this first (Model & Precision page):\n{blocked_by}" if blocked_by else TRAIN_TIP)
        first = first_line(blocked_by)
        self.blocked_label.setText(f"Train is off: see Model & Precision — {first}" if first else "")
        self.blocked_label.setToolTip(f"Click to fix this on the Model & Precision page:\n{blocked_by}" if blocked_by else "")
        self.blocked_label.setVisible(bool(blocked_by) and s not in ACTIVE)
        self.pause_button.setEnabled(live)
        self.pause_button.setText("Resume" if s == TrainState.PAUSED else "Pause")
        sp = QStyle.StandardPixmap
        self.pause_button.setIcon(self.style().standardIcon(sp.SP_MediaPlay if s == TrainState.PAUSED else sp.SP_MediaPause))
        self.stop_button.setEnabled(live)
        self.sample_button.setEnabled(running and has_prompts)
        self.sample_button.setToolTip(
            "Make sample images with the LoRA as it is now."
            if has_prompts or not running
            else "Add sample prompts (Samples settings) before the run to make samples."
        )
        self.save_button.setEnabled(live)
        self.resume_state_button.setEnabled(s not in ACTIVE and has_state and not blocked_by)
        text, color = STATE_TEXT[s]
        self.state_badge.setText(text)
        self.state_badge.setStyleSheet(
            f"QLabel {{ color: white; background: {color}; border-radius: 9px; padding: 3px 10px; font-weight: 600; }}"
        )


class ProgressPanel(QWidget):
    """The progress bar with step / epoch / ETA / speed / memory, the status line and the warning line."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.progress_bar = ReadableProgressBar(self)
        self.progress_bar.setObjectName("progress_bar")
        self.progress_bar.setRange(0, 1)
        self.progress_bar.setValue(0)
        self.progress_bar.setFormat("No run yet")
        self.progress_bar.setMinimumWidth(260)
        self.progress_label = ElidedLabel("", self)
        self.progress_label.setObjectName("progress_label")
        self.status_label = ElidedLabel("Press Train to start.", self)
        self.status_label.setObjectName("status_label")
        self.status_label.setStyleSheet("color: palette(placeholder-text);")
        self.warning_label = ElidedLabel("", self)
        self.warning_label.setObjectName("warning_label")
        self.warning_label.setStyleSheet("color: #d9480f;")
        self.warning_label.hide()
        # live texts never widen the page nor change its height: one elided line each, their line kept
        # while hidden, the full text in the tooltip
        for label in (self.progress_label, self.status_label, self.warning_label):
            label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.setSpacing(3)
        row = QHBoxLayout()
        row.setSpacing(12)
        row.addWidget(self.progress_bar, 2)
        row.addWidget(self.progress_label, 3)
        lay.addLayout(row)
        said = QHBoxLayout()  # what happened, and the latest warning: one line for both
        said.setSpacing(12)
        said.addWidget(self.status_label, 2)
        said.addWidget(self.warning_label, 3)
        lay.addLayout(said)
        self._warnings: list[str] = []

    def say(self, text: str) -> None:
        """Show ``text`` in the status line (its tooltip holds it in full when it is clipped)."""
        self.status_label.setText(text)

    def reset(self, max_steps: int, text: str) -> None:
        """A run begins: an empty bar showing ``text`` until its first step."""
        self._warnings.clear()
        self.warning_label.hide()
        self.progress_bar.setRange(0, max(1, max_steps))
        self.progress_bar.setValue(0)
        self.progress_bar.setFormat(text)
        self.progress_label.setText("")

    def warn(self, text: str) -> None:
        self._warnings.append(text)
        more = f"  (+{len(self._warnings) - 1} more in the log)" if len(self._warnings) > 1 else ""
        self.warning_label.setText(f"⚠ {text}{more}")
        self.warning_label.setToolTip("\n".join(self._warnings[-20:]))
        self.warning_label.show()

    def show_step(self, m: StepMetrics, epochs: int | None, eta: float) -> None:
        """``epochs``: the planned epochs (None when the run is bounded by steps); ``eta`` in seconds (nan: —)."""
        total = max(1, m.total_steps)
        if self.progress_bar.maximum() != total:
            self.progress_bar.setRange(0, total)
        self.progress_bar.setValue(min(m.step, total))
        self.progress_bar.setFormat(f"step {m.step} / {m.total_steps}  (%p%)")
        parts = [
            f"epoch {m.epoch}" + (f" / {epochs}" if epochs else ""),
            f"ETA {fmt_duration(eta)}",
            f"{m.images_per_second:.1f} img/s",
            f"{m.seconds_per_step:.2f} s/step",
            f"peak memory {format_bytes(m.peak_memory_bytes)}" if m.peak_memory_bytes is not None else "peak memory n/a",
        ]
        if m.skipped_total:
            parts.append(f"{m.skipped_total} skipped")
        self.progress_label.setText("  ·  ".join(parts))
