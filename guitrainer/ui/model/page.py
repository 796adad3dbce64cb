"""Model & Precision page: the base model and its VAE, training and save precision, and the memory savers.

The device probe imports torch, so it never runs while the window opens: the window's one
:class:`~guitrainer.ui.device_service.DeviceService` starts it :data:`PROBE_DELAY_MS` after the page is
first shown (or when :meth:`ModelPage.start_probe` is called), and the precision picker shows
"Detecting device…" until the result arrives as a queued signal.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from PySide6.QtCore import QSettings, QTimer, Signal
from PySide6.QtGui import QShowEvent
from PySide6.QtWidgets import QFormLayout, QGroupBox, QHBoxLayout, QLabel, QPushButton, QVBoxLayout, QWidget

from guitrainer.config import field_info
from guitrainer.core.device.hardware import DeviceInfo
from guitrainer.ui.binding import (
    ConfigBinding,
    bound_editors,
    build_form,
    follow_applies,
    label_for,
    make_editor,
)
from guitrainer.ui.device_service import DeviceService
from guitrainer.ui.model.init_lora_row import InitLoraRow
from guitrainer.ui.model.model_picker import ModelPicker
from guitrainer.ui.model.precision_lab import LabRunner, PrecisionLabDialog
from guitrainer.ui.model.precision_picker import PrecisionPicker
from guitrainer.ui.model.text_encoder_row import TextEncoderRow
from guitrainer.ui.model.vae_picker import VaePicker
from guitrainer.ui.widgets.pages import Page, two_columns

log = logging.getLogger(__name__)

#: after the event loop starts, wait this long before probing, so the window paints first
PROBE_DELAY_MS = 400
MEMORY_FIELDS = (
    "gradient_checkpointing", "cache_latents", "cache_text_encoder_outputs", "cache_to_disk", "base_weights", "lora_weights",
)  # fmt: skip


class ModelPage(Page):
    """Base model picker, precision picker with device advice, and the memory-saving switches.

    The GPU selector (machines with several GPUs) edits ``precision.gpu_index``; a preset that sets it
    selects that GPU, and one without it trains on the first GPU.

    Signals:
        device_detected(object): the probe finished (the :class:`DeviceInfo`, with the config's GPU selected).
        errors_changed(bool): whether the page has a blocking problem (model or precision) flipped.
    """

    title = "Model & Precision"
    subtitle = "The model your LoRA is trained on, and the number formats used while training and saving."

    device_detected = Signal(object)
    errors_changed = Signal(bool)

    def __init__(
        self,
        binding: ConfigBinding,
        parent: QWidget | None = None,
        *,
        probe: Callable[[], DeviceInfo] | None = None,
        auto_probe: bool = True,
        settings: QSettings | None = None,
        device_service: DeviceService | None = None,
    ):
        """Build the page.

        Args:
            probe: returns the DeviceInfo, run on a worker thread (default :func:`hardware.probe`; tests pass fakes).
            auto_probe: probe when the page is first shown; else only when :meth:`start_probe` is called.
            settings: where the model picker keeps recently used models (default: the app's QSettings).
            device_service: the window's one device probe (default: a service of this page, with ``probe``).
        """
        super().__init__(binding, parent)
        self.devices = device_service or DeviceService(probe, self, use_cache=probe is None)
        self.devices.device_ready.connect(self._on_probe_finished)
        self.devices.probe_failed.connect(self._on_probe_failed)
        self._probe_scheduled = False
        self._had_errors = False
        self._error_text = ""

        model_box = QGroupBox("Base model", self)
        mb = QVBoxLayout(model_box)
        self.model_picker = ModelPicker(binding, model_box, settings=settings)
        mb.addWidget(self.model_picker)
        extra = QFormLayout()
        self.text_encoders = TextEncoderRow(binding, model_box)
        te_label = QLabel(label_for("model.text_encoders"), model_box)
        te_label.setToolTip(self.text_encoders.files_label.toolTip())
        te_label.setBuddy(self.text_encoders.files_button)
        extra.addRow(te_label, self.text_encoders)
        self._text_encoder_label = te_label
        self.vae_picker = VaePicker(binding, model_box)
        vae_label = QLabel(label_for("model.vae"), model_box)
        vae_label.setToolTip(self.vae_picker.edit.toolTip())
        vae_label.setBuddy(self.vae_picker.edit)
        extra.addRow(vae_label, self.vae_picker)
        self.init_lora = InitLoraRow(binding, model_box)
        lab = QLabel(label_for("model.init_lora"), model_box)
        lab.setToolTip(self.init_lora.edit.toolTip())
        lab.setBuddy(self.init_lora.edit)
        extra.addRow(lab, self.init_lora)
        mb.addLayout(extra)

        precision_box = QGroupBox("Precision", self)
        pb = QVBoxLayout(precision_box)
        cached = self.devices.device()
        self.precision_picker = PrecisionPicker(binding, cached, precision_box)
        pb.addWidget(self.precision_picker)
        self.measure_button = QPushButton("Measure on this machine…", precision_box)
        self.measure_button.setObjectName("measure_precisions")
        self.measure_button.setToolTip(
            "Train a few real steps of these settings in each precision and compare speed, memory, energy "
            "and loss (the precision lab)"
        )
        self.measure_button.clicked.connect(self.open_precision_lab)
        # under the device's facts (that column has room to spare: the page still fits 1366 x 768)
        self.precision_picker.device_box.layout().addWidget(self.measure_button)
        self.lab_dialog: PrecisionLabDialog | None = None
        self.lab_runner: LabRunner | None = None  # tests: a stand-in for the engine's lab

        self.memory_form = build_form(binding, "precision", fields=MEMORY_FIELDS, title="Memory savers", parent=self)
        self._add_offload_beside_checkpointing(binding)
        # The advice goes under the memory savers, where the left column has room: under the device's facts
        # it made the page scroll at 1366 x 768 as soon as two notes showed (SDXL + fp16: the VAE advice).
        advice = self.precision_picker.advice_box
        self.precision_picker.device_column.removeWidget(advice)
        self.body.addLayout(two_columns([model_box, self.memory_form, advice], [precision_box]))
        self.finish()

        self.precision_picker.errors_changed.connect(self._update_errors)
        self.model_picker.detected.connect(self._update_errors)
        self.vae_picker.problem_changed.connect(self._update_errors)
        self.text_encoders.problem_changed.connect(self._update_errors)
        binding.changed.connect(self._show_text_encoders)
        binding.replaced.connect(self._show_text_encoders)
        self._show_text_encoders()
        self.init_lora.problem_changed.connect(self._update_errors)
        self._update_errors()
        self._auto_probe = auto_probe

    def _add_offload_beside_checkpointing(self, binding: ConfigBinding) -> None:
        """``precision.offload_blocks`` on the gradient-checkpointing row it depends on (greyed out without it):
        neither column has room for another row at 1366 x 768 with the advanced savers open."""
        path = "precision.offload_blocks"
        checkbox = bound_editors(self.memory_form)["precision.gradient_checkpointing"]
        row = QWidget(self.memory_form)
        line = QHBoxLayout(row)
        line.setContentsMargins(0, 0, 0, 0)
        self.memory_form.layout().replaceWidget(checkbox, row)  # the form's row now holds the pair
        line.addWidget(checkbox)
        line.addStretch(1)
        self.offload_editor = make_editor(binding, path, row)
        self.offload_editor.setDecimals(2)  # type: ignore[attr-defined]  # a QDoubleSpinBox: a share, 0-1
        # no taller than the checkbox row it joins: a spin box's own height would push the column's last note down
        self.offload_editor.setMaximumHeight(max(checkbox.sizeHint().height(), self.fontMetrics().height() + 2))
        lab = QLabel(label_for(path), row)
        lab.setToolTip(self.offload_editor.toolTip())
        lab.setBuddy(self.offload_editor)
        follow_applies(binding, field_info(path).metadata["applies"], (lab, self.offload_editor))
        line.addWidget(lab)
        line.addWidget(self.offload_editor)

    # ------------------------------------------------------------------ precision lab
    def open_precision_lab(self) -> PrecisionLabDialog:
        """Show the precision lab for the current settings (one window; shown again when already open)."""
        if self.lab_dialog is None:
            self.lab_dialog = PrecisionLabDialog(self.binding, self, runner=self.lab_runner)
            self.lab_dialog.measured.connect(lambda _report: self.precision_picker.measurements_changed())
        self.lab_dialog.show()
        self.lab_dialog.raise_()
        return self.lab_dialog

    # ------------------------------------------------------------------ device probe
    def start_probe(self) -> bool:
        """Probe the device on a worker thread (once). Returns False when it already ran or is running."""
        return self.devices.start()

    def probe_running(self) -> bool:
        return self.devices.running()

    def showEvent(self, event: QShowEvent) -> None:  # noqa: N802 - Qt override
        """First shown: probe :data:`PROBE_DELAY_MS` later, so the window paints before torch loads."""
        super().showEvent(event)
        if self._auto_probe and not self.devices.started() and not self._probe_scheduled:
            self._probe_scheduled = True
            QTimer.singleShot(PROBE_DELAY_MS, self.start_probe)

    def _on_probe_finished(self, device: DeviceInfo) -> None:
        self.precision_picker.set_device(device)
        chosen = self.precision_picker.device() or device  # with the config's GPU (precision.gpu_index) selected
        log.info("device: %s", chosen.summary())
        self.device_detected.emit(chosen)

    def _on_probe_failed(self, reason: str) -> None:
        self.precision_picker.set_status(f"Could not detect the device: {reason}")

    def _show_text_encoders(self, *_args: object) -> None:
        """The text-encoder files' row shows for a split install only (a Flux.1 / SD 3.5 transformer file, or
        files chosen): an SD user never sees it."""
        wanted = self.text_encoders.wanted()
        self.text_encoders.setVisible(wanted)
        self._text_encoder_label.setVisible(wanted)

    # ------------------------------------------------------------------ errors for the Start button
    def has_errors(self) -> bool:
        """True when training cannot start: an unusable base model, VAE or LoRA to continue from, or error-level
        precision advice."""
        return (not self.model_picker.detection().ok) or self.vae_picker.has_problem() or bool(self.init_lora.problem) \
            or self.text_encoders.has_problem() or self.precision_picker.has_errors()

    def error_text(self) -> str:
        parts = []
        d = self.model_picker.detection()
        if not d.ok:
            parts.append(d.message)
        if self.text_encoders.has_problem():
            parts.append(self.text_encoders.problem_text())
        if self.vae_picker.has_problem():
            parts.append(self.vae_picker.problem_text())
        if self.init_lora.problem:
            parts.append(self.init_lora.problem)
        if self.precision_picker.has_errors():
            parts.append(self.precision_picker.error_text())
        return "\n".join(parts)

    def _update_errors(self, *_args: object) -> None:
        errors = self.has_errors()
        text = self.error_text() if errors else ""
        if errors != self._had_errors or text != self._error_text:  # a new message is news too (Train's banner)
            self._had_errors, self._error_text = errors, text
            self.errors_changed.emit(errors)
