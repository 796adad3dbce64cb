"""PrecisionPicker: training and save precision, the device's facts beside them, and advice inline.

Bound to ``precision.training``, ``precision.save`` and (the GPU selector, shown on machines with several
GPUs) ``precision.gpu_index`` of a :class:`ConfigBinding`. The advice comes from
:func:`guitrainer.core.precision.advisor.advise` and is recomputed on every config change and whenever
:meth:`PrecisionPicker.set_device` is called; each piece of advice with a suggestion has a
"Use suggested" button that applies it through the binding.
"""

from __future__ import annotations

import html
import logging
from collections.abc import Callable

from PySide6.QtCore import QSignalBlocker, Qt, Signal
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import (
    QButtonGroup,
    QComboBox,
    QFormLayout,
    QFrame,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QRadioButton,
    QSizePolicy,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from guitrainer.config import field_info, precision_choices
from guitrainer.config.precision_choices import PrecisionChoice
from guitrainer.core.device.hardware import DeviceInfo
from guitrainer.core.precision import advisor
from guitrainer.core.precision.advice import Advice
from guitrainer.core.precision.choice_notes import choice_notes
from guitrainer.core.precision.measurements import (
    MeasurementStore,
    measured_facts,
    measured_recommendation,
    recommended_here,
)
from guitrainer.ui.binding import BINDING_PROPERTY, ConfigBinding
from guitrainer.ui.widgets.icons import level_icon

log = logging.getLogger(__name__)

# translucent tints so the rows read on light and dark palettes alike
LEVEL_COLORS = {"error": "220, 53, 69", "warning": "230, 145, 0", "info": "40, 120, 210"}
DETECTING = "Detecting device…"
GPU_PATH = "precision.gpu_index"


class _ChoiceGroup(QGroupBox):
    """Radio buttons for one precision field, each with a one-line explanation under it."""

    def __init__(self, binding: ConfigBinding, path: str, title: str, choices: tuple[PrecisionChoice, ...], parent: QWidget):
        super().__init__(title, parent)
        self.binding = binding
        self.path = path
        self.group = QButtonGroup(self)
        self.buttons: dict[str, QRadioButton] = {}
        self.notes: dict[str, QLabel] = {}
        self.setProperty(BINDING_PROPERTY + "_group", path)
        self.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Preferred)
        box = QVBoxLayout(self)
        box.setSpacing(0)
        for row, choice in enumerate(choices):
            button = QRadioButton(choice.label, self)
            button.setObjectName(f"{path.replace('.', '_')}_{choice.value}")
            button.setToolTip(choice.explanation)
            note = QLabel("", self)
            # a steady width for the notes column: the page's two columns then share 1366 px the same way
            # whatever the device's notes say (a short note let the wrapped explanations grow taller)
            note.setMinimumWidth(note.fontMetrics().horizontalAdvance("fp16 on the CPU works but is slow"))
            note.setObjectName(f"{path.replace('.', '_')}_{choice.value}_note")
            explanation = QLabel(choice.explanation, self)
            explanation.setWordWrap(True)
            explanation.setStyleSheet("color: palette(placeholder-text);")
            explanation.setContentsMargins(24, 0, 0, 8)
            line = QHBoxLayout()
            line.setSpacing(10)
            line.addWidget(button)
            line.addWidget(note)
            line.addStretch(1)
            box.addLayout(line)
            box.addWidget(explanation)
            self.group.addButton(button, row)
            self.buttons[choice.value] = button
            self.notes[choice.value] = note
            button.toggled.connect(lambda on, v=choice.value: on and self.binding.set(self.path, v))
        self.pull()

    def pull(self) -> None:
        value = self.binding.get(self.path)
        button = self.buttons.get(value)
        if button is not None and not button.isChecked():
            with QSignalBlocker(button):
                button.setChecked(True)

    def set_note(self, value: str, text: str, color: str = "") -> None:
        note = self.notes[value]
        note.setText(text)
        note.setStyleSheet(f"color: {color}; font-weight: 600;" if color else "")


#: notes shown before the rest fold under "N more notes…" (two notes show whole: no fold hides just one)
SHOWN_NOTES = 1
#: advice longer than this shows its first sentence until "More…"
COLLAPSE_OVER = 110


