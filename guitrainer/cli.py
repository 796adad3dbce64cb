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
import warnings
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

from guitrainer.config import ConfigError, TrainingConfig, field_info, field_type, load_toml
from guitrainer.presets import PresetStore

if TYPE_CHECKING:
    from guitrainer.core.events import Control

log = logging.getLogger("guitrainer.cli")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="guitrainer-train",
        description="Train a Stable Diffusion LoRA headless, with the same engine as the guitrainer app.",
    )
    p.add_argument("config", nargs="?", help="a TOML config (full, or sparse on top of the preset / defaults)")
    p.add_argument("--preset", help="start from this preset (name as shown in the app, or a preset .toml file)")
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
    return p


def resolve_config(args: argparse.Namespace) -> TrainingConfig:
    """Defaults <- preset <- config file <- --set overrides."""
    base = TrainingConfig()
    if args.preset:
        if args.preset.endswith(".toml") and Path(args.preset).is_file():
            from guitrainer.presets import read_preset

            base = read_preset(args.preset).config()
        else:
            base = PresetStore().get(args.preset).config()
    cfg = load_toml(args.config, base=base) if args.config else base
    for item in args.overrides:
        key, sep, value = item.partition("=")
        if not sep:
            raise ConfigError(key, "--set needs section.field=value")
        key = key.strip()
        cfg.set(key, _parse_value(value, key))
    return cfg.validate()


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
    except tomllib.TOMLDecodeError:
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
    logging.basicConfig(level=logging.INFO, format=prefix + "%(levelname)s %(name)s: %(message)s")
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
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.check:
        print(cfg.to_toml())
        return _print_advice(cfg)
    return _train(cfg, quiet=args.quiet)


def _print_advice(cfg: TrainingConfig) -> int:
    """Device advice for --check; error-level advice makes the exit status 1."""
    try:
        from guitrainer.core import hardware, precision
    except ImportError:  # the precision rules land with their own issue
        return 0
    device = hardware.probe()
    advice = precision.advise(device, cfg)
    print(f"# device: {device.summary()}")
    worst = 0
    for a in advice:
        print(f"# {a.level}: {a.message}" + (f" (suggested: {a.suggestion_text})" if a.suggestion_text else ""))
        if a.level == "error":
            worst = 1
    return worst


def _train(cfg: TrainingConfig, *, quiet: bool) -> int:
    """Run the engine. Exit status: 0 finished, 1 failed, 130 stopped by Ctrl+C (saved) or aborted."""
    try:
        from guitrainer.engine.trainer import Trainer
    except ImportError as e:
        print(f"error: the training engine is not available: {e}", file=sys.stderr)
        return 3
    from guitrainer.core.events import Control
    from guitrainer.engine.reporting import ConsoleReporter

    reporter = ConsoleReporter(quiet=quiet)
    control = Control()
    interrupted = threading.Event()
    try:
        with _stop_on_sigint(control, interrupted):
            summary = Trainer(cfg, reporter, control).run()
    except KeyboardInterrupt:
        print("aborted: nothing more was saved", file=sys.stderr)
        return 130
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
