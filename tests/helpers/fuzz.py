"""The config fuzz: seeded mutations of the shipped presets (wrong types, ranges, nesting, and every odd path and
name a hostile tester types), and the child process that runs ``guitrainer-train FILE --check`` on each under a
watchdog, a memory limit and an audit hook.

The child (``python -m helpers.fuzz SEED CASES FOLDER``) prints one JSON line of figures: configs run, exit codes,
tracebacks, hangs (a case past :data:`CASE_SECONDS`), reads without end (a ``MemoryError`` under the limit), opens
of a named pipe or device (the audit hook: :mod:`guitrainer.base.safe_open` never opens one; ``/proc/self/mem`` is
a "regular file" whose read fails at once, not counted), and refusals that do
not name their field. A regression that blocks on a FIFO or reads ``/dev/zero`` stops in the child, never in pytest.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import random
import re
import signal
import sys
import traceback
import warnings
from pathlib import Path
from typing import Any

#: settings that hold a path or a file name: where the odd values go
PATH_FIELDS: dict[str, tuple[str, ...]] = {
    "model": ("base", "vae", "init_lora"),
    "schedule": ("resume_from",),
    "validation": ("folder",),
    "output": ("folder", "name"),
    "dataset": ("folders", "regularization_folders", "exclude", "caption_extension"),
}
#: settings that are whole numbers or numbers: where the huge ones go
NUMBER_FIELDS: dict[str, tuple[str, ...]] = {
    "network": ("rank", "alpha", "conv_rank", "lokr_factor"),
    "schedule": ("epochs", "max_steps", "batch_size", "seed", "warmup_steps"),
    "dataset": ("resolution", "keep_tokens", "max_bucket_resolution"),
    "optimizer": ("lr", "weight_decay"),
    "sampling": ("size", "seed", "every_n_steps"),
}
#: odd paths that need nothing on disk: a user with no home, names over 255 bytes, control and format
#: characters, a NUL, a whole path over PATH_MAX, and the special files every Linux has
ODD_PATHS: tuple[str, ...] = (
    "~nosuchuser_fuzz/models/x.safetensors",
    "~nosuchuser_fuzz",
    "/tmp/" + "n" * 300 + "/x",
    "n" * 300,
    "~/" + "é" * 200,
    "a\nb",
    "tab\there\x07",
    "\u202egpj.exe",
    "zero\u200bwidth",
    "a\x00b",
    "/" + "d/" * 3000,
    "/dev/zero",
    "/dev/null",
    "/proc/self/mem",
    "/dev/stdin",
)
#: odd output names: what no other system can write
ODD_NAMES: tuple[str, ...] = ("con", "NUL.txt", "COM1", "aux", "a:b*c?", "trailing.", "trailing ", "a\nb", "bell\x07",
                              "\u202eexe.txt", "lpt9.tar.gz")
HUGE_NUMBERS: tuple[object, ...] = (10**30, -(10**30), 2**63, -(2**63), 2**64 + 1, 1e308, -1e308, 1e-320)
#: one --check past this is a hang
CASE_SECONDS = 10.0


def mutations(rng: random.Random, base: dict[str, Any], odd_paths: tuple[str, ...] = ODD_PATHS) -> dict[str, Any]:
    """One mutated copy of a preset dict: 1-3 edits of the kinds issues 16 and 27 name."""
    data = {k: (dict(v) if isinstance(v, dict) else v) for k, v in base.items()}
    sections = [k for k, v in data.items() if isinstance(v, dict)] or ["network"]
    defaults = _defaults()
    for _ in range(rng.randint(1, 3)):
        sname = rng.choice(sections + ["network", "optimizer", "dataset", "sampling", "output", "precision"])
        keys = list(defaults.get(sname, {})) or ["x"]
        key = rng.choice(keys + ["unknown_key"])
        kind = rng.randrange(12)
        deep: object = 1
        if kind == 0:
            value: object = rng.choice(["7", "true", "", [], {}, [1, "a"], {"a": 1}])  # wrong types
        elif kind == 1:
            value = rng.choice([-1, 0, 10**12, -(10**12), 2**64, 1e308, -0.0, 0.5])  # out of range
        elif kind == 2:
            value = rng.choice([math.nan, math.inf, -math.inf])  # non-finite
        elif kind == 3:
            key = f"bogus_{rng.randrange(100)}"  # unknown keys
            value = 1
        elif kind == 4:
            for _ in range(rng.choice([20, 200, 3000])):
                deep = [deep] if rng.random() < 0.5 else {"k": deep}
            value = deep  # deep nesting
        elif kind == 5:
            value = rng.choice(["x" * 100_000, "é" * 5000, "a\x00b", "../" * 50])  # long / odd strings
        elif kind == 6:
            value = rng.choice(["fp8", "FP16", "adamw", "cosine_restarts", "sdxxl"])  # bad enum values
        elif kind == 7:
            value = rng.choice([True, False, 3, 1.5])
        elif kind == 8:
            data[rng.choice(["network", "dataset", "zzz"])] = rng.choice([1, "x", [1, 2]])  # a section not a table
            continue
        elif kind in (9, 10):  # an odd path or name where the config holds one (issue 27)
            sname = rng.choice(list(PATH_FIELDS))
            key = rng.choice(PATH_FIELDS[sname])
            odd = rng.choice(ODD_NAMES if key == "name" and rng.random() < 0.7 else odd_paths)
            value = [odd] if key in ("folders", "regularization_folders", "exclude") else odd
        else:  # a huge number where the config holds one
            sname = rng.choice(list(NUMBER_FIELDS))
            key = rng.choice(NUMBER_FIELDS[sname])
            value = rng.choice(HUGE_NUMBERS)
        section = data.get(sname, {})
        section = dict(section) if isinstance(section, dict) else {}
        section[key] = value
        data[sname] = section
    return data


def _defaults() -> dict[str, Any]:
    from guitrainer.config import TrainingConfig

    return TrainingConfig().to_dict()


# --------------------------------------------------------------------------- the child process


def make_specials(folder: Path) -> dict[str, str]:
    """Odd things on disk under ``folder``: a named pipe, a folder where a file belongs, a file where a folder belongs,
    a file under a file, and an image folder holding a pipe as a caption, a pipe and a device under image names."""
    folder.mkdir(parents=True, exist_ok=True)
    fifo = folder / "pipe.safetensors"
    os.mkfifo(fifo)
    (folder / "a_folder.safetensors").mkdir()
    (folder / "plain_file").write_text("not a folder")
    images = folder / "images"
    images.mkdir()
    from PIL import Image

    Image.new("RGB", (64, 64)).save(images / "ok.png")
    os.mkfifo(images / "ok.txt")  # its caption is a pipe
    os.mkfifo(images / "pipe.png")
    os.symlink("/dev/zero", images / "zero.png")
    return {
        "fifo": str(fifo),
        "folder_for_file": str(folder / "a_folder.safetensors"),
        "file_for_folder": str(folder / "plain_file"),
        "under_a_file": str(folder / "plain_file" / "below"),
        "images": str(images),
    }


class _Hang(BaseException):  # noqa: N818 - a BaseException: no ``except Exception`` in the code under test swallows it
    """A case ran past :data:`CASE_SECONDS`."""


def _on_alarm(signum: int, frame: object) -> None:
    raise _Hang


def _limit_memory(extra: int = 1536 << 20) -> None:
    """A read without end hits this (a MemoryError) instead of the machine's memory."""
    import resource

    with open("/proc/self/statm", encoding="ascii") as f:
        vsize = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    resource.setrlimit(resource.RLIMIT_AS, (vsize + extra, resource.getrlimit(resource.RLIMIT_AS)[1]))