def first_sentence(message: str) -> str:
    """``message`` itself when short, else its first sentence (ending at ". " or ": "), or when that is long too,
    its words up to :data:`COLLAPSE_OVER` characters and "…"."""
    if len(message) <= COLLAPSE_OVER:
        return message
    ends = [i for i in (message.find(". ", 30), message.find(": ", 30)) if i > 0]
    if ends and min(ends) < COLLAPSE_OVER:
        cut = message[: min(ends) + 1]
        return cut[:-1] + "…" if cut.endswith(":") else cut  # not "…to save memory: More…"
    cut = message.rfind(" ", 0, COLLAPSE_OVER)
    return message[: cut if cut > 30 else COLLAPSE_OVER].rstrip(" ,;(") + "…"


class AdviceRow(QFrame):
    """One piece of advice: an icon per level, the message, and a "Use suggested" button."""

    def __init__(self, advice: Advice, apply: Callable[[Advice], None], parent: QWidget | None = None):
        super().__init__(parent)
        self.advice = advice
        self.setObjectName(f"advice_{advice.level}")
        self.setProperty("advice_code", advice.code)
        self.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Preferred)
        rgb = LEVEL_COLORS[advice.level]
        self.setStyleSheet(
            f"QFrame#advice_{advice.level} {{ background: rgba({rgb}, 0.10); border: 1px solid rgba({rgb}, 0.45);"
            " border-radius: 6px; }"
        )
        row = QHBoxLayout(self)
        row.setContentsMargins(8, 4, 8, 4)
        row.setSpacing(8)
        icon = QLabel(self)
        icon.setObjectName("advice_icon")
        icon.setPixmap(level_icon(self, advice.level).pixmap(20, 20))
        row.addWidget(icon, 0, Qt.AlignmentFlag.AlignTop)
        suggested = ""
        if advice.suggestion_text and advice.suggestion:
            suggested = f" <b>Suggested:</b> {html.escape(advice.suggestion_text)}"  # inline: a line saved
        elif advice.suggestion_text:
            suggested = f"<br><code>{html.escape(advice.suggestion_text)}</code>"
        # a long message shows its first sentence and "More…" (the whole of it in the tooltip too): a page
        # of notes must not push the page past 1366 x 768
        short = first_sentence(advice.message)
        full = html.escape(advice.message) + suggested
        brief = suggested if advice.suggestion else ""  # a command shows when expanded ("Copy command" copies it)
        self._texts = (full, "") if short == advice.message else (
            f"{html.escape(short)} <a href='more'>More…</a>{brief}", f"{full} <a href='less'>Less</a>"
        )  # fmt: skip
        self.label = QLabel(self._texts[0], self)
        self.label.setToolTip(advice.message if self._texts[1] else "")
        self.label.linkActivated.connect(self.set_expanded_by_link)
        self.label.setObjectName("advice_text")
        self.label.setWordWrap(True)
        self.label.setTextFormat(Qt.TextFormat.RichText)
        self.label.setTextInteractionFlags(
            Qt.TextInteractionFlag.TextSelectableByMouse | Qt.TextInteractionFlag.LinksAccessibleByMouse
        )
        self.label.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Preferred)
        self.label.setAlignment(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignTop)
        text_col = QVBoxLayout()
        text_col.setSpacing(4)
        text_col.addWidget(self.label)
        row.addLayout(text_col, 1)
        self.button: QPushButton | None = None
        if advice.suggestion:
            self.button = QPushButton("Use suggested", self)
            self.button.setObjectName("use_suggested")
            self.button.setToolTip(advice.suggestion_text)
            self.button.clicked.connect(lambda: apply(advice))
            row.addWidget(self.button, 0, Qt.AlignmentFlag.AlignBottom)  # beside the text: no line of its own
        elif advice.suggestion_text:
            self.button = QPushButton("Copy command", self)
            self.button.setObjectName("copy_suggestion")
            self.button.setToolTip(advice.suggestion_text)
            self.button.clicked.connect(lambda: QGuiApplication.clipboard().setText(advice.suggestion_text))
            row.addWidget(self.button, 0, Qt.AlignmentFlag.AlignBottom)

    def collapsible(self) -> bool:
        """The message is long enough to show its first sentence only until "More…"."""
        return bool(self._texts[1])

    def set_expanded(self, expanded: bool) -> None:
        """Show the whole message (True) or its first sentence (False)."""
        if self.collapsible():
            self.label.setText(self._texts[1] if expanded else self._texts[0])

    def set_expanded_by_link(self, link: str) -> None:
        self.set_expanded(link == "more")


