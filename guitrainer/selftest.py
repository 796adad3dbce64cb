"""``guitrainer --self-test``: prove an installed or bundled app works end to end.

Opens the main window (offscreen when no display), loads the Demo preset, trains the built-in
demo model for 2 steps, saves the LoRA, reads it back and checks it; exit status 0 on success.
"""

from __future__ import annotations

import logging
import tempfile
import time
import traceback
from pathlib import Path

log = logging.getLogger(__name__)


def check_lora_file(path: Path) -> list[str]:
    """Problems with a written kohya LoRA file (empty list: fine)."""
    import torch
    from safetensors import safe_open

    problems: list[str] = []
    with safe_open(str(path), framework="pt") as f:
        keys = list(f.keys())
        meta = f.metadata() or {}
        if not any(k.startswith("lora_unet_") and k.endswith(".lora_down.weight") for k in keys):
            problems.append("no lora_unet_*.lora_down.weight keys")
        if not any(k.endswith(".alpha") for k in keys):
            problems.append("no .alpha keys")
        for k in keys:
            t = f.get_tensor(k)
            if not torch.isfinite(t.float()).all():
                problems.append(f"{k} holds non-finite values")
    if meta.get("ss_network_module") != "networks.lora":
        problems.append("metadata ss_network_module is not networks.lora")
    return problems


def run_self_test(app, window) -> int:  # noqa: ANN001 - Qt objects
    """Returns the process exit status."""
    from guitrainer.config.presets import DEFAULT_PRESET
    from guitrainer.core.events import Control, NullReporter

    t0 = time.perf_counter()
    try:
        if not window.load_preset(DEFAULT_PRESET):
            print("self-test: FAILED: the Demo preset could not be loaded")
            return 1
        app.processEvents()
        cfg = window.binding.config.copy()
        with tempfile.TemporaryDirectory(prefix="guitrainer-selftest-") as tmp:
            cfg.output.folder = tmp
            cfg.schedule.max_steps = 2
            cfg.sampling.every_n_steps = 0
            cfg.sampling.at_start = False
            from guitrainer.engine.trainer import Trainer

            reporter = NullReporter()
            summary = Trainer(cfg, reporter, Control()).run()
            if summary.status != "finished" or not summary.lora_path:
                print(f"self-test: FAILED: training ended '{summary.status}': {summary.message}")
                return 1
            lora = Path(summary.lora_path)
            problems = check_lora_file(lora)
            if problems:
                print("self-test: FAILED: " + "; ".join(problems))
                return 1
            print(
                f"self-test: OK: {len(reporter.steps)} steps, final loss {summary.final_loss:.4f}, "
                f"LoRA {lora.name} ({lora.stat().st_size} bytes) verified, {time.perf_counter() - t0:.1f} s"
            )
        return 0
    except Exception:  # a self-test reports every failure, then exits non-zero
        print("self-test: FAILED with an exception:\n" + traceback.format_exc())
        return 1
    finally:
        window.close()
