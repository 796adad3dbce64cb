"""The main window: page list, preset picker, File menu, status bar.

Imports no torch: the window must appear fast. Pages that need torch load it in the
background when their first job runs.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import QByteArray, QSettings, QSize, Qt, QTimer, Signal
from PySide6.QtGui import (
    QAction,
    QCloseEvent,
    QDragEnterEvent,
    QDropEvent,
    QGuiApplication,
    QIcon,
    QKeySequence,
    QSessionManager,
)
from PySide6.QtWidgets import (
    QApplication,
    QComboBox,
    QHBoxLayout,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QMainWindow,
    QMenu,
    QStackedWidget,
    QStyle,
    QToolBar,
    QVBoxLayout,
    QWidget,
)

from guitrainer import APP_NAME, __version__
from guitrainer.base import paths
from guitrainer.config import ConfigError, TrainingConfig
from guitrainer.config.presets import DEFAULT_PRESET, PresetStore
from guitrainer.core.dataset.captions import rescue_captions
from guitrainer.core.dataset.report import plural
from guitrainer.ui import start_dirs
from guitrainer.ui.binding import ConfigBinding
from guitrainer.ui.widgets import messages, wheel_guard
from guitrainer.ui.widgets.drops import local_paths
from guitrainer.ui.widgets.messages import Button, MessageBox
from guitrainer.ui.window.preset_files import PresetFileActions
from guitrainer.ui.window.workspace import (
    DATASET_KEYS,
    Workspace,
    ask_save,
    first_start_maximized,
    first_window_size,
    keep_dataset,
    load_workspace,
    restored_size,
    save_workspace,
)

if TYPE_CHECKING:
    from guitrainer.ui.dataset.caption_editor import HeldCaption
    from guitrainer.ui.window.guide_dialog import GuideDialog

log = logging.getLogger(__name__)

STATUS_TIMEOUT_MS = 6000  # how long a page's status message stays in the window's status bar


class MainWindow(QMainWindow):
    """Pages on the left, the current page on the right, presets in the tool bar."""

    preset_loaded = Signal(str)

    def __init__(self, store: PresetStore | None = None, settings: QSettings | None = None):
        super().__init__()
        wheel_guard.install()  # first: every widget made from now on is guarded as it is first shown
        self.settings = settings or QSettings()
        self.store = store or PresetStore()
        self.binding = ConfigBinding(TrainingConfig(), self)
        self.current_preset: str = ""
        self._dirty = False
        self._quit_answered = False  # the unsaved-settings question on quit was answered
        self.preset_box: MessageBox | None = None  # the open "save before another preset?" question
        self.quit_box: MessageBox | None = None  # the open "save before quitting?" question
        self.guide_dialog: GuideDialog | None = None  # Help ▸ Guide, once opened
        self.captions_box: MessageBox | None = None  # the open "captions not saved: keep, discard?" question
        self._captions_answered = False  # that question was answered: the close goes on
        self._close_after_question = False  # a caption question stopped a close: close again once it is answered
        self.setWindowTitle(APP_NAME)
        icon_path = paths.resources_dir() / "icons" / "guitrainer.png"
        if icon_path.exists():
            self.setWindowIcon(QIcon(str(icon_path)))
        self.setAcceptDrops(True)
        self._build_pages()
        self._build_toolbar()
        self.preset_files = PresetFileActions(
            self,
            self.store,
            self.binding,
            self.settings,
            QMenu("Open &recent", self),
            current_preset=lambda: self.current_preset,
            show_preset=self._show_preset,
            load_preset=self.load_preset,
            error=self._error,
        )
        self._build_menus()
        self.statusBar().showMessage("Ready")
        self.binding.changed.connect(self._on_config_changed)
        self.dataset_page.editor.question_answered.connect(self._on_caption_question_answered)
        app = QGuiApplication.instance()
        if isinstance(app, QGuiApplication):  # the ways out that close no window: typed captions are saved there too
            app.aboutToQuit.connect(self._on_about_to_quit)
            app.commitDataRequest.connect(self.commit_data)
        self._restore_state()
        for err in self.store.errors:
            self.statusBar().showMessage(f"Skipped a broken preset: {err}", 10000)

    # ------------------------------------------------------------------ layout
    def _build_pages(self) -> None:
        from guitrainer.ui.dataset.page import DatasetPage
        from guitrainer.ui.device_service import DeviceService
        from guitrainer.ui.model.page import ModelPage
        from guitrainer.ui.output.page import OutputPage
        from guitrainer.ui.runs.page import RunsPage
        from guitrainer.ui.training.numerics_tab import attach_numerics
        from guitrainer.ui.training.page import TrainingPage

        self.nav = QListWidget()
        self.nav.setObjectName("page_nav")
        self.nav.setIconSize(QSize(20, 20))
        self.nav.setFixedWidth(170)
        self.nav.setSpacing(2)
        self.stack = QStackedWidget()
        self.devices = DeviceService(parent=self)  # the one device probe every page listens to
        self.dataset_page = DatasetPage(self.binding)
        self.model_page = ModelPage(self.binding, device_service=self.devices)
        self.training_page = TrainingPage(self.binding, device_service=self.devices)
        self.output_page = OutputPage(self.binding)
        self.runs_page = RunsPage(self.binding)
        style = self.style()
        icons = [
            QStyle.StandardPixmap.SP_DirIcon,
            QStyle.StandardPixmap.SP_ComputerIcon,
            QStyle.StandardPixmap.SP_MediaPlay,
            QStyle.StandardPixmap.SP_DialogSaveButton,
            QStyle.StandardPixmap.SP_FileDialogDetailedView,
        ]
        self.pages = [self.dataset_page, self.model_page, self.training_page, self.output_page, self.runs_page]
        for page, icon in zip(self.pages, icons, strict=True):
            self.stack.addWidget(page)
            QListWidgetItem(style.standardIcon(icon), page.title, self.nav)
        self.nav.currentRowChanged.connect(self.stack.setCurrentIndex)
        # The VRAM meter follows the device the precision picker shows (probed, or chosen among GPUs).
        self.model_page.device_detected.connect(self._on_device_detected)
        # An fp16 overflow found while saving shows up on the Output page with its "save as bf16" fix.
        self.training_page.warning_raised.connect(self.output_page.note_warning)
        self.training_page.worker_started.connect(self.output_page.begin_run)  # the last run's warning goes
        # the Numerics tab (built with the first run) and each saved LoRA's save report on the Output page
        self.numerics = attach_numerics(self.training_page, self.output_page.show_save_report)  # () -> the chart
        # The Output page names the file the last run actually wrote (name_3.safetensors, say).
        self.training_page.run_finished.connect(self.output_page.show_last_run)
        # Error-level precision advice disables Train, with the reason in its tooltip.
        self.model_page.errors_changed.connect(
            lambda _has: self.training_page.set_blocking_errors(self.model_page.error_text())
        )
        self.model_page.precision_picker.device_changed.connect(self._on_device_detected)
        # "Train is off: see Model & Precision" on the Training page goes there when clicked
        self.training_page.controls.fix_requested.connect(lambda: self.nav.setCurrentRow(self.pages.index(self.model_page)))
        # The dataset page's own status line (import report, tag edits) shows in the window's status bar too.
        self.dataset_page.status_changed.connect(lambda text: self.statusBar().showMessage(text, STATUS_TIMEOUT_MS))
        self._wire_runs_page()
        self.nav.setCurrentRow(0)

        right = QWidget()
        rl = QVBoxLayout(right)
        rl.setContentsMargins(0, 0, 0, 0)
        rl.setSpacing(0)
        rl.addWidget(self.stack, 1)
        self.vram_meter = self._make_vram_meter()
        if self.vram_meter is not None:
            rl.addWidget(self.vram_meter)

        central = QWidget()
        cl = QHBoxLayout(central)
        cl.setContentsMargins(0, 0, 0, 0)
        cl.setSpacing(0)
        cl.addWidget(self.nav)
        cl.addWidget(right, 1)
        self.setCentralWidget(central)

    def _wire_runs_page(self) -> None:
        """Runs page: resume a stored run on the Training page; its list follows the runs that end;
        at start, runs a dead process left running are marked interrupted and offered for resuming."""
        self.runs_page.resume_requested.connect(self.resume_run)
        self.runs_page.status_changed.connect(lambda text: self.statusBar().showMessage(text, STATUS_TIMEOUT_MS))
        self.training_page.run_finished.connect(lambda _s: self.runs_page.refresh())
        self.training_page.run_failed.connect(lambda _m, _d: self.runs_page.refresh())
        QTimer.singleShot(0, self.runs_page.check_interrupted)

    def resume_run(self, config: TrainingConfig, state_path: str) -> None:
        """Make a stored run's settings current and continue it from ``state_path`` on the Training page."""
        self.binding.replace(config)
        self.current_preset = ""
        self._fill_preset_combo()
        self.nav.setCurrentRow(self.pages.index(self.training_page))
        self.training_page.start(resume_from=state_path)

    def _on_device_detected(self, device: object) -> None:
        """The probe finished: the VRAM meter measures against the selected device."""
        if self.vram_meter is not None:
            self.vram_meter.set_device(getattr(device, "total_memory", None), getattr(device, "name", ""), info=device)

    def _make_vram_meter(self) -> QWidget | None:
        from guitrainer.ui.model.vram_meter import VramMeter

        meter = VramMeter(self.binding)
        # "Check precisely" failing: the message on the meter, the details in the Training page's Log
        meter.measurement_failed.connect(
            lambda message, details: self.training_page.log_panel.append(
                f"Check precisely failed: {message}\n{details}".rstrip(), logging.ERROR
            )
        )
        self.preset_loaded.connect(meter.set_target)
        self.devices.probe_failed.connect(meter.device_unknown)  # the meter says why the GPU parts stay out
        return meter

    def _build_toolbar(self) -> None:
        bar = QToolBar("Preset")
        bar.setObjectName("preset_toolbar")
        bar.setMovable(False)
        self.addToolBar(bar)
        box = QWidget()
        lay = QHBoxLayout(box)
        lay.setContentsMargins(6, 2, 6, 2)
        lay.addWidget(QLabel("Preset:"))
        self.preset_combo = QComboBox()
        self.preset_combo.setObjectName("preset_combo")
        self.preset_combo.setMinimumContentsLength(34)
        self.preset_combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.preset_combo.setToolTip("Load a preset: it fills every setting. Your own presets are listed after the shipped ones.")
        lay.addWidget(self.preset_combo)
        self.preset_state = QLabel()
        self.preset_state.setObjectName("preset_state")
        lay.addWidget(self.preset_state)
        bar.addWidget(box)
        self._fill_preset_combo()
        self.preset_combo.activated.connect(lambda i: self.choose_preset(self.preset_combo.itemData(i)))

    def _fill_preset_combo(self) -> None:
        self.preset_combo.blockSignals(True)
        self.preset_combo.clear()
        for name in self.store.names():
            preset = self.store.presets[name]
            self.preset_combo.addItem(name, name)
            self.preset_combo.setItemData(self.preset_combo.count() - 1, preset.description, Qt.ItemDataRole.ToolTipRole)
        idx = self.preset_combo.findData(self.current_preset)
        self.preset_combo.setCurrentIndex(idx)
        self.preset_combo.blockSignals(False)

    def _build_menus(self) -> None:
        files = self.preset_files
        m = self.menuBar().addMenu("&File")
        self.act_add_folder = m.addAction("Add image &folder…", self._add_folder)
        self.act_add_folder.setShortcut(QKeySequence("Ctrl+Shift+O"))
        m.addSeparator()
        self.act_open = m.addAction("&Open preset or config…", files.open_file_dialog)
        self.act_open.setShortcut(QKeySequence.StandardKey.Open)
        m.addMenu(files.recent_menu)
        self.act_save = m.addAction("&Save preset", files.save_preset)
        self.act_save.setShortcut(QKeySequence.StandardKey.Save)
        self.act_save_as = m.addAction("Save preset &as…", files.save_preset_as)
        self.act_save_as.setShortcut(QKeySequence.StandardKey.SaveAs)
        m.addAction("&Rename preset…", files.rename_preset)
        m.addAction("&Delete preset…", files.delete_preset)
        m.addAction("&Import preset file…", files.import_preset_dialog)
        m.addAction("E&xport config as TOML…", files.export_config_dialog)
        m.addSeparator()
        quit_act = QAction("&Quit", self)
        # Ctrl+Q where the platform names no Quit key (Windows, a bare X11 session, offscreen): it is what the
        # File menu says and what people press
        quit_act.setShortcuts(QKeySequence.keyBindings(QKeySequence.StandardKey.Quit) or [QKeySequence("Ctrl+Q")])
        quit_act.triggered.connect(self.close)
        m.addAction(quit_act)
        h = self.menuBar().addMenu("&Help")
        h.addAction("&Guide (README)", self.open_guide)
        h.addAction("&Environment…", self.show_environment)
        h.addAction("&About guitrainer", self._about)

    # ------------------------------------------------------------------ state
    def _restore_state(self) -> None:
        geom = self.settings.value("window/geometry")
        if isinstance(geom, QByteArray | bytes) and geom:
            self._restore_geometry(QByteArray(geom))
        else:
            self.resize(first_window_size(self.screen()))
            if first_start_maximized(self.screen()):
                self.setWindowState(self.windowState() | Qt.WindowState.WindowMaximized)
        last = str(self.settings.value("last_preset", DEFAULT_PRESET) or DEFAULT_PRESET)
        if last not in self.store.presets:
            last = DEFAULT_PRESET if DEFAULT_PRESET in self.store.presets else (self.store.names() or [""])[0]
        if last:
            self.load_preset(last)
        self._restore_workspace()

    def _restore_geometry(self, geom: QByteArray) -> None:
        """Last session's window, sensible on this screen: never smaller than the pages need (a size saved
        on another screen opened 844×510), inside the screen, and maximized again if it was."""
        self.restoreGeometry(geom)
        screen = self.screen()
        avail = screen.availableGeometry() if screen is not None else None
        size = restored_size(self.normalGeometry().size() if self.isMaximized() else self.size(), avail)
        if size != self.size() or (avail is not None and not avail.contains(self.frameGeometry())):
            state = self.windowState()
            self.setWindowState(Qt.WindowState.WindowNoState)
            self.resize(size)
            if avail is not None:
                self.move(avail.center() - self.rect().center())
            self.setWindowState(state)
        if str(self.settings.value("window/maximized", "false")).lower() == "true":
            self.setWindowState(self.windowState() | Qt.WindowState.WindowMaximized)

    def _restore_workspace(self) -> None:
        """The settings and dataset of the last session (saved on quit) come back."""
        ws = load_workspace(self.settings)
        if ws is None:
            return
        self.binding.replace(ws.config)
        if ws.preset in self.store.presets or not ws.preset:
            self.current_preset = ws.preset
        self._dirty = ws.modified
        self._fill_preset_combo()
        self._update_title()
        folders = len(ws.config.dataset.folders)
        self.statusBar().showMessage(
            "Restored your last workspace" + (f" ({folders} image folder{'s' if folders != 1 else ''})" if folders else ""),
            STATUS_TIMEOUT_MS,
        )

    def _save_workspace(self) -> None:
        save_workspace(self.settings, Workspace(self.binding.config.copy(), self.current_preset, self._dirty))

    def _on_config_changed(self, path: str) -> None:
        if path.startswith("dataset.") and path in DATASET_KEYS:
            return  # the images are the workspace's, not the preset's: kept when the preset changes
        self._dirty = True
        self._update_title()

    def _show_preset(self, name: str, saved: bool) -> None:
        """``name`` ("" for none) is the current preset: the picker and the title follow. ``saved``: nothing is
        unsaved any more (the settings were just saved in it, or read from a file); else the mark stays."""
        self.current_preset = name
        if saved:
            self._dirty = False
        self._fill_preset_combo()
        self._update_title()

    def _update_title(self) -> None:
        mark = " •" if self._dirty else ""
        name = self.current_preset or "untitled"
        self.setWindowTitle(f"{name}{mark} — {APP_NAME}")
        self.preset_state.setText("modified" if self._dirty else "")

    # ------------------------------------------------------------------ presets
    def choose_preset(self, name: str) -> bool:
        """The user picked a preset: with unsaved setting edits, ask first (save / discard / cancel).

        Returns True when the preset was loaded now; False when it was not, or waits for the answer.
        """
        if not name or name == self.current_preset and not self._dirty:
            return False
        if not self._dirty:
            return self.load_preset(name)
        self._fill_preset_combo()  # shows the current preset until the question is answered

        def answered(answer: str) -> None:
            self.preset_box = None
            if answer == "save":
                self.preset_files.save_preset()
                if self._dirty:  # the name dialog was cancelled: nothing is thrown away
                    return
            if answer in ("save", "discard"):
                self.load_preset(name)

        current = self.current_preset or "untitled"
        self.preset_box = ask_save(
            self,
            "Load another preset?",
            f"You changed settings of “{current}” that are not saved in a preset.",
            f"Loading “{name}” replaces them. Your images stay in the dataset.",
            "Discard changes",
            "preset_change_box",
            answered,
        )
        return False

    def load_preset(self, name: str) -> bool:
        """Load a preset's settings; the dataset (image folders, class images) stays as it is."""
        try:
            cfg = self.store.get(name).config()
        except (KeyError, ConfigError) as e:
            self._error("Cannot load preset", str(e))
            return False
        self.binding.replace(keep_dataset(cfg, self.binding.config))
        self.settings.setValue("last_preset", name)
        self._show_preset(name, True)
        self.statusBar().showMessage(f"Loaded preset “{name}”", 4000)
        self.preset_loaded.emit(name)
        return True

    def _add_folder(self) -> None:
        fn = getattr(self.dataset_page, "add_folder_dialog", None)
        if fn is not None:
            self.nav.setCurrentRow(0)
            fn()
            return
        folder = start_dirs.choose_folder(self, "Add image folder", "images")
        if folder:
            self.add_paths([folder])

    def add_paths(self, paths_: list[str]) -> None:
        """Dropped or opened paths: presets open, everything else goes to the dataset page."""
        tomls = [p for p in paths_ if p.lower().endswith(".toml")]
        rest = [p for p in paths_ if not p.lower().endswith(".toml")]
        for p in tomls:
            self.preset_files.open_file(p)
        if not rest:
            return
        self.nav.setCurrentRow(0)
        fn = getattr(self.dataset_page, "add_paths", None)
        if fn is not None:
            fn(rest)
            return
        from guitrainer.config import DatasetFolder

        folders = list(self.binding.get("dataset.folders"))
        known = {f.path for f in folders}
        folders += [DatasetFolder.from_value(p) for p in rest if Path(p).is_dir() and p not in known]
        self.binding.set("dataset.folders", folders)

    def dragEnterEvent(self, event: QDragEnterEvent) -> None:  # noqa: N802
        if local_paths(event):
            event.acceptProposedAction()
        else:
            event.ignore()

    def dropEvent(self, event: QDropEvent) -> None:  # noqa: N802
        local = local_paths(event)
        if local:
            event.acceptProposedAction()
            QTimer.singleShot(0, lambda: self.add_paths(local))

    # ------------------------------------------------------------------ misc
    def _error(self, title: str, text: str) -> None:
        log.warning("%s: %s", title, text)
        messages.warning(self, title, text, name="error_box")

    def show_environment(self, first_run: bool = False):  # noqa: ANN201
        """Help ▸ Environment: the machine's facts, each problem with its fix (probe in the background)."""
        from guitrainer.ui.window.environment_dialog import EnvironmentDialog, default_folders

        dlg = EnvironmentDialog(
            default_folders(self.binding.config.output.folder), self, first_run=first_run, device_service=self.devices
        )
        dlg.setObjectName("environment_dialog")
        dlg.open()
        return dlg

    def guide_path(self) -> Path | None:
        """The user guide shipped with the app (the README), if this install has it."""
        for root in (paths.install_root(), paths.resources_dir().parent):
            if (root / "README.md").is_file():
                return root / "README.md"
        return None

    def open_guide(self) -> GuideDialog | None:
        """Help ▸ Guide: the README (how to use the app, presets, headless runs), rendered in a window of the app's
        own: no program for ``.md`` files is needed. None when this install has no guide (said in a message)."""
        from guitrainer.ui.window.guide_dialog import GuideDialog

        guide = self.guide_path()
        if guide is None:
            self._error("No guide here", "This install has no README.md; see the project page of guitrainer.")
            return None
        if self.guide_dialog is None or self.guide_dialog.path != guide:
            self.guide_dialog = GuideDialog(guide, self)
            problem = self.guide_dialog.load()
            if problem:
                self._error("The guide cannot be shown", problem)
        self.guide_dialog.show()
        self.guide_dialog.raise_()
        self.guide_dialog.activateWindow()
        return self.guide_dialog

    def maybe_first_run(self) -> None:
        """Show the environment check once, on the first start."""
        if not self.settings.value("first_run_done", False, type=bool):
            self.settings.setValue("first_run_done", True)
            self.show_environment(first_run=True)

    def _about(self) -> None:
        messages.about(
            self,
            f"About {APP_NAME}",
            f"<b>{APP_NAME}</b> {__version__}<br>Train a Stable Diffusion LoRA on your own GPU, "
            "with a live VRAM estimate and mixed precision done right.",
        )

    def closeEvent(self, event: QCloseEvent) -> None:  # noqa: N802
        self._finish_typing()
        if not self._captions_answered and not self._captions_saved_for_close():
            event.ignore()
            return
        if self._dirty and not self._quit_answered:
            event.ignore()
            self._ask_quit()
            return
        guard = getattr(self.training_page, "confirm_close", None)
        if guard is not None and not guard():
            event.ignore()
            self._quit_answered = self._captions_answered = False
            return
        self.settings.setValue("window/geometry", self.saveGeometry())
        self.settings.setValue("window/maximized", self.isMaximized())
        self._save_workspace()
        self.devices.wait(10_000)  # a probe still importing torch: let it end before the app does
        super().closeEvent(event)

    # ------------------------------------------------------------------ typed captions on every way out
    def _finish_typing(self) -> None:
        """A setting typed into a field counts once the field is left (Enter, Tab, a click elsewhere): every way
        out leaves it first, so a value typed a moment before Ctrl+Q is in the settings — and asked about, and
        kept in the workspace — rather than dropped with the window."""
        focused = QApplication.focusWidget()
        if focused is not None and (focused is self or self.isAncestorOf(focused)):
            focused.clearFocus()

    def _captions_saved_for_close(self) -> bool:
        """Closing (Ctrl+Q, the window's close button): every typed caption is written now, not 500 ms later.

        False when the window must stay: a caption question is open (the close goes on once it is answered), or a
        caption could not be written (then the user is asked what to do with it)."""
        editor = self.dataset_page.editor
        box = editor.question_open()
        if box is None:
            left = editor.save_all()
            box = editor.question_open()
            if box is None:
                if left:
                    self._ask_unsaved_captions(left)
                return not left
        self._close_after_question = True
        box.raise_()
        box.activateWindow()
        return False

    def _on_caption_question_answered(self, answer: str) -> None:
        """A caption question asked while closing was answered: close again (which saves, or asks), unless the
        user wants to look at both versions first."""
        if self._close_after_question:
            self._close_after_question = False
            if answer != "both":
                QTimer.singleShot(0, self.close)

    def _ask_unsaved_captions(self, left: list[HeldCaption]) -> None:
        """Typed captions could not be written (a read-only file, a full disk): keep them in a file, discard
        them, or stay (non-modal; the window stays open until the answer)."""
        if self.captions_box is not None and self.captions_box.isVisible():
            return

        def answered(answer: str) -> None:
            self.captions_box = None
            if answer == "rescue":
                if self._rescue_captions(left) is None:
                    return
            elif answer == "discard":
                for held in left:
                    self.dataset_page.editor.discard(held.path)
            else:
                return
            self._captions_answered = True
            self.close()

        names = ", ".join(h.item.name for h in left[:5]) + (f" and {len(left) - 5} more" if len(left) > 5 else "")
        why = next((h.problem for h in left if h.problem), "")
        self.captions_box = messages.ask(
            self,
            "Captions not saved",
            f"{plural(len(left), 'caption')} you typed could not be saved beside {'its image' if len(left) == 1 else 'their images'}"
            f" ({names}){': ' + why if why else ''}.",
            (
                Button("accept", "Keep them in a file and quit", "rescue", name="captions_rescue"),
                Button("destructive", "Discard them and quit", "discard", name="captions_discard"),
                Button("cancel"),
            ),
            answered,
            info="Keep them in a file: the texts are written to a file in guitrainer's data folder (named in the log "
            "and the status bar), to copy back by hand. Cancel keeps the window open, with the texts in the caption "
            "box, to save them once the file can be written.",
            default="rescue",
            name="captions_unsaved_box",
        )

    def _rescue_captions(self, left: list[HeldCaption]) -> Path | None:
        """Write typed captions that cannot go beside their images into one file in the user data folder."""
        try:
            target = rescue_captions([(h.path, h.text) for h in left], paths.user_data_dir())
        except OSError as e:
            self._error("The captions could not be kept", f"Not even the rescue file could be written: {e}")
            return None
        log.warning("typed captions that could not be saved are kept in %s", target)
        self.statusBar().showMessage(f"Unsaved captions kept in {target}", STATUS_TIMEOUT_MS)
        return target

    def _on_about_to_quit(self) -> None:
        """The app ends without a close (Ctrl+C in the terminal, app.quit()): save what was typed; what cannot be
        written goes to a rescue file, as nobody can be asked now."""
        self._finish_typing()
        left = self.dataset_page.editor.save_all(ask=False)
        if left:
            self._rescue_captions(left)

    def commit_data(self, manager: QSessionManager) -> None:
        """The desktop session ends (logout, shutdown; ``QGuiApplication.commitDataRequest``): the window may go
        without a close, so typed captions and the workspace are saved now. Captions that cannot be written are
        asked about where the session allows it (cancelling the logout keeps them on screen), else rescued."""
        self._finish_typing()
        left = self.dataset_page.editor.save_all(ask=False)
        self._save_workspace()
        if not left:
            return
        if manager.allowsInteraction():
            answer = messages.question(
                self,
                "Captions not saved",
                f"{plural(len(left), 'caption')} you typed could not be saved beside {'its image' if len(left) == 1 else 'their images'}.",
                (Button("accept", "Keep them in a file", "rescue"), Button("cancel", "Cancel logging out", "cancel")),
                info="Keep them in a file in guitrainer's data folder, to copy back by hand; or cancel the logout and "
                "save them once the files can be written.",
                default="rescue",
                name="captions_logout_box",
            )
            manager.release()
            if answer != "rescue":
                manager.cancel()
                return
        self._rescue_captions(left)

    def receive_files(self, paths_: list[str]) -> None:
        """Files handed over by a second launch (or the desktop): the window comes up and opens them. Typed
        captions are saved first: an opened preset or config may replace the dataset."""
        self.dataset_page.editor.save_all()
        if self.isMinimized():
            self.showNormal()
        self.show()
        self.raise_()
        self.activateWindow()
        if paths_:
            self.add_paths(paths_)

    def _ask_quit(self) -> None:
        """Unsaved setting edits on quit: offer to save them as a preset (non-modal; Cancel keeps the window)."""
        if self.quit_box is not None and self.quit_box.isVisible():
            return

        def answered(answer: str) -> None:
            self.quit_box = None
            if answer == "save":
                self.preset_files.save_preset()
                if self._dirty:
                    self._captions_answered = False
                    return
            if answer in ("save", "discard"):
                self._quit_answered = True
                self.close()
            else:  # the window stays: captions typed from now on are asked about at the next close
                self._captions_answered = False

        self.quit_box = ask_save(
            self,
            "Quit guitrainer?",
            f"Your settings of “{self.current_preset or 'untitled'}” are not saved in a preset.",
            "They and your dataset come back when you start guitrainer again; save them as a preset to keep "
            "them for later too.",
            "Quit without saving",
            "quit_box",
            answered,
        )