class PrecisionPicker(QWidget):
    """Training / save precision choices with device facts and GPU-aware advice.

    Signals:
        errors_changed(bool): the "has error-level advice" state flipped (Start buttons listen to this).
        advice_changed(): the advice shown changed.
        device_changed(object): another GPU was selected, with the selector or by a config / preset
            (the new :class:`DeviceInfo`).
    """

    errors_changed = Signal(bool)
    advice_changed = Signal()
    device_changed = Signal(object)

    def __init__(self, binding: ConfigBinding, device: DeviceInfo | None = None, parent: QWidget | None = None):
        super().__init__(parent)
        self.binding = binding
        self._machine: DeviceInfo | None = None  # as probed (all GPUs)
        self._device: DeviceInfo | None = None  # with the GPU of precision.gpu_index selected
        self._advice: list[Advice] = []
        self._advice_key: tuple = ()
        self._facts_shown: list[tuple[str, str, bool]] = []
        self._had_errors = False
        #: the precision lab's measurements: "recommended here" follows one for this device and model family
        self.measurement_store = MeasurementStore()

        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        outer.setSpacing(10)
        top = QHBoxLayout()
        top.setSpacing(10)
        outer.addLayout(top)
        left = QVBoxLayout()
        left.setSpacing(10)
        top.addLayout(left, 3)
        self.training_group = _ChoiceGroup(binding, "precision.training", "Training precision", precision_choices.TRAINING_CHOICES, self)
        self.save_group = _ChoiceGroup(binding, "precision.save", "Save precision", precision_choices.SAVE_CHOICES, self)
        left.addWidget(self.training_group)
        left.addWidget(self.save_group)
        left.addStretch(1)

        self.device_box = QGroupBox("This computer", self)
        self.device_box.setObjectName("device_box")
        dev = QVBoxLayout(self.device_box)
        self.device_combo = QComboBox(self.device_box)
        self.device_combo.setObjectName("device_combo")
        self.device_combo.setToolTip(field_info(GPU_PATH).metadata["help"])
        self.device_combo.setProperty(BINDING_PROPERTY, GPU_PATH)
        self.device_combo.setVisible(False)
        self.device_combo.currentIndexChanged.connect(self._on_device_index)
        dev.addWidget(self.device_combo)
        self.status_label = QLabel(DETECTING, self.device_box)
        self.status_label.setObjectName("device_status")
        self.status_label.setStyleSheet("color: palette(placeholder-text);")
        dev.addWidget(self.status_label)
        self.facts_form = QFormLayout()
        self.facts_form.setLabelAlignment(Qt.AlignmentFlag.AlignLeft)
        self.facts_form.setHorizontalSpacing(12)
        dev.addLayout(self.facts_form)
        # "Precision lab: bf16 AMP, measured …" when a measurement decides "recommended here"; in this column,
        # which has room to spare, so the page still fits 1366 x 768
        self.measured_label = QLabel("", self.device_box)
        self.measured_label.setObjectName("measured_note")
        self.measured_label.setWordWrap(True)
        self.measured_label.setVisible(False)
        dev.addWidget(self.measured_label)
        self.device_box.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Preferred)
        self.device_column = right = QVBoxLayout()  # a page may move the advice out of it (see ModelPage)
        right.setSpacing(8)
        right.addWidget(self.device_box)
        top.addLayout(right, 2)

        self.advice_box = QWidget(self)
        self.advice_box.setObjectName("advice_box")
        self.advice_layout = QVBoxLayout(self.advice_box)
        self.advice_layout.setContentsMargins(0, 0, 0, 0)
        self.advice_layout.setSpacing(6)
        self.more_notes = QToolButton(self.advice_box)
        self.more_notes.setObjectName("more_notes")
        self.more_notes.setCheckable(True)
        self.more_notes.setAutoRaise(True)
        self.more_notes.toggled.connect(self._unfold_notes)
        self.more_notes.hide()
        self.advice_layout.addWidget(self.more_notes, 0, Qt.AlignmentFlag.AlignLeft)
        self._folded: list[AdviceRow] = []
        right.addWidget(self.advice_box)
        right.addStretch(1)

        binding.changed.connect(self._on_changed)
        binding.replaced.connect(self._on_replaced)
        self.set_device(device)

    # ------------------------------------------------------------------ public API
    def device(self) -> DeviceInfo | None:
        """The device the advice is for (with the chosen GPU selected), or None while detecting."""
        return self._device

    def set_device(self, device: DeviceInfo | None) -> None:
        """Show ``device`` (None: "Detecting device…") with the config's GPU selected, and recompute the advice."""
        self._machine = device
        self._device = self._chosen()
        gpus = device.gpus if device is not None else ()
        with QSignalBlocker(self.device_combo):
            self.device_combo.clear()
            for g in gpus:
                self.device_combo.addItem(g.label(), g.index)
        self._pull_gpu()
        self.device_combo.setVisible(len(gpus) > 1)
        self._show_device()

    def set_status(self, text: str) -> None:
        """Show ``text`` in the device panel (e.g. why detection failed)."""
        self.status_label.setText(text)
        self.status_label.setWordWrap(True)
        self.status_label.setVisible(True)

    def advice(self) -> list[Advice]:
        return list(self._advice)

    def has_errors(self) -> bool:
        return any(a.level == "error" for a in self._advice)

    def error_text(self) -> str:
        """The error-level messages, one per line ("" when there are none), for a tooltip."""
        return "\n".join(a.message for a in self._advice if a.level == "error")

    def apply(self, advice: Advice) -> None:
        """Apply ``advice.suggestion`` through the binding."""
        for path, value in advice.suggestion.items():
            if not self.binding.set(path, value):
                log.warning("could not apply suggestion %s=%r", path, value)

    def advice_rows(self) -> list[AdviceRow]:
        return [w for w in self.advice_box.findChildren(AdviceRow) if w.parent() is self.advice_box]

    def refresh(self) -> None:
        """Recompute the advice (cheap: pure Python rules)."""
        self._advice = advisor.advise(self._device, self.binding.config, self.measurement_store)
        key = tuple((a.level, a.message, tuple(sorted(a.suggestion.items())), a.suggestion_text) for a in self._advice)
        if key != self._advice_key:
            self._advice_key = key
            self._rebuild_rows()
            self.advice_changed.emit()
        errors = self.has_errors()
        if errors != self._had_errors:
            self._had_errors = errors
            self.errors_changed.emit(errors)

    # ------------------------------------------------------------------ internals
    def _on_device_index(self, row: int) -> None:
        """The user picked a GPU: write it to the config (``_on_changed`` then selects it)."""
        if self._machine is None or row < 0:
            return
        self.binding.set(GPU_PATH, int(self.device_combo.itemData(row)))

    def _chosen(self) -> DeviceInfo | None:
        """The probed machine with the GPU of ``precision.gpu_index`` selected."""
        if self._machine is None:
            return None
        return self._machine.for_gpu_index(self.binding.get(GPU_PATH))

    def _pull_gpu(self) -> None:
        """Show the config's GPU in the selector: automatic shows the first GPU, a missing one shows none."""
        index = self.binding.get(GPU_PATH)
        ok = self._machine is not None and self._machine.gpu_index_valid(index)
        row = self.device_combo.findData(max(index, 0)) if ok else -1
        if row != self.device_combo.currentIndex():
            with QSignalBlocker(self.device_combo):
                self.device_combo.setCurrentIndex(row)

    def _follow_gpu_index(self) -> None:
        """``precision.gpu_index`` changed (selector, preset, "Use suggested"): show and advise for that GPU."""
        self._pull_gpu()
        device = self._chosen()
        if device == self._device:
            return
        self._device = device
        self._show_device()
        self.device_changed.emit(device)

    def _on_changed(self, path: str) -> None:
        if path == "precision.training":
            self.training_group.pull()
        elif path == "precision.save":
            self.save_group.pull()
        elif path == GPU_PATH:
            self._follow_gpu_index()
        elif path in ("model.family", "model.base", "dataset.resolution", "precision.base_weights"):
            self._show_facts()  # another model or size: another measurement may apply (facts and notes)
            self._update_notes()
        self.refresh()

    def _on_replaced(self) -> None:
        self.training_group.pull()
        self.save_group.pull()
        self._follow_gpu_index()
        self._update_notes()
        self.refresh()

    def measurements_changed(self) -> None:
        """The precision lab stored a measurement: let the notes, the facts and the advice follow it."""
        self._show_device()

    def _show_device(self) -> None:
        device = self._device
        if device is None:
            self.status_label.setText(DETECTING)
        self.status_label.setVisible(device is None)
        self._show_facts()
        self._update_notes()
        self.refresh()

    def _show_facts(self) -> None:
        """The device's facts, and what a measurement of it contradicts (DESIGN §5); rebuilt only when they change
        (a model-family change usually changes nothing here, and rebuilding re-lays out the whole column)."""
        device = self._device
        rows: list[tuple[str, str, bool]] = []
        if device is not None:
            measured = measured_recommendation(device, self.binding.config, self.measurement_store)
            rows = [(label, value, False) for label, value in measured_facts(device, device.facts(), measured)]
            rows += [(fact, f"unknown ({reason})", True) for fact, reason in device.unknown]
        if rows == self._facts_shown and self.facts_form.rowCount() == len(rows):
            return
        self._facts_shown = rows
        while self.facts_form.rowCount():
            self.facts_form.removeRow(0)
        for label, value, unknown in rows:
            name = QLabel(label, self.device_box)
            val = QLabel(value, self.device_box)
            val.setWordWrap(True)
            if unknown:
                val.setStyleSheet("color: palette(placeholder-text);")
            else:
                name.setStyleSheet("color: palette(placeholder-text);")
                val.setObjectName(f"fact_{label.lower().replace(' ', '_')}")
                val.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
            self.facts_form.addRow(name, val)

    def _update_notes(self) -> None:
        """Per training choice the note :func:`~guitrainer.core.precision.choice_notes.choice_notes` decides: "not
        supported here", "recommended here" (a measurement on this device and model family outranks the rules, and
        says so), what the lab measured, or the rules' caveat."""
        rec = recommended_here(self._device, self.binding.config, self.measurement_store)
        measured = rec is not None and rec.measured is not None
        self.measured_label.setText(f"Precision lab: {rec.reason}" if measured else "")  # type: ignore[union-attr]
        self.measured_label.setVisible(measured)
        colors = {"recommended": "rgb(30, 140, 70)", "error": f"rgb({LEVEL_COLORS['error']})",
                  "warning": f"rgb({LEVEL_COLORS['warning']})", "measured": f"rgb({LEVEL_COLORS['info']})"}
        for value, note in choice_notes(self._device, self.binding.config, self.measurement_store).items():
            self.training_group.set_note(value, note.text, colors.get(note.kind, ""))
            self.training_group.notes[value].setToolTip(note.tooltip)

    def _rebuild_rows(self) -> None:
        """One row per note, the most serious first; beyond :data:`SHOWN_NOTES` they fold under "N more notes"
        (five notes with the advanced savers open made the page scroll ~200 px at 1366 x 768)."""
        for row in self.advice_rows():
            row.setParent(None)
            row.deleteLater()
        order = {"error": 0, "warning": 1}
        rows = [AdviceRow(a, self.apply, self.advice_box) for a in sorted(self._advice, key=lambda a: order.get(a.level, 2))]
        for i, row in enumerate(rows):
            self.advice_layout.insertWidget(i, row)
        hidden = rows[SHOWN_NOTES:] if len(rows) > SHOWN_NOTES + 1 else []
        self.more_notes.setVisible(bool(hidden))
        self.more_notes.setChecked(False)
        self.more_notes.setText(f"{len(hidden)} more notes…")
        for row in hidden:
            row.setVisible(False)
        self._folded = hidden
        self.advice_box.setVisible(bool(self._advice))

    def _unfold_notes(self, on: bool) -> None:
        for row in self._folded:
            row.setVisible(on)
        self.more_notes.setText("Fewer notes" if on else f"{len(self._folded)} more notes…")
