"""ConfigBinding: the Qt face of one TrainingConfig, and editors generated from field metadata.

Every page edits the same :class:`ConfigBinding`. A widget writes with ``binding.set(path, value)``;
the binding validates, stores and emits ``changed(path)``; every other widget bound to that
path (and the VRAM meter, the precision advice, ...) updates from the signal. Loading a preset
replaces the whole config and emits ``replaced``.
"""

from __future__ import annotations

import dataclasses
import logging
import typing
from collections.abc import Callable, Iterable
from typing import Any

from PySide6.QtCore import QObject, QSignalBlocker, Qt, Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QSpinBox,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from guitrainer.config import (
    SECTIONS,
    ConfigError,
    DatasetFolder,
    TrainingConfig,
    field_choices,
    field_info,
    field_type,
)

log = logging.getLogger(__name__)

BINDING_PROPERTY = "config_path"  # every generated editor carries the dotted path it edits


class ConfigBinding(QObject):
    """Holds the current TrainingConfig and tells everyone when it changes."""

    changed = Signal(str)  # dotted path of the field that changed
    replaced = Signal()  # the whole config was swapped (preset loaded, file opened)
    invalid = Signal(str, str)  # path, message: a widget offered a value validation refused

    def __init__(self, config: TrainingConfig | None = None, parent: QObject | None = None):
        super().__init__(parent)
        self._config = config or TrainingConfig()

    @property
    def config(self) -> TrainingConfig:
        return self._config

    def get(self, path: str) -> Any:
        return self._config.get(path)

    def set(self, path: str, value: Any) -> bool:
        """Validate and store; emit ``changed`` only when the value really changed."""
        old = self._config.get(path)
        try:
            self._config.set(path, value)
        except ConfigError as e:
            self.invalid.emit(path, e.message)
            return False
        if self._config.get(path) != old:
            self.changed.emit(path)
        return True

    def replace(self, config: TrainingConfig) -> None:
        self._config = config.copy()
        self.replaced.emit()


# --------------------------------------------------------------------------- editors


