"""ModelPicker: choose the base model (folder, file, drop, hub id, built-in demo) and see its family.

Bound to ``model.base`` and ``model.family``. Detection is :func:`guitrainer.core.model.checkpoint.detect_model`
(reads a .safetensors header only, so it is instant and safe on the GUI thread). A user's choice that
detects a family sets ``model.family``; loading a preset only shows what it detects.
Several files chosen or dropped together are a split install (Flux.1 or SD 3.5 as ComfyUI keeps them): each goes
where its tensors say (:func:`guitrainer.core.model.split_files.arrange`) — ``model.base``, ``model.text_encoders``,
``model.vae``. Recently used models are kept in QSettings under ``recent_models`` (newest first, at most 10).
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

from PySide6.QtCore import QSettings, Qt, Signal
from PySide6.QtGui import QAction, QDragEnterEvent, QDropEvent
from PySide6.QtWidgets import (
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QMenu,
    QPushButton,
    QSizePolicy,
    QStyle,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from guitrainer.base import paths
from guitrainer.base.constants import PICKLE_SUFFIXES
from guitrainer.config import field_info
from guitrainer.core.families.registry import facts
from guitrainer.core.memory.specs import resolve_family
from guitrainer.core.model.checkpoint import SINGLE_FILE_SUFFIXES, ModelDetection, detect_model
from guitrainer.core.model.split_files import SplitChoice, arrange
from guitrainer.ui import start_dirs
from guitrainer.ui.app_settings import default_settings
from guitrainer.ui.binding import BINDING_PROPERTY, ConfigBinding, make_editor
from guitrainer.ui.widgets.icons import level_icon
from guitrainer.ui.workers import call_in_thread

log = logging.getLogger(__name__)

RECENT_KEY = "recent_models"
MAX_RECENT = 10
MODEL_SUFFIXES = SINGLE_FILE_SUFFIXES + PICKLE_SUFFIXES
FILE_FILTER = "Checkpoints (*.safetensors *.ckpt *.pt *.pth);;All files (*)"


def droppable_model_path(path: str) -> str | None:
    """The model path for a dropped local file or folder, or None when it cannot be a model."""
    p = Path(path)
    if p.is_dir():
        return str(p)
    if p.name == "model_index.json":
        return str(p.parent)
    if p.suffix.lower() in MODEL_SUFFIXES:
        return str(p)
    return None


#: the model path field never gets narrower (the whole path is in its tooltip and shows on a click)
PATH_MIN_WIDTH = 240

class ModelPathEdit(QLineEdit):
    """A line edit that accepts a dropped model folder or checkpoint file (local files only), or the several
    .safetensors files of a split install dropped together."""

    path_dropped = Signal(str)
    files_dropped = Signal(list)

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.setAcceptDrops(True)

    def _dropped_paths(self, event: QDragEnterEvent | QDropEvent) -> list[str]:
        mime = event.mimeData()
        if not mime.hasUrls():
            return []
        found = (droppable_model_path(url.toLocalFile()) for url in mime.urls() if url.isLocalFile())
        return list(dict.fromkeys(p for p in found if p))

    def dragEnterEvent(self, event: QDragEnterEvent) -> None:  # noqa: N802 - Qt override
        if self._dropped_paths(event):
            event.acceptProposedAction()
        else:
            event.ignore()

    def dragMoveEvent(self, event) -> None:  # noqa: N802 - Qt override
        event.acceptProposedAction() if self._dropped_paths(event) else event.ignore()

    def dropEvent(self, event: QDropEvent) -> None:  # noqa: N802 - Qt override
        dropped = self._dropped_paths(event)
        if not dropped:
            event.ignore()
            return
        event.acceptProposedAction()
        split = [p for p in dropped if p.lower().endswith(".safetensors") and Path(p).is_file()]
        if len(split) > 1:
            self.files_dropped.emit(split)  # a split install's files, dropped together
        else:
            self.path_dropped.emit(dropped[0])


class ModelPicker(QWidget):
    """Base model chooser bound to ``model.base`` / ``model.family``.

    Signals:
        detected(object): a new :class:`ModelDetection` for the current ``model.base``.
    """

    detected = Signal(object)

    def __init__(self, binding: ConfigBinding, parent: QWidget | None = None, settings: QSettings | None = None):
        super().__init__(parent)
        self.binding = binding
        self.settings = settings or default_settings()
        self._network_note = ""
        self._split_note = ""  # why files chosen together were not taken as a model (until the next choice)
        self._split_vae = ""  # the VAE file a split choice set: cleared with it when a one-file model is chosen
        self._detection: ModelDetection = detect_model(binding.get("model.base"))

        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        outer.setSpacing(6)
        row = QHBoxLayout()
        row.setSpacing(6)
        outer.addLayout(row)
        self.edit = ModelPathEdit(self)
        self.edit.setObjectName("edit_model_base")
        self.edit.setProperty(BINDING_PROPERTY, "model.base")
        self.edit.setPlaceholderText("Drop a model folder or .safetensors file here, or type a Hugging Face id")
        self.edit.setToolTip(field_info("model.base").metadata.get("help", ""))
        self.edit.setClearButtonEnabled(True)
        self.edit.setText(str(binding.get("model.base")))
        self.edit.editingFinished.connect(self._on_editing_finished)
        self.edit.path_dropped.connect(self.choose)
        self.edit.files_dropped.connect(self.choose_split)
        row.addWidget(self.edit, 1)
        style = self.style()
        self.folder_button = QPushButton(style.standardIcon(QStyle.StandardPixmap.SP_DirOpenIcon), "Folder…", self)
        self.folder_button.setObjectName("browse_folder")
        self.folder_button.setToolTip("Choose a diffusers model folder (the one with model_index.json).")
        self.folder_button.clicked.connect(self.browse_folder)
        self.file_button = QPushButton(style.standardIcon(QStyle.StandardPixmap.SP_FileIcon), "File…", self)
        self.file_button.setObjectName("browse_file")
        self.file_button.setToolTip("Choose a single-file checkpoint (.safetensors), or a split install's files "
                                    "together (the transformer, its text encoders and VAE, e.g. Flux.1 as "
                                    "ComfyUI keeps it).")
        self.file_button.clicked.connect(self.browse_file)
        self.demo_button = QPushButton("Built-in demo", self)
        self.demo_button.setObjectName("use_demo")
        self.demo_button.setToolTip("The tiny built-in model, which draws flat shapes (\"a blue square\"): trains on a CPU, for trying the app.")
        self.demo_button.clicked.connect(lambda: self.choose("demo"))
        self.recent_button = QToolButton(self)
        self.recent_button.setObjectName("recent_models")
        self.recent_button.setText("Recent")
        self.recent_button.setToolTip("Models you used recently")
        self.recent_button.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        self.recent_button.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextOnly)
        self.recent_menu = QMenu(self.recent_button)
        self.recent_button.setMenu(self.recent_menu)
        for b in (self.folder_button, self.file_button):  # icons only, their words in the tooltip (as the VAE row)
            b.setAccessibleName(b.text())
            b.setText("")
        self.edit.setMinimumWidth(PATH_MIN_WIDTH)  # a path's last folders show at 1366 px (it was ~110 px)
        for w in (self.folder_button, self.file_button, self.demo_button, self.recent_button):
            row.addWidget(w)

        status = QHBoxLayout()
        status.setSpacing(8)
        outer.addLayout(status)
        self.status_icon = QLabel(self)
        self.status_icon.setObjectName("model_status_icon")
        self.family_badge = QLabel(self)
        self.family_badge.setObjectName("family_badge")
        self.message_label = QLabel(self)
        self.message_label.setObjectName("model_message")
        self.message_label.setWordWrap(True)
        self.message_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.message_label.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Preferred)
        status.addWidget(self.status_icon, 0, Qt.AlignmentFlag.AlignTop)
        status.addWidget(self.family_badge, 0, Qt.AlignmentFlag.AlignTop)
        status.addWidget(self.message_label, 1)
        family_row = QHBoxLayout()
        family_label = QLabel(field_info("model.family").metadata.get("label", "Model family"), self)
        self.family_editor = make_editor(binding, "model.family", self)
        family_label.setBuddy(self.family_editor)
        family_label.setToolTip(self.family_editor.toolTip())
        family_row.addWidget(family_label)
        family_row.addWidget(self.family_editor)
        family_row.addStretch(1)
        outer.addLayout(family_row)

        binding.changed.connect(self._on_changed)
        binding.replaced.connect(self._pull)
        self._fill_recent()
        self._show_detection()

    # ------------------------------------------------------------------ public API
    def detection(self) -> ModelDetection:
        """What the current ``model.base`` is."""
        return self._detection

    def choose(self, model: str) -> ModelDetection:
        """The user chose ``model`` (path, hub id or "demo"): store it, detect it, set the family, remember it."""
        model = model.strip()
        if model != "demo" and model:
            p = paths.expand(model)
            if p.name == "model_index.json" and p.is_file():
                model = str(p.parent)
        self._split_note = ""
        self.binding.set("model.base", model)
        self._set_text(model)
        self._drop_split_parts()
        detection = self._detect(model)
        if detection.ok and detection.family:
            self.binding.set("model.family", detection.family)
        elif detection.kind == "hub_id" and detection.ok:
            self.binding.set("model.family", "auto")
        if detection.ok and detection.kind != "demo":
            self.remember(model)
        return detection

    def choose_split(self, files: list[str]) -> SplitChoice:
        """The user chose several files together: a split install (the transformer, its text encoders, the VAE).
        Each is put where its tensors say it belongs; a set without a transformer changes nothing and says why."""
        choice = arrange(files)
        if choice.family is None:
            self._split_note = " ".join(choice.problems)
            self._show_detection()
            return choice
        self.binding.set("model.base", choice.base)
        self._set_text(choice.base)
        self.binding.set("model.text_encoders", list(choice.text_encoders))
        if choice.vae:
            self.binding.set("model.vae", choice.vae)
            self._split_vae = choice.vae
        detection = self._detect(choice.base)
        if detection.ok and detection.family:
            self.binding.set("model.family", detection.family)
        self._show_detection()
        if detection.ok:
            self.remember(choice.base)
        return choice

    def _drop_split_parts(self) -> None:
        """A model that holds its own text encoders (a folder, a one-file SD checkpoint, a hub id, the demo) takes
        no split parts: the text-encoder files go, and the VAE file a split choice set."""
        base = str(self.binding.get("model.base"))
        split_file = base.lower().endswith(".safetensors") and facts(resolve_family("auto", base)).check_parts is not None
        if split_file:
            return
        if self.binding.get("model.text_encoders"):
            self.binding.set("model.text_encoders", [])
        if self._split_vae and str(self.binding.get("model.vae")) == self._split_vae:
            self.binding.set("model.vae", "")
        self._split_vae = ""

    def browse_folder(self) -> None:
        start = self._start_dir()
        folder = QFileDialog.getExistingDirectory(self, "Choose a diffusers model folder", start)
        if folder:
            self.choose(folder)

    def browse_file(self) -> None:
        chosen, _filter = QFileDialog.getOpenFileNames(self, "Choose a checkpoint (or a split install's files)",
                                                       self._start_dir(), FILE_FILTER)
        if len(chosen) > 1:
            self.choose_split(list(chosen))
        elif chosen:
            self.choose(chosen[0])

    def recent_models(self) -> list[str]:
        value = self.settings.value(RECENT_KEY, [])
        if isinstance(value, str):  # QSettings returns a lone string for a one-item list
            value = [value]
        return [str(v) for v in (value or []) if str(v).strip()][:MAX_RECENT]

    def remember(self, model: str) -> None:
        """Put ``model`` first in the recent list (at most :data:`MAX_RECENT`)."""
        items = [model] + [m for m in self.recent_models() if m != model]
        self.settings.setValue(RECENT_KEY, items[:MAX_RECENT])
        self.settings.sync()
        self._fill_recent()

    # ------------------------------------------------------------------ internals
    def _start_dir(self) -> str:
        current = paths.expand(str(self.binding.get("model.base")))
        if current.exists():
            return str(current if current.is_dir() else current.parent)
        return start_dirs.start_dir("models")

    def _set_text(self, text: str) -> None:
        if self.edit.text() != text:
            self.edit.setText(text)

    def _on_editing_finished(self) -> None:
        text = self.edit.text().strip()
        if text != self.binding.get("model.base"):
            self.choose(text)

    def _on_changed(self, path: str) -> None:
        if path == "model.base":
            self._pull()
        elif path in ("model.family", "model.text_encoders"):
            self._show_detection()

    def _pull(self) -> None:
        value = str(self.binding.get("model.base"))
        self._set_text(value)
        if value != self._detection.path or self._detection.kind == "missing":
            self._detect(value)

    def _detect(self, model: str) -> ModelDetection:
        self._detection = detect_model(model)
        if not self._detection.path:
            self._detection = dataclasses.replace(self._detection, path=model)
        self._network_note = ""
        self._show_detection()
        if self._detection.kind == "hub_id" and self._detection.ok:
            self._check_network(model)
        self.detected.emit(self._detection)
        return self._detection

    def _check_network(self, model: str) -> None:
        """A hub id is only usable online (or already downloaded): say so when the hub cannot be reached."""
        import os

        from guitrainer.core.dataset.captioner_catalog import hub_reachable

        if os.environ.get("HF_HUB_OFFLINE", "0") not in ("0", "", "false", "False"):
            self._show_network(model, False)
            return

        call_in_thread(
            hub_reachable, lambda ok: self._show_network(model, bool(ok)), lambda *_: None, name="HubCheck", parent=self
        )

    def _show_network(self, model: str, reachable: bool) -> None:
        if self._detection.kind != "hub_id" or self._detection.path != model:
            return  # the user chose another model meanwhile
        self._network_note = (
            "" if reachable else
            "No network now: unless it was downloaded before, training cannot fetch it. "
            "Connect, or choose a model file or folder on this computer."
        )  # fmt: skip
        self._show_detection()

    def family_mismatch(self) -> str:
        """A message when ``model.family`` contradicts what was detected ("" when they agree)."""
        d = self._detection
        configured = str(self.binding.get("model.family"))
        if not d.ok or not d.family or configured in ("auto", d.family):
            return ""
        labels = field_info("model.family").metadata.get("choice_labels") or {}
        return (
            f"Model family says {labels.get(configured, configured)}, but this looks like {d.family_label}: "
            f"set it to {d.family_label} or Detect."
        )

    def _show_detection(self) -> None:
        d = self._detection
        mismatch = self.family_mismatch()
        split = self._split_part()
        level = "warning" if mismatch and d.level == "info" else "info" if split else d.level
        if level == "info" and (self._network_note or self._split_refused()):
            level = "warning"  # no network; or the files chosen together were not a model (this model stays)
        # a model on this computer shows a check; a hub id (downloaded on first use) shows an "i", not a check
        icon = level_icon(self, ("info" if d.kind == "hub_id" else "ok") if level == "info" else level)
        self.status_icon.setPixmap(icon.pixmap(18, 18))
        badge = d.family_label if d.family else ("not found" if d.kind == "missing" else "unsupported" if not d.ok else "family ?")
        self.family_badge.setText(badge)
        color = {"error": "220, 53, 69", "warning": "230, 145, 0", "info": "30, 140, 70"}[level]
        self.family_badge.setStyleSheet(
            f"background: rgba({color}, 0.15); border: 1px solid rgba({color}, 0.6); border-radius: 4px;"
            " padding: 1px 6px; font-weight: 600;"
        )
        # a family mismatch is the news: it replaces the detection's description (kept in the tooltip)
        said = f"{d.family_label}: a split install's transformer (text encoders and VAE below)." \
            if split else d.message
        self.message_label.setText(f"{mismatch or said} {self._network_note} {self._split_note}".strip())
        self.message_label.setToolTip(d.message if mismatch or split else "")
        self.setProperty("detection_level", level)

    def _split_refused(self) -> bool:
        return bool(self._split_note)

    def _split_part(self) -> bool:
        """The base model is the transformer file of a split install whose other files are chosen: the row under
        the picker names them and what the set lacks, so the picker does not ask for them too."""
        d = self._detection
        return bool(self.binding.get("model.text_encoders")) and d.ok and d.kind == "single_file" \
            and d.family is not None and facts(d.family).check_parts is not None

    def _fill_recent(self) -> None:
        self.recent_menu.clear()
        items = self.recent_models()
        for model in items:
            action = QAction(model, self.recent_menu)
            action.triggered.connect(lambda _checked=False, m=model: self.choose(m))
            self.recent_menu.addAction(action)
        if not items:
            none = self.recent_menu.addAction("No recent models")
            none.setEnabled(False)
        self.recent_button.setEnabled(True)
