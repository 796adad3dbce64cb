"""Garbage made on a worker thread is collected on the GUI thread (guitrainer.ui.gui_gc)."""

from __future__ import annotations

import gc
import threading

from guitrainer.ui import gui_gc


class _Cycle:
    """Cyclic garbage that records the thread its finaliser runs on."""

    seen: list[str] = []

    def __init__(self) -> None:
        self.me = self

    def __del__(self) -> None:
        _Cycle.seen.append(threading.current_thread().name)


def test_worker_threads_garbage_is_collected_on_the_gui_thread(qapp, qtbot) -> None:
    collector = gui_gc.install(qapp)
    assert gui_gc.install(qapp) is collector  # one per app
    assert not gc.isenabled()
    gc.collect()
    _Cycle.seen.clear()

    def make_garbage() -> None:
        for _ in range(20 * gc.get_threshold()[0]):  # far past generation 0's threshold: Python would collect here
            _Cycle()

    worker = threading.Thread(target=make_garbage, name="worker")
    worker.start()
    worker.join()
    assert _Cycle.seen == []  # the worker allocated past every threshold and collected nothing
    qtbot.waitUntil(lambda: len(_Cycle.seen) > 0, timeout=5000)  # the GUI thread's timer collects
    assert set(_Cycle.seen) == {threading.main_thread().name}
    gc.collect()
    assert len(_Cycle.seen) == 20 * gc.get_threshold()[0]
    assert set(_Cycle.seen) == {threading.main_thread().name}


def test_check_collects_as_python_would(qapp) -> None:
    collector = gui_gc.install(qapp)
    gc.collect()
    assert collector.check() == 0  # nothing past the threshold: no collection
    for _ in range(2 * gc.get_threshold()[0]):
        _Cycle()
    _Cycle.seen.clear()
    assert collector.check() > 0
    assert _Cycle.seen
