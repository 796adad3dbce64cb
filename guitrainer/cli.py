"""Headless training: ``guitrainer-train CONFIG.toml [--preset NAME] [--set section.field=value ...] [--check]``.

Runs the same engine as the app; works under ``accelerate launch`` on several GPUs
(only the main process prints and saves).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
import sys
import threading
import traceback
import warnings
from collections.abc import Iterator
from types import FrameType
from typing import TYPE_CHECKING

from guitrainer.base import safe_open
from guitrainer.config import ConfigError, TrainingConfig, field_info, field_type, load_toml
from guitrainer.config.presets import PresetStore
from guitrainer.core.runs.state import repair_interrupted

if TYPE_CHECKING:
    from guitrainer.core.events import Control

log = logging.getLogger("guitrainer.cli")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="guitrainer-train",
        description="Train a Stable Diffusion LoRA headless, with the same engine as the guitrainer app.",
    )
    p.add_argument("config", nargs="?", help="a TOML config (full, or sparse on top of the preset / defaults)")
    p.add_argument(
        "--preset",
        help="start from this preset: its name as shown in the app (or a unique part of it, any case: 'demo'), "
        "or a preset .toml file",
    )
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="SECTION.FIELD=VALUE",
        help="override one setting; repeatable (e.g. --set network.rank=32 --set precision.training=bf16)",
    )
    p.add_argument("--check", action="store_true", help="validate, print the resolved config and device advice, then exit")
    p.add_argument("--list-presets", action="store_true", help="list the available presets and exit")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--no-record", action="store_true", help="do not keep this run in the run history (the app's Runs page)")
    from guitrainer.lab_cli import add_arguments

    add_arguments(p)  # --compare-precisions [--steps N] [--json]: the precision lab
    from guitrainer import fit_cli

    fit_cli.add_arguments(p)  # --fit-to SIZE|card: Fit to this card
    return p


def resolve_config(args: argparse.Namespace) -> TrainingConfig:
    """Defaults <- preset <- config file <- --set overrides."""
    base = TrainingConfig()
    if args.preset:
        if args.preset.endswith(".toml") and _names_something(args.preset):
            from guitrainer.config.presets import read_preset

            base = read_preset(args.preset).config()
        else:
            base = PresetStore().find(args.preset).config()
    cfg = load_toml(args.config, base=base) if args.config else base
    for item in args.overrides:
        key, sep, value = item.partition("=")
        if not sep:
            raise ConfigError(key, "--set needs section.field=value")
        key = key.strip()
        cfg.set(key, _parse_value(value, key))
    return cfg.validate()


def _names_something(text: str) -> bool:
    """Whether ``text`` names something on disk: a preset file, or a named pipe or folder that
    :func:`~guitrainer.config.presets.read_preset` then refuses in plain words (never a hang)."""
    try:
        return safe_open.look(text).kind != "missing"
    except safe_open.PathError:  # a name too long, a NUL: read_preset says so
        return True


def _parse_value(text: str, path: str = "") -> object:
    """TOML scalars (numbers, booleans, quoted strings, arrays) or else the raw text.

    For a text field (or a list of text, e.g. ``sampling.prompts``) a TOML scalar that is not a string
    stays the raw text: ``--set output.name=2024`` is the name "2024", not a number. A list field gets
    several items only from a TOML array; ``--set 'sampling.prompts=a, b'`` is one prompt.
    """
    import tomllib
    import typing

    try:
        value = tomllib.loads(f"v = {text}")["v"]
    except (tomllib.TOMLDecodeError, RecursionError):  # not TOML, or nested too deeply for the parser
        return text
    if path and not isinstance(value, str | list):
        try:
            t = field_type(field_info(path))
        except ConfigError:
            return value  # cfg.set names the unknown field
        if t is str or typing.get_origin(t) in (typing.Literal, list):
            return text.strip()
    return value


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    rank = os.environ.get("RANK") if int(os.environ.get("WORLD_SIZE", "1") or 1) > 1 else None
    prefix = f"[rank {rank}] " if rank is not None else ""  # under accelerate launch every process logs
    once = _Once()
    _set_up_logging(prefix, once)
    if args.list_presets:
        store = PresetStore()
        for name in store.names():
            print(name)
        for err in store.errors:
            print(f"warning: {err}", file=sys.stderr)
        return 0
    if not args.config and not args.preset:
        build_parser().print_usage(sys.stderr)
        print("guitrainer-train: give a CONFIG.toml or --preset NAME", file=sys.stderr)
        return 2
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            cfg = resolve_config(args)
        for w in caught:
            print(f"warning: {w.message}", file=sys.stderr)
    except (ConfigError, KeyError) as e:
        print(f"error: {e.args[0] if isinstance(e, KeyError) and e.args else e}", file=sys.stderr)
        return 2
    if args.fit_to:
        from guitrainer.fit_cli import fit_config

        fitted, code = fit_config(cfg, args.fit_to)
        if fitted is None:
            return code
        cfg = fitted
    if args.compare_precisions:
        from guitrainer.lab_cli import run

        return run(cfg, steps=args.steps, as_json=args.json)
    if args.check:
        print(cfg.to_toml())
        inputs = _print_inputs(cfg)
        return max(inputs, _print_advice(cfg))
    if _print_inputs(cfg, captions=True, comment=False):
        return 2
    for line in repair_interrupted(cfg.output.folder):
        print(f"note: {line}", file=sys.stderr)
    return _train(cfg, quiet=args.quiet, once=once, record=not args.no_record)


class _Once:
    """Texts already shown: the trainer logs a message and reports it to the reporter; the terminal shows it once."""

    def __init__(self) -> None:
        self._seen: set[str] = set()
        self._lock = threading.Lock()

    def first(self, text: str) -> bool:
        key = text.strip().removeprefix("warning: ")
        with self._lock:
            if key in self._seen:
                return False
            self._seen.add(key)
            return True


class _TqdmLogHandler(logging.Handler):
    """Log lines through ``tqdm.write``, so they print above the progress bar instead of through it."""

    def __init__(self, once: _Once) -> None:
        super().__init__()
        self.once = once

    def emit(self, record: logging.LogRecord) -> None:
        try:
            if not self.once.first(record.getMessage()):
                return
            from tqdm import tqdm

            tqdm.write(self.format(record), file=sys.stderr)
        except Exception:  # noqa: BLE001 - logging must never raise into the trainer
            self.handleError(record)


#: third-party loggers whose warnings concern packages this app does not use (bitsandbytes' optional
#: "kernels" package for 4-bit CPU kernels): shown only as errors
QUIET_LOGGERS: tuple[str, ...] = ("bitsandbytes",)


def _set_up_logging(prefix: str, once: _Once) -> None:
    handler = _TqdmLogHandler(once)
    handler.setFormatter(logging.Formatter(prefix + "%(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    if not any(isinstance(h, _TqdmLogHandler) for h in root.handlers) and not root.handlers:
        root.addHandler(handler)  # as logging.basicConfig: only where nothing (a test runner) set one up
        root.setLevel(logging.INFO)
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.ERROR)


def _print_inputs(cfg: TrainingConfig, *, captions: bool = True, comment: bool = True) -> int:
    """The folders, the model and the captions on disk (:mod:`guitrainer.core.checks.inputs`); 1 on an error."""
    from guitrainer.core.checks.inputs import check_inputs

    report = check_inputs(cfg, captions=captions)
    lead = "# " if comment else ""
    for line in report.errors:
        print(f"{lead}error: {line}", file=sys.stdout if comment else sys.stderr)
    for line in report.notes:
        print(f"{lead}note: {line}", file=sys.stdout if comment else sys.stderr)
    return 1 if report.errors else 0


def _print_advice(cfg: TrainingConfig) -> int:
    """Device advice for --check; error-level advice makes the exit status 1."""
    from guitrainer.core.device import hardware
    from guitrainer.core.precision import advisor

    device = hardware.probe()
    advice = advisor.advise(device, cfg)
    print(f"# device: {device.summary()}")
    worst = 0
    for a in advice:
        print(f"# {a.level}: {a.message}" + (f" (suggested: {a.suggestion_text})" if a.suggestion_text else ""))
        if a.level == "error":
            worst = 1
    return worst


def _train(cfg: TrainingConfig, *, quiet: bool, once: _Once | None = None, record: bool = True) -> int:
    """Run the engine. Exit status: 0 finished, 1 failed, 130 stopped by Ctrl+C (saved) or aborted."""
    try:
        from guitrainer.engine.trainer import Trainer
    except ModuleNotFoundError as e:
        if (e.name or "").split(".")[0] == "guitrainer":
            raise  # our own module missing is a broken install: fail loudly
        # a third-party package the engine needs (torch, diffusers, ...) is not installed
        print(f"error: the training engine needs {e.name}, which is not installed ({e})", file=sys.stderr)
        return 3
    from guitrainer.core.events import Control
    from guitrainer.engine.recording import recording

    reporter = _OnceReporter(quiet=quiet, once=once or _Once())
    control = Control()
    interrupted = threading.Event()
    try:
        with _stop_on_sigint(control, interrupted), recording(reporter, cfg, source="cli", enabled=record) as rec:
            trainer = Trainer(cfg, rec.reporter, control)
            rec.attach(trainer)
            summary = trainer.run()
            rec.finish(summary)
    except KeyboardInterrupt:
        print("aborted: nothing more was saved", file=sys.stderr)
        return 130
    except Exception as e:  # noqa: BLE001 - a bug here or in a library: a plain message first, then the details
        print(f"error: training stopped on an unexpected error: {type(e).__name__}: {str(e)[:300]}", file=sys.stderr)
        print("  This is a bug (in guitrainer or a library it uses); the details below help a bug report:", file=sys.stderr)
        traceback.print_exc()
        return 1
    finally:
        reporter.close()
    if summary.status == "failed":
        print(f"error: {summary.message}", file=sys.stderr)
        for line in summary.advice:
            print(f"  - {line}", file=sys.stderr)
        return 1
    if summary.status in ("stopped", "complete"):
        print(summary.message)
    if summary.lora_path:
        print(f"saved {summary.lora_path}")
    if summary.status == "stopped" and summary.state_path:
        print(f"saved state {summary.state_path}")
    return 130 if summary.status == "stopped" and interrupted.is_set() else 0


def _once_reporter_class() -> type:
    from guitrainer.engine.reporting import ConsoleReporter

    class OnceReporter(ConsoleReporter):
        """The console reporter, showing each text once (the trainer also logs what it reports)."""

        def __init__(self, *, quiet: bool, once: _Once) -> None:
            super().__init__(quiet=quiet)
            self.once = once

        def _write(self, text: str) -> None:
            if self.once.first(text):
                super()._write(text)

    return OnceReporter


def _OnceReporter(*, quiet: bool, once: _Once):  # noqa: N802 - builds the class above lazily (engine import)
    return _once_reporter_class()(quiet=quiet, once=once)


@contextlib.contextmanager
def _stop_on_sigint(control: Control, interrupted: threading.Event) -> Iterator[None]:
    """While the body runs: the first Ctrl+C asks ``control`` for a graceful stop (the engine saves the
    LoRA and a resumable state at the end of the current step); a second one aborts at once
    (KeyboardInterrupt). The previous handler comes back afterwards. Only in the main thread, where
    Python runs signal handlers; elsewhere (an embedding app) nothing is installed."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_sigint(signum: int, frame: FrameType | None) -> None:
        if interrupted.is_set():
            raise KeyboardInterrupt
        interrupted.set()
        control.request_stop()
        print(
            "\nCtrl+C: stopping after this step and saving the LoRA and a resumable state; "
            "press Ctrl+C again to abort without saving",
            file=sys.stderr,
            flush=True,
        )

    previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous if previous is not None else signal.SIG_DFL)


if __name__ == "__main__":
    sys.exit(main())
