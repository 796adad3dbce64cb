"""Issue 14 §4: one device probe for the window; the Model page, the start check and Help ▸ Environment
all listen to it, and its errors reach the GUI thread."""

from __future__ import annotations

import threading

from helpers import fake_device
from PySide6.QtCore import QSettings

from guitrainer.config.presets import PresetStore
from guitrainer.core.device import hardware
from guitrainer.ui.device_service import THREAD_NAME, DeviceService
from guitrainer.ui.window.main_window import MainWindow


def test_the_window_probes_once_for_every_page(qtbot, tmp_path, monkeypatch):
    calls: list[str] = []

    def probe(*_a, **_k):
        calls.append(threading.current_thread().name)
        return fake_device("rtx3060")

    monkeypatch.setattr(hardware, "cached", lambda: None)
    monkeypatch.setattr(hardware, "probe", probe)
    settings = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
    settings.setValue("first_run_done", True)
    w = MainWindow(store=PresetStore(user_dir=tmp_path / "presets"), settings=settings)
    qtbot.addWidget(w)
    assert w.model_page.devices is w.devices and w.training_page.devices is w.devices
    with qtbot.waitSignal(w.devices.device_ready, timeout=10000):
        w.model_page.start_probe()
    assert w.model_page.precision_picker.device() is not None
    dlg = w.show_environment()
    with qtbot.waitSignal(dlg.checked, timeout=10000):
        pass
    assert calls == [THREAD_NAME]  # one probe, off the GUI thread, for both
    assert "RTX 3060" in dlg.report_text() or "3060" in dlg.report_text()
    dlg.close()
    w.dataset_page.shutdown()


def test_a_failed_probe_reaches_every_listener(qtbot, monkeypatch):
    def broken():
        raise RuntimeError("driver on fire")

    service = DeviceService(broken, use_cache=False)
    answers: list[str] = []
    service.when_known(lambda d: answers.append("device"), lambda why: answers.append(f"first: {why}"))
    service.when_known(lambda d: answers.append("device"), lambda why: answers.append(f"second: {why}"))
    qtbot.waitUntil(lambda: len(answers) == 2, timeout=5000)
    assert answers == ["first: driver on fire", "second: driver on fire"]
    service.when_known(lambda d: answers.append("device"), lambda why: answers.append(f"late: {why}"))
    assert answers[-1] == "late: driver on fire" and not service.start()  # not probed again
