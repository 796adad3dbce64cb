"""The Runs page in words: a run's dataset as sentences (not JSON), counts with their plural, whole-step ticks."""

from __future__ import annotations

from guitrainer.ui.runs.chart import RunsChart
from guitrainer.ui.runs.page import dataset_lines
from guitrainer.ui.training.charts import CountAxis, TrainingCharts


def test_a_runs_dataset_is_told_in_words():
    lines = dataset_lines({
        "folders": [{"path": "/art/10_cat", "repeats": 10}],
        "regularization_folders": [{"path": "/reg/cat", "repeats": 1}],
        "resolution": 768, "bucketing": True, "batch_size": 2, "gradient_accumulation": 4,
    })
    assert lines == [
        "images: /art/10_cat (repeats 10)",
        "class images: /reg/cat (repeats 1)",
        "dataset: 768 px, batch 2, accumulating 4 batches per step, aspect buckets",
    ]
    assert not any("{" in line or '"' in line for line in lines)
    assert dataset_lines({}) == []


def test_step_axes_have_no_half_step_ticks(qtbot):
    charts, runs = TrainingCharts(), RunsChart()
    qtbot.addWidget(charts)
    qtbot.addWidget(runs)
    axes = [runs.plot.getAxis("bottom")]
    axes += [w.getPlotItem().getAxis("bottom") for w in charts.findChildren(type(runs.plot_widget))]
    assert len(axes) > 1 and all(isinstance(a, CountAxis) for a in axes)
    for axis in axes:
        for lo, hi in ((0, 3), (0, 1), (5, 6.5), (0, 20_000)):
            ticks = [v for _spacing, values in axis.tickValues(lo, hi, 400) for v in values]
            assert ticks and all(float(v).is_integer() for v in ticks), (lo, hi, ticks)
