"""A run's time: setting up, training and in all, summed over its parts (a run stopped and resumed is one run).

The recorder writes one part per launch (:func:`part`) and adds it to what the run's earlier parts took
(:func:`add_part`); the Runs page's Details say it in words (:func:`describe`). Plain dicts, as the run
store keeps them in ``timings_json``. No Qt and no torch.
"""

from __future__ import annotations

from typing import Any

#: the sums a run's timings carry (each over all of its parts)
SUMMED = ("wall_seconds", "setup_seconds", "training_seconds", "steps")


def part(started_at: float, ended_at: float, first_step_at: float | None, training_seconds: float, steps: int) -> dict[str, Any]:
    """One launch of a run: from its start to its end, set-up until the first step, the steps' own time."""
    out: dict[str, Any] = {"started_at": started_at, "ended_at": ended_at, "wall_seconds": ended_at - started_at}
    if first_step_at is not None:
        out["setup_seconds"] = first_step_at - started_at
    if steps:
        out["training_seconds"] = training_seconds
        out["steps"] = steps
    return out


def parts_of(timings: dict[str, Any]) -> list[dict[str, Any]]:
    """The parts a run's timings hold (a run recorded before parts were kept is one part)."""
    kept = timings.get("parts")
    if isinstance(kept, list):
        return [p for p in kept if isinstance(p, dict)]
    if "wall_seconds" not in timings:
        return []
    old = {k: timings[k] for k in ("started_at", "ended_at", "wall_seconds", "setup_seconds", "training_seconds") if k in timings}
    mean = timings.get("mean_seconds_per_step")
    if mean and timings.get("training_seconds"):
        old["steps"] = round(float(timings["training_seconds"]) / float(mean))
    return [old]


def add_part(previous: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """The run's timings with one more part: every part kept, the sums over all of them, and the mean step time."""
    parts = [*parts_of(previous), new]
    out: dict[str, Any] = {"parts": parts, "started_at": parts[0].get("started_at"), "ended_at": new.get("ended_at")}
    for key in SUMMED:
        values = [float(p[key]) for p in parts if isinstance(p.get(key), (int, float))]
        if values:
            out[key] = sum(values)
    if out.get("steps"):
        out["steps"] = int(out["steps"])
        out["mean_seconds_per_step"] = out.get("training_seconds", 0.0) / out["steps"]
    return out


def describe(timings: dict[str, Any]) -> str:
    """``time: setting up 3.1 s, 0.412 s per step, 95 s in all (2 parts: 40 s + 55 s)``; "" without timings."""
    if timings.get("mean_seconds_per_step") is None and "wall_seconds" not in timings:
        return ""
    words = []
    if "setup_seconds" in timings:
        words.append(f"setting up {float(timings['setup_seconds']):.1f} s")
    if timings.get("mean_seconds_per_step") is not None:
        words.append(f"{float(timings['mean_seconds_per_step']):.3f} s per step")
    words.append(f"{float(timings.get('wall_seconds', 0.0)):.0f} s in all")
    text = "time: " + ", ".join(words)
    parts = parts_of(timings)
    if len(parts) > 1:
        text += f" ({len(parts)} parts: " + " + ".join(f"{float(p.get('wall_seconds', 0.0)):.0f} s" for p in parts) + ")"
    return text
