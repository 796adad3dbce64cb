"""Another X client to drag files from, as a file manager would: ``python drag_source.py X Y PATH...``.

Shows a small window at (X, Y); a mouse press on it starts a Qt drag (XDND) of PATHs as file URLs.
Prints ``READY x y w h`` (its global geometry) once it is on screen, then ``DROPPED <action>`` when the
drag ends, and exits.
"""

from __future__ import annotations

import sys

from PySide6.QtCore import QMimeData, Qt, QTimer, QUrl
from PySide6.QtGui import QDrag
from PySide6.QtWidgets import QApplication, QLabel


class Source(QLabel):
    def __init__(self, paths: list[str]) -> None:
        super().__init__("Drag these files:\n" + "\n".join(p.rsplit("/", 1)[-1] for p in paths))
        self.paths = paths
        self.setWindowTitle("drag source")
        self.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.resize(260, 160)

    def mousePressEvent(self, event) -> None:  # noqa: ANN001, N802
        md = QMimeData()
        md.setUrls([QUrl.fromLocalFile(p) for p in self.paths])
        drag = QDrag(self)
        drag.setMimeData(md)
        action = drag.exec(Qt.DropAction.CopyAction)
        print(f"DROPPED {action.name}", flush=True)
        QTimer.singleShot(200, QApplication.quit)


def main() -> int:
    x, y, paths = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3:]
    app = QApplication(sys.argv[:1])
    w = Source(paths)
    w.move(x, y)
    w.show()

    def ready() -> None:
        g = w.geometry()
        print(f"READY {g.x()} {g.y()} {g.width()} {g.height()}", flush=True)

    QTimer.singleShot(500, ready)
    QTimer.singleShot(60_000, app.quit)  # never outlive a broken test
    return app.exec()


if __name__ == "__main__":
    sys.exit(main())
