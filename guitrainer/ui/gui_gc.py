"""Python's cyclic garbage collector, run on the GUI thread only.

Python starts a collection on whichever thread happens to allocate past the threshold — in this app often the
training, lab or dataset worker. A collection there also destroys the GUI's Python-backed Qt objects that are garbage
in cycles, and such a destructor needs the GIL while it holds Qt's signal-slot mutex, which the GUI thread (holding
the GIL) waits for: both threads hang for good (seen in the real-window suite, in training and in the lab). So once
the QApplication exists, automatic collection is off and a timer on the GUI thread makes the collections Python
would have made: generation 0 when its count passes the threshold, the older ones when theirs do (the pattern of
pyqtgraph's ``GarbageCollector``, itself from Erik Janssens). Worker threads make garbage and never collect it.
"""

from __future__ import annotations

import gc

from PySide6.QtCore import QCoreApplication, QObject, QTimer

#: how often the GUI thread looks at the collector's counts (a look costs microseconds; a collection of a young
#: generation, a millisecond or two)
INTERVAL_MS = 250


class GuiThreadCollector(QObject):
    """Automatic garbage collection switched off; :meth:`check` on a GUI-thread timer collects instead."""

    def __init__(self, app: QCoreApplication, interval_ms: int = INTERVAL_MS) -> None:
        super().__init__(app)
        self.threshold = gc.get_threshold()
        self.timer = QTimer(self)
        self.timer.timeout.connect(self.check)
        gc.disable()
        self.timer.start(interval_ms)

    def check(self) -> int:
        """The collections automatic GC would make now, by the same thresholds; returns the objects found."""
        first, second, third = gc.get_count()
        found = 0
        if first > self.threshold[0]:
            found += gc.collect(0)
            if second > self.threshold[1]:
                found += gc.collect(1)
                if third > self.threshold[2]:
                    found += gc.collect(2)
        return found


def install(app: QCoreApplication) -> GuiThreadCollector:
    """The app's collector (made once; call on the GUI thread, after the QApplication exists)."""
    existing = app.findChild(GuiThreadCollector)
    return existing if existing is not None else GuiThreadCollector(app)
