"""Application bootstrap: ``python -m guitrainer`` / the ``guitrainer`` gui-script.

Ctrl+C works, ``LC_NUMERIC`` is "C" after QApplication (Qt resets it from the locale, which
breaks number parsing in C libraries), the Fusion style, the app icon. No torch import here.
"""

from __future__ import annotations

import argparse
import gc
import locale
import logging
import os
import signal
import sys
import time

_T0 = time.perf_counter()


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="guitrainer", description="Train a Stable Diffusion LoRA on your own GPU.")
    p.add_argument("files", nargs="*", help="preset .toml files or image folders to open")
    p.add_argument("--self-test", action="store_true", help="open offscreen, train the demo for 2 steps, verify, exit")
    p.add_argument("--new-instance", action="store_true", help="start a new window even if the app is already running")
    p.add_argument("--quit-after-show", action="store_true", help=argparse.SUPPRESS)  # startup bench
    return p.parse_args(argv)


def create_app(argv: list[str] | None = None):
    """Create (or return) the QApplication with our bootstrap applied."""
    from PySide6.QtCore import QCoreApplication
    from PySide6.QtGui import QIcon
    from PySide6.QtWidgets import QApplication

    from guitrainer import APP_NAME, __version__
    from guitrainer.base import paths

    app = QApplication.instance()
    if app is None:
        QCoreApplication.setOrganizationName(APP_NAME)
        QCoreApplication.setApplicationName(APP_NAME)
        QCoreApplication.setApplicationVersion(__version__)
        app = QApplication(argv if argv is not None else sys.argv[:1])
    locale.setlocale(locale.LC_NUMERIC, "C")
    app.setStyle("Fusion")
    icon = paths.resources_dir() / "icons" / "guitrainer.png"
    if icon.exists():
        app.setWindowIcon(QIcon(str(icon)))
    from guitrainer.ui import gui_gc

    gui_gc.install(app)  # garbage is collected on the GUI thread only (see gui_gc)
    return app


def _install_sigint(app) -> None:
    """Let Ctrl+C close the app: Qt's event loop never returns to Python otherwise."""
    from PySide6.QtCore import QTimer

    signal.signal(signal.SIGINT, lambda *_: app.quit())
    timer = QTimer(app)
    timer.timeout.connect(lambda: None)  # wake the interpreter so the handler runs
    timer.start(200)
    app._sigint_timer = timer  # keep it alive


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.self_test:
        os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    app = create_app()
    _install_sigint(app)
    from guitrainer.ui.window.single_instance import FileOpenFilter

    opened = FileOpenFilter(app)  # macOS: Finder's "open with" and Dock drops arrive as events
    app.installEventFilter(opened)
    files = [os.path.abspath(f) for f in args.files]
    server = None
    if not (args.self_test or args.quit_after_show or args.new_instance):
        from guitrainer import APP_NAME
        from guitrainer.ui.window.single_instance import InstanceServer, send_to_running, server_name

        name = server_name(APP_NAME)
        if send_to_running(name, files):
            print("guitrainer is already running: handed it over" + (f" {len(files)} file(s)" if files else ""))
            return 0
        server = InstanceServer(name, app)
    from guitrainer.core.runs.state import repair_interrupted
    from guitrainer.ui.window.main_window import MainWindow

    window = MainWindow()
    window.show()
    repair_interrupted(window.binding.config.output.folder)
    # Start-up objects live as long as the app: keep them out of full garbage-collection passes,
    # which otherwise stall the GUI thread for 25-60 ms now and then (bench/RESULTS.md, "Dataset grid").
    gc.collect()
    gc.freeze()

    if server is not None:
        server.files_received.connect(window.receive_files)
    opened.files_opened.connect(window.receive_files)
    if files:
        window.add_paths(files)
    if not (args.self_test or args.quit_after_show):
        from PySide6.QtCore import QTimer

        # Once the window has painted: look at the GPU (imports torch, off the GUI thread), then
        # on the very first start show the environment check.
        QTimer.singleShot(500, window.model_page.start_probe)
        QTimer.singleShot(800, window.maybe_first_run)
    if args.quit_after_show:
        from PySide6.QtCore import QTimer

        def done() -> None:
            print(f"window shown after {time.perf_counter() - _T0:.3f} s; torch imported: {'torch' in sys.modules}")
            app.quit()

        QTimer.singleShot(0, done)
    if args.self_test:
        from guitrainer.selftest import run_self_test

        return run_self_test(app, window)
    return app.exec()


if __name__ == "__main__":
    sys.exit(main())