class ScientificSpinBox(QDoubleSpinBox):
    """Shows learning rates as ``1e-4`` / ``3.5e-05`` and steps by factors instead of fixed amounts."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.setDecimals(12)
        self.setMinimumWidth(110)

    def textFromValue(self, value: float) -> str:  # noqa: N802
        return f"{value:.3g}"

    def valueFromText(self, text: str) -> float:  # noqa: N802
        try:
            return float(text.strip())
        except ValueError:
            return self.value()

    def validate(self, text: str, pos: int):  # noqa: ANN201
        from PySide6.QtGui import QValidator

        s = text.strip()
        try:
            float(s)
            return QValidator.State.Acceptable, text, pos
        except ValueError:
            if s == "" or s[-1] in "eE.-+":
                return QValidator.State.Intermediate, text, pos
            return QValidator.State.Invalid, text, pos

    def stepBy(self, steps: int) -> None:  # noqa: N802
        v = self.value() or 1e-6
        self.setValue(v * (2.0**steps))


def _tooltip(f: dataclasses.Field) -> str:
    help_text = f.metadata.get("help", "")
    lo, hi = f.metadata.get("minimum"), f.metadata.get("maximum")
    if lo is not None and hi is not None:
        help_text += f"\nRange: {lo:g} – {hi:g}"
    return help_text


def label_for(path: str) -> str:
    return field_info(path).metadata.get("label", path)


def _text_editor(binding: ConfigBinding, path: str, t: Any, parent: QWidget | None) -> tuple[QWidget, Callable[[], None]]:
    """A multi-line editor for a text or a list field (one item a line): the widget and its pull()."""
    text = QPlainTextEdit(parent)
    text.setTabChangesFocus(True)
    text.setMaximumHeight(90)
    is_list = typing.get_origin(t) is list
    item_type = typing.get_args(t)[0] if is_list else str

    def push() -> None:
        raw = text.toPlainText()
        if not is_list:
            binding.set(path, raw)
            return
        lines = [ln.strip() for ln in raw.splitlines() if ln.strip()]
        if item_type is DatasetFolder:
            binding.set(path, [_parse_folder_line(ln) for ln in lines])
        else:
            binding.set(path, lines)

    text.textChanged.connect(push)

    def pull() -> None:
        value = binding.get(path)
        if is_list:
            shown = "\n".join(_folder_line(v) if isinstance(v, DatasetFolder) else str(v) for v in value)
        else:
            shown = str(value)
        if text.toPlainText() != shown:
            with QSignalBlocker(text):
                text.setPlainText(shown)

    return text, pull


def make_editor(binding: ConfigBinding, path: str, parent: QWidget | None = None) -> QWidget:
    """A widget for one config field, kept in sync with ``binding`` in both directions."""
    f = field_info(path)
    t = field_type(f)
    meta = f.metadata
    choices = field_choices(f)
    w: QWidget
    if choices is not None:
        combo = QComboBox(parent)
        labels = meta.get("choice_labels") or {}
        for c in choices:
            combo.addItem(labels.get(c, c), c)
        combo.currentIndexChanged.connect(lambda _i, c=combo: binding.set(path, c.currentData()))

        def pull() -> None:
            with QSignalBlocker(combo):
                combo.setCurrentIndex(max(0, combo.findData(binding.get(path))))

        w = combo
    elif t is bool:
        box = QCheckBox(parent)
        box.toggled.connect(lambda v: binding.set(path, bool(v)))

        def pull() -> None:
            with QSignalBlocker(box):
                box.setChecked(bool(binding.get(path)))

        w = box
    elif t is int:
        spin = QSpinBox(parent)
        lo, hi = meta.get("minimum"), meta.get("maximum")
        spin.setRange(int(lo if lo is not None else -(2**31)), int(min(hi if hi is not None else 2**31 - 1, 2**31 - 1)))
        if meta.get("unit"):
            spin.setSuffix(f" {meta['unit']}")
        spin.setKeyboardTracking(False)
        spin.valueChanged.connect(lambda v: binding.set(path, int(v)))

        def pull() -> None:
            with QSignalBlocker(spin):
                spin.setValue(int(binding.get(path)))

        w = spin
    elif t is float:
        lo, hi = meta.get("minimum"), meta.get("maximum")
        dspin = ScientificSpinBox(parent) if meta.get("kind") == "scientific" else QDoubleSpinBox(parent)
        dspin.setRange(float(lo if lo is not None else -1e12), float(hi if hi is not None else 1e12))
        if not isinstance(dspin, ScientificSpinBox):
            dspin.setDecimals(4)
            dspin.setSingleStep(0.05 if (hi or 0) <= 1 else 1.0)
        dspin.setKeyboardTracking(False)
        dspin.valueChanged.connect(lambda v: binding.set(path, float(v)))

        def pull() -> None:
            with QSignalBlocker(dspin):
                dspin.setValue(float(binding.get(path)))

        w = dspin
    elif typing.get_origin(t) is list or meta.get("kind") == "multiline":
        w, pull = _text_editor(binding, path, t, parent)
    else:
        line = QLineEdit(parent)
        line.editingFinished.connect(lambda: binding.set(path, line.text()))
        line.textEdited.connect(lambda s: binding.set(path, s))

        def pull() -> None:
            value = str(binding.get(path))
            if line.text() != value:
                with QSignalBlocker(line):
                    line.setText(value)

        w = line
    w.setToolTip(_tooltip(f))
    w.setProperty(BINDING_PROPERTY, path)
    w.setObjectName(f"edit_{path.replace('.', '_')}")
    pull()
    binding.changed.connect(lambda p: pull() if p == path else None)
    binding.replaced.connect(pull)
    return w


def _folder_line(folder: DatasetFolder) -> str:
    return f"{folder.path}  ×{folder.repeats}" if folder.repeats != 1 else folder.path


def _parse_folder_line(line: str) -> DatasetFolder:
    path, sep, rep = line.rpartition("×")
    if sep and rep.strip().isdigit():
        return DatasetFolder(path=path.strip(), repeats=int(rep.strip()))
    return DatasetFolder.from_value(line)


def build_form(
    binding: ConfigBinding,
    section: str,
    fields: Iterable[str] | None = None,
    *,
    title: str | None = None,
    include_advanced: bool = True,
    parent: QWidget | None = None,
) -> QGroupBox:
    """A group box with a labelled editor for each field of ``section`` (or the named ones).

    Advanced fields are folded under a "Show advanced" toggle.
    """
    cls = SECTIONS[section]
    names = list(fields) if fields is not None else [f.name for f in dataclasses.fields(cls)]
    box = QGroupBox(title or section.capitalize(), parent)
    outer = QVBoxLayout(box)
    basic = QFormLayout()
    basic.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.ExpandingFieldsGrow)
    outer.addLayout(basic)
    adv_widget = QWidget(box)
    adv = QFormLayout(adv_widget)
    adv.setContentsMargins(0, 0, 0, 0)
    n_adv = 0
    for name in names:
        path = f"{section}.{name}"
        f = field_info(path)
        if f.metadata.get("advanced") and not include_advanced:
            continue
        editor = make_editor(binding, path, box)
        lab = QLabel(f.metadata.get("label", name))
        lab.setToolTip(editor.toolTip())
        lab.setBuddy(editor)
        if f.metadata.get("applies"):
            follow_applies(binding, f.metadata["applies"], (lab, editor))
        if f.metadata.get("advanced"):
            adv.addRow(lab, editor)
            n_adv += 1
        else:
            basic.addRow(lab, editor)
    if n_adv:
        toggle = QToolButton(box)
        toggle.setText(f"Show advanced ({n_adv})")
        toggle.setCheckable(True)
        toggle.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        toggle.setArrowType(Qt.ArrowType.RightArrow)
        adv_widget.setVisible(False)

        def flip(on: bool) -> None:
            adv_widget.setVisible(on)
            toggle.setArrowType(Qt.ArrowType.DownArrow if on else Qt.ArrowType.RightArrow)
            toggle.setText(("Hide" if on else "Show") + f" advanced ({n_adv})")

        toggle.toggled.connect(flip)
        row = QHBoxLayout()
        row.addWidget(toggle)
        row.addStretch(1)
        outer.addLayout(row)
        outer.addWidget(adv_widget)
    return box


def follow_applies(binding: ConfigBinding, applies: tuple[str, tuple[Any, ...]], widgets: Iterable[QWidget]) -> None:
    """Grey ``widgets`` out while the setting ``applies[0]`` is none of ``applies[1]``, saying when they apply."""
    other, values = applies
    info = field_info(other)
    names = info.metadata.get("choice_labels") or {}
    when = f"Only for {info.metadata.get('label', other)} = " + " / ".join(str(names.get(v, v)) for v in values)
    widgets = list(widgets)
    tips = {w: w.toolTip() for w in widgets}

    # "model.family = auto" is what the base model's files say: a setting for Flux applies to an auto-detected Flux
    watched = {other, "model.base"} if other == "model.family" else {other}

    def current() -> Any:
        value = binding.get(other)
        if other == "model.family":
            from guitrainer.core.memory.specs import resolve_family

            value = resolve_family(str(value), str(binding.get("model.base")))
        return value

    def update(*_args: object) -> None:
        on = current() in values
        for w in widgets:
            w.setEnabled(on)
            w.setToolTip(tips[w] if on else f"{when}. {tips[w]}".strip())

    binding.changed.connect(lambda path: update() if path in watched else None)
    binding.replaced.connect(update)
    update()


def bound_editors(root: QWidget) -> dict[str, QWidget]:
    """Every generated editor under ``root``, by the config path it edits (for tests)."""
    out: dict[str, QWidget] = {}
    for w in root.findChildren(QWidget):
        p = w.property(BINDING_PROPERTY)
        if p:
            out.setdefault(str(p), w)
    return out
