"""The network type on the Training page: a combo box built from the setting, changed by keyboard."""

from __future__ import annotations

from helpers import demo_cfg, fake_device
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QComboBox

from guitrainer.core.device import hardware
from guitrainer.ui.binding import ConfigBinding
from guitrainer.ui.training.page import TrainingPage


def test_network_type_is_chosen_with_the_keyboard(qtbot, tmp_path, monkeypatch):
    monkeypatch.setattr(hardware, "cached", lambda: fake_device("cpu"))
    binding = ConfigBinding(demo_cfg(tmp_path))
    page = TrainingPage(binding)
    qtbot.addWidget(page)
    page.show()
    qtbot.waitExposed(page)
    combo = page.findChild(QComboBox, "edit_network_type")
    assert combo is not None
    labels = [combo.itemText(i) for i in range(combo.count())]
    assert labels == ["LoRA", "LoCon", "LoHa", "LoKr", "DoRA"]
    assert "ComfyUI" in combo.toolTip()
    combo.setFocus()
    qtbot.keyClick(combo, Qt.Key.Key_Down)
    assert binding.config.network.type == "locon"
    qtbot.keyClick(combo, Qt.Key.Key_End)
    assert binding.config.network.type == "dora"
    # settings of other types are greyed out, saying when they apply; LoKr's factor comes alive with LoKr
    from guitrainer.ui.binding import bound_editors

    editors = bound_editors(page)
    factor, conv = editors["network.lokr_factor"], editors["network.conv_rank"]
    assert not factor.isEnabled() and "Only for Network type = LoKr" in factor.toolTip()
    assert conv.isEnabled()  # DoRA has convolutions
    qtbot.keyClick(combo, Qt.Key.Key_Home)  # LoRA: no convolutions
    assert binding.config.network.type == "lora" and not conv.isEnabled()
    assert "LoCon / LoHa / LoKr / DoRA" in conv.toolTip()
    for _ in range(3):
        qtbot.keyClick(combo, Qt.Key.Key_Down)
    assert binding.config.network.type == "lokr" and factor.isEnabled() and not factor.toolTip().startswith("Only")
