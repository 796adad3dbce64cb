"""Dialogs of the Runs page: deleting runs (files only when asked, listed first)."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtWidgets import (
    QCheckBox,
    QDialog,
    QDialogButtonBox,
    QLabel,
    QListWidget,
    QVBoxLayout,
    QWidget,
)


class DeleteRunsDialog(QDialog):
    """Forget runs; their files on disk are listed and deleted only when the box is ticked."""

    def __init__(self, names: list[str], files: list[Path], parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("delete_runs_dialog")
        self.setWindowTitle("Delete runs" if len(names) > 1 else "Delete run")
        self.files = list(files)
        lay = QVBoxLayout(self)
        shown = ", ".join(f"“{n}”" for n in names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
        head = QLabel(f"Remove {shown} from the run history?")
        head.setWordWrap(True)
        lay.addWidget(head)
        self.file_list = QListWidget()
        self.file_list.setObjectName("delete_file_list")
        self.files_check = QCheckBox()
        self.files_check.setObjectName("delete_files_check")
        if self.files:
            lay.addWidget(QLabel(f"{'These runs' if len(names) > 1 else 'This run'} wrote "
                                 f"{'this' if len(self.files) == 1 else 'these files and folders'}, still on disk "
                                 "(files another run wrote over are that run's, and stay):"))
            for f in self.files:
                self.file_list.addItem(f"{f}{'/' if f.is_dir() else ''}")
            lay.addWidget(self.file_list, 1)
            what = "this file or folder" if len(self.files) == 1 else f"these {len(self.files)} files and folders"
            self.files_check.setText(f"Also delete {what} from disk")
            lay.addWidget(self.files_check)
        else:
            lay.addWidget(QLabel("None of its files are on disk any more."))
            self.files_check.hide()
        note = QLabel("Without the tick, the files stay where they are; only the record of the run goes.")
        note.setWordWrap(True)
        note.setStyleSheet("color: palette(placeholder-text);")
        lay.addWidget(note)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Cancel)
        self.delete_button = buttons.addButton("Delete", QDialogButtonBox.ButtonRole.AcceptRole)
        self.delete_button.setObjectName("confirm_delete")
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        lay.addWidget(buttons)
        self.resize(620, 360 if self.files else 160)

    @property
    def delete_files(self) -> bool:
        return bool(self.files) and self.files_check.isChecked()
