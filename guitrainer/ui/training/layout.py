"""The Training page's run area: the settings column beside the charts over the Log / Samples / Numerics tabs.

The heights here come from fixed minimums and stretch, never from what the contents would like: a Numerics
tab added when a run starts, a longer log or the GradScaler chart appearing must not move the charts. Only the
user's choice of a tab that needs height (Numerics, :func:`make_room_for`) changes them, and back.
"""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QFrame, QScrollArea, QSizePolicy, QSplitter, QTabWidget, QVBoxLayout, QWidget

from guitrainer.config.families import FAMILY_LABELS, FLOW_FAMILIES
from guitrainer.ui.binding import ConfigBinding, build_form
from guitrainer.ui.dataset.regularization_panel import prior_loss_box

#: the charts' area never gets less: the smoothing bar, the loss chart and a small chart with its note, whole
CHARTS_MIN_HEIGHT = 290
#: the tabs under the charts (Log, Samples, Numerics): their contents never ask for more (the splitter can)
TABS_MIN_HEIGHT = 96
#: a tab that needs height (Numerics: a readout, a legend and two plots with readable axes) gets at least this
TALL_TAB_MIN_HEIGHT = 300
SETTINGS_SECTIONS = (
    ("network", "LoRA network"), ("optimizer", "Optimizer"), ("schedule", "Schedule"),
    ("loss", "Loss weighting and timesteps"), ("noise", "Noise"),
    ("flow", f"Flow matching ({', '.join(FAMILY_LABELS[f] for f in FLOW_FAMILIES)})"),
    ("validation", "Validation loss"),
)  # fmt: skip


def settings_column(binding: ConfigBinding) -> tuple[QWidget, QScrollArea]:
    """The run's settings, one group per section, in a column that scrolls by itself (the page does not)."""
    panel = QWidget()
    sl = QVBoxLayout(panel)
    sl.setContentsMargins(0, 0, 6, 0)
    for section, title in SETTINGS_SECTIONS:
        sl.addWidget(build_form(binding, section, title=title))
    sl.addWidget(prior_loss_box(binding))
    sl.addWidget(build_form(binding, "sampling", title="Samples"))
    sl.addStretch(1)
    scroll = QScrollArea()
    scroll.setObjectName("training_settings")
    scroll.setWidgetResizable(True)
    scroll.setFrameShape(QFrame.Shape.NoFrame)
    scroll.setWidget(panel)
    scroll.setMinimumWidth(300)
    scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
    return panel, scroll


def run_split(settings: QWidget, charts_host: QWidget, tabs: QTabWidget) -> QSplitter:
    """Settings on the left; on the right the charts over the tabs, with fixed minimums (see the module)."""
    charts_host.setMinimumHeight(CHARTS_MIN_HEIGHT)
    tabs.setMinimumHeight(TABS_MIN_HEIGHT)  # set explicitly: the splitter then ignores the tabs' size hints
    right = QSplitter(Qt.Orientation.Vertical)
    right.setObjectName("charts_split")
    right.addWidget(charts_host)
    right.addWidget(tabs)
    right.setStretchFactor(0, 3)
    right.setStretchFactor(1, 1)
    right.setSizes([480, 170])
    right.setChildrenCollapsible(False)

    split = QSplitter(Qt.Orientation.Horizontal)
    split.setObjectName("training_split")
    split.addWidget(settings)
    split.addWidget(right)
    split.setStretchFactor(0, 0)
    split.setStretchFactor(1, 1)
    split.setSizes([340, 900])
    split.setChildrenCollapsible(False)
    split.setMinimumHeight(CHARTS_MIN_HEIGHT + TABS_MIN_HEIGHT + right.handleWidth())  # the page scrolls only below
    # Ignore the splitter's (huge) size hint: it fills the page, and scrolls only below its minimum
    split.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Ignored)
    return split


def make_room_for(tabs: QTabWidget, tall: QWidget) -> None:
    """While ``tall`` (the Numerics tab, the Samples tab) is the current tab of ``tabs``, give it the height the charts above can
    spare: everything down to the charts' minimum when that leaves it :data:`TALL_TAB_MIN_HEIGHT` (1920×1080), else
    the charts' height too (1366×768 has room for only one of them: the charts are hidden, their place taken, and
    come back with the Log or Samples tab). The heights the user had come back when another tab is chosen.
    """
    saved: list[list[int]] = []

    def on_tab(index: int) -> None:
        split = tabs.parentWidget()
        if not isinstance(split, QSplitter) or split.count() != 2:
            return
        charts = split.widget(0)
        if tabs.widget(index) is tall:
            if saved:
                return
            saved.append(split.sizes())
            total = sum(saved[0])
            if total - CHARTS_MIN_HEIGHT >= TALL_TAB_MIN_HEIGHT:
                split.setSizes([CHARTS_MIN_HEIGHT, total - CHARTS_MIN_HEIGHT])
            else:
                charts.hide()
        elif saved:
            charts.show()
            split.setSizes(saved.pop())

    tabs.currentChanged.connect(on_tab)


def samples_split(before_after: QWidget, gallery: QWidget) -> QSplitter:
    """The Samples tab: each prompt's first and latest picture side by side (scrolling), over every sample."""
    scroll = QScrollArea()
    scroll.setObjectName("before_after_scroll")
    scroll.setWidgetResizable(True)
    scroll.setFrameShape(QFrame.Shape.NoFrame)
    scroll.setWidget(before_after)
    split = QSplitter(Qt.Orientation.Vertical)
    split.setObjectName("samples_split")
    split.setChildrenCollapsible(False)
    split.addWidget(scroll)
    split.addWidget(gallery)
    split.setStretchFactor(0, 3)
    split.setStretchFactor(1, 1)
    return split