def _stub_device() -> None:
    """The device probe imports torch (seconds) and says nothing about inputs: the no-torch guess stands in."""
    from guitrainer.core.checks.start import assumed_cpu_device
    from guitrainer.core.device import hardware

    device = assumed_cpu_device()
    hardware.probe = lambda *a, **k: device  # type: ignore[assignment]


_SETTING = r"^(\(file\)|[a-z_]+\.[a-z_]+(\[\d+\])?(\.repeats)?|[a-z_]+)$"


def run(seed: int, cases: int, folder: Path) -> dict[str, Any]:
    """Run the sweep of odd paths and ``cases`` fuzzed configs through ``guitrainer-train FILE --check`` here,
    each under the watchdog."""
    import tomli_w

    from guitrainer.cli import main
    from guitrainer.config import parse_toml_text
    from guitrainer.config.presets import PresetStore
    from guitrainer.core.precision import advisor
    from guitrainer.core.runs.state import repair_interrupted

    specials = make_specials(folder / "specials")
    special_files = {specials["fifo"], "/dev/zero", "/dev/null", "/dev/stdin",
                     str(Path(specials["images"]) / "ok.txt"), str(Path(specials["images"]) / "pipe.png"),
                     str(Path(specials["images"]) / "zero.png")}
    opened: list[str] = []

    def audit(event: str, args: tuple[Any, ...]) -> None:
        if event == "open" and args and isinstance(args[0], str | bytes | os.PathLike):
            path = os.fsdecode(os.fspath(args[0]))
            if path in special_files:
                opened.append(path)

    sys.addaudithook(audit)
    advised: list[str] = []
    real_advise = advisor.advise

    def advise(*args: Any, **kwargs: Any) -> list[Any]:
        found = real_advise(*args, **kwargs)
        advised.extend(a.message for a in found)
        return found

    advisor.advise = advise  # type: ignore[assignment]
    _stub_device()
    odd_paths = (*ODD_PATHS, *specials.values())
    bases = [parse_toml_text(Path(str(p.path)).read_text(encoding="utf-8"), str(p.path))
             for p in PresetStore().presets.values() if p.shipped]
    config_files = (specials["fifo"], "/dev/zero", "/dev/null", "/proc/self/mem", specials["folder_for_file"],
                    "~nosuchuser_fuzz/c.toml", str(folder / ("n" * 300)), f"{folder}/a\nb.toml")
    rng = random.Random(seed)
    stats: dict[str, Any] = {"configs": 0, "codes": {}, "tracebacks": 0, "hangs": 0, "endless_reads": 0,
                             "special_opens": 0, "refusals": 0, "unnamed_refusals": 0, "examples": []}
    signal.signal(signal.SIGALRM, _on_alarm)
    _limit_memory()
    sweep = list(_sweep(odd_paths))  # every odd value in every path setting once, then the random mutations
    for i in range(len(sweep) + cases):
        data = sweep[i] if i < len(sweep) else mutations(rng, rng.choice(bases), odd_paths)
        if i % 10 == 0 and i >= len(sweep):
            path = config_files[(i // 10) % len(config_files)]  # the config file itself is the odd path
        else:
            try:
                text = tomli_w.dumps(data)
            except (TypeError, ValueError, RecursionError):
                continue  # not expressible as TOML (e.g. a top-level non-table); the dict fuzz covers it
            path = str(folder / f"fuzz{i}.toml")
            Path(path).write_text(text, encoding="utf-8")
        stats["configs"] += 1
        out, err = io.StringIO(), io.StringIO()
        advised.clear()
        before = len(opened)
        rc: int | str
        signal.setitimer(signal.ITIMER_REAL, CASE_SECONDS)
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                rc = main([path, "--check"])
                output = data.get("output")
                if isinstance(output, dict) and isinstance(output.get("folder"), str):
                    repair_interrupted(output["folder"])  # what a run does next: it must never raise either
        except _Hang:
            rc = "hang"
            stats["hangs"] += 1
        except MemoryError:
            rc = "endless read"
            stats["endless_reads"] += 1
        except BaseException:  # noqa: BLE001 - counted: the fuzz asserts there are none
            rc = "traceback"
            stats["tracebacks"] += 1
            stats["examples"].append(traceback.format_exc()[-1500:])
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        text_out, text_err = out.getvalue(), err.getvalue()
        if "Traceback" in text_out + text_err and rc != "traceback":
            stats["tracebacks"] += 1
            stats["examples"].append((text_out + text_err)[-1500:])
        if len(opened) > before:
            stats["special_opens"] += len(opened) - before
            stats["examples"].append(f"opened {opened[before:]} for {path!r}")
        stats["codes"][str(rc)] = stats["codes"].get(str(rc), 0) + 1
        for line in _refusals(rc, text_out, text_err, advised):
            stats["refusals"] += 1
            named = re.match(_SETTING, line.split(": ", 1)[0].strip("`")) if ": " in line else None
            if not named:
                stats["unnamed_refusals"] += 1
                stats["examples"].append(f"unnamed: {line[:300]}")
    return stats


def _sweep(odd_paths: tuple[str, ...]) -> Any:
    """One config per odd value per path setting, on the defaults (the demo model: its images scan when
    ``dataset.folders`` is set, so the special image folder's pipes and device are met)."""
    for sname, keys in PATH_FIELDS.items():
        for key in keys:
            for odd in (*odd_paths, *ODD_NAMES) if key == "name" else odd_paths:
                yield {sname: {key: [odd] if key in ("folders", "regularization_folders", "exclude") else odd}}


def _refusals(rc: int | str, out: str, err: str, advised: list[str]) -> list[str]:
    """Each refusal ``--check`` printed, from the setting on: ``field: message``. Exit 2 is the config's own
    refusal (``error: FILE[, line N]: `field`: message``); exit 1 prints ``# error: field: message`` lines (device
    advice lines, which concern no path, are left out)."""
    if rc == 2:
        line = next((ln for ln in err.splitlines() if ln.startswith("error: ")), err.strip()[:300])
        m = re.search(r"`(?P<field>[^`]+)`: (?P<message>.*)", line)
        return [f"{m['field']}: {m['message']}" if m else line]
    lines = [ln.removeprefix("# error: ") for ln in out.splitlines() if ln.startswith("# error: ")]
    return [ln for ln in lines if not any(ln.startswith(a) for a in advised)]


if __name__ == "__main__":
    seed, cases, folder = int(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3])
    print(json.dumps(run(seed, cases, folder)))
