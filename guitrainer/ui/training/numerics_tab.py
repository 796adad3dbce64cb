"""Hooks the Numerics tab onto the Training page, without loading pyqtgraph until a run starts.

The page announces each run's worker (``TrainingPage.worker_started``); :func:`attach_numerics` builds the
tab on the first one and connects every run's worker to it, and passes each saved file on (the Output
page's save report). The page itself knows nothing of numerics.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from guitrainer.ui.training.layout import make_room_for

if TYPE_CHECKING:
    from guitrainer.ui.training.numerics_chart import NumericsChart


def attach_numerics(page: Any, on_saved: Callable[[Any], None] | None = None) -> Callable[[], NumericsChart | None]:
    """Give the Training ``page`` its Numerics tab: built when the first run starts (the charts, and so
    pyqtgraph, are loaded by then), restarted with each run (cleared with the charts, kept when a resume
    continues them) and fed by each run's worker. ``on_saved(SavedFile)``, when given, gets every file the
    run saves. Returns a function that gives the chart (None before the first run).
    """
    holder: list[NumericsChart] = []

    def on_worker(worker: Any) -> None:
        from guitrainer.ui.training.numerics_chart import add_numerics_tab

        if not holder:
            holder.append(add_numerics_tab(page.tabs))
            make_room_for(page.tabs, holder[0])  # opened, it takes the height the charts can spare
        chart = holder[0]
        chart.start_run(worker.config.precision, clear=not len(page.charts))
        worker.step_finished.connect(chart.add)
        if on_saved is not None:
            worker.checkpoint_saved.connect(on_saved)

    page.worker_started.connect(on_worker)
    return lambda: holder[0] if holder else None
