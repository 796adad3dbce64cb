"""Install hints that work (issue 28): the index named publishes a build with the card's architecture for the torch
the app needs, and the command really replaces the installed build; the README and Makefile say the same."""

from __future__ import annotations

import dataclasses
import re
import shlex
from pathlib import Path

import pytest
from helpers import config_with, fake_device
from packaging.requirements import Requirement
from packaging.version import Version

from guitrainer.core.device import builds
from guitrainer.core.precision.advisor import advise

REPO = Path(__file__).resolve().parent.parent

#: PyTorch's published support matrix for releases 2.12-2.14, Linux x86 and Windows, as RELEASE.md words it
#: (pytorch/pytorch PR #182849 "[release 2.12] Update PyTorch CUDA Support Matrix"; PR #197555: 2.13 "is the same"
#: as 2.14). No cu128 after 2.11 (RFC #178665 "Deprecate CUDA 12.8").
PUBLISHED = {
    "cu126": "Maxwell(5.0), Pascal(6.0), Volta(7.0), Turing(7.5), Ampere(8.0, 8.6), Hopper(9.0)",
    "cu130": "Turing(7.5), Ampere(8.0, 8.6), Hopper(9.0), Blackwell(10.0, 12.0+PTX)",
    "cu132": "Turing(7.5), Ampere(8.0, 8.6), Hopper(9.0), Blackwell(10.0, 12.0+PTX)",
}


def _published_runs(variant: str, capability: tuple[int, int]) -> bool:
    """Whether the published build has code this card runs: a cubin of the same major and a minor not above the
    card's (NVIDIA CUDA Programming Guide, "Binary Compatibility": a GTX 1080, 6.1, runs sm_60 code)."""
    archs = [(int(a), int(b)) for a, b in re.findall(r"(\d+)\.(\d+)", PUBLISHED[variant])]
    return any(major == capability[0] and minor <= capability[1] for major, minor in archs)


def _command(text: str) -> tuple[Requirement, str, list[str]]:
    """(the torch requirement, the index URL, every token) of a ``python -m pip install`` command."""
    tokens = shlex.split(text)
    assert tokens[:4] == ["python", "-m", "pip", "install"], text
    (req,) = [Requirement(t) for t in tokens[4:] if t.startswith("torch")]
    return req, tokens[tokens.index("--index-url") + 1], tokens


# card, its compute capability (NVIDIA's CUDA GPUs list), the fake machine with the wrong build installed, that build
CARDS = [
    ("GTX 1080", (6, 1), "gtx1080_cu130", "2.13.0+cu130"),  # cu130 has nothing below Turing
    ("V100", (7, 0), "v100_cu130", "2.13.0+cu130"),
    ("T4", (7, 5), "t4_cpu_torch", "2.13.0+cpu"),  # the CPU build: what PyPI gives on Windows
    ("RTX 3060", (8, 6), "rtx3060_cpu_torch", "2.13.0+cpu"),
    ("RTX 4090", (8, 9), "rtx4090_cpu_torch", "2.13.0+cpu"),
    ("RTX 5090", (12, 0), "rtx5090_cu126", "2.13.0+cu126"),  # cu126 stops at Hopper
    ("B200", (10, 0), "b200_cu126", "2.13.0+cu126"),
]


@pytest.mark.parametrize(("card", "capability", "machine", "installed"), CARDS)
def test_the_hint_names_a_build_with_the_cards_architecture_and_replaces_the_installed_one(card, capability, machine,
                                                                                           installed):
    device = fake_device(machine)
    assert device.torch_version == installed
    (hint,) = [a for a in advise(device, config_with()) if a.code in ("torch_arch_missing", "torch_cpu_build")]
    req, index, tokens = _command(hint.suggestion_text)
    variant = index.rstrip("/").rsplit("/", 1)[1]
    assert index == f"https://download.pytorch.org/whl/{variant}"
    # the index publishes a build with code for this card, and the one installed has none (or is the CPU build)
    assert _published_runs(variant, capability), (card, variant)
    assert installed.endswith("+cpu") or not _published_runs(installed.partition("+")[2], capability)
    # the version the app needs (the Makefile's TORCH_SPEC), pinned to that build: pip installs it over any other
    # build of the same version, whether that carries its label (download.pytorch.org) or none (PyPI's metadata)
    assert req.name == "torch" and str(req.specifier) == f"=={_makefile_torch()}+{variant}"
    for already in (installed, installed.partition("+")[0]):
        assert not req.specifier.contains(Version(already)), already
    assert req.specifier.contains(Version(f"{_makefile_torch()}+{variant}"))
    assert not {"--upgrade", "-U", "--extra-index-url"} & set(tokens)
    assert "driver" in hint.message  # cu130 needs R580, cu126 R525: the hint says which


def test_why_upgrade_was_not_enough():
    """The old hint, ``pip install --upgrade torch --index-url …/cu126`` over 2.13.0+cu130, is a no-op: pip only
    upgrades to a higher version, and PEP 440 sorts the local label cu130 above cu126 (segments compare as strings)."""
    assert Version("2.13.0+cu126") < Version("2.13.0+cu130")
    assert Version("2.13.0+cu126") > Version("2.13.0")  # over a PyPI install (no label) it did switch


def test_a_card_no_build_runs_gets_no_command():
    hint = builds.cuda_install_hint((3, 7))  # Kepler: in neither published list
    assert hint.command == "" and "No PyTorch 2.13 build" in hint.why


def test_jetson_gets_nvidias_jetpack_index_never_an_x86_one():
    """download.pytorch.org's aarch64 wheels are server (SBSA) builds that do not run on Jetson's L4T runtime
    (bitsandbytes' installation docs, Jetson note); NVIDIA's Jetson AI Lab index has JetPack's."""
    orin = fake_device("jetson_orin")
    broken = dataclasses.replace(orin, gpus=(dataclasses.replace(orin.gpu, kernels_in_build=False),),
                                 arch_list=("sm_80", "sm_90"), torch_version="2.13.0+cu126")
    (a,) = [a for a in advise(broken, config_with()) if a.code == "torch_arch_missing"]
    assert "pypi.jetson-ai-lab.io/jp6/cu126" in a.suggestion_text and "download.pytorch.org" not in a.suggestion_text
    assert "Jetson Orin" in a.message and "pip uninstall -y torch" in a.suggestion_text
    assert orin.gpu.jetson == "Jetson Orin" and "Jetson Orin" in orin.summary()


def test_the_build_table_is_the_published_one():
    """The code's table against the published words: every architecture RELEASE.md lists is in the arch list, and
    nothing else (PTX aside)."""
    for variant, words in PUBLISHED.items():
        listed = {f"sm_{a}{b}" for a, b in re.findall(r"(\d+)\.(\d+)", words)}
        table = builds.CUDA_BUILDS[("2.13", "x86_64")][variant]
        assert {a for a in table if a.startswith("sm_")} == listed, variant
        assert ("compute_120" in table) == ("+PTX" in words)


def _makefile_torch() -> str:
    m = re.search(r"^TORCH_SPEC\s*\?=\s*torch==(\S+)", (REPO / "Makefile").read_text(encoding="utf-8"), re.M)
    assert m, "Makefile has no TORCH_SPEC"
    return m.group(1)


def test_readme_and_makefile_name_builds_that_exist_for_the_torch_they_install():
    assert _makefile_torch() == builds.TORCH_TARGET
    release = builds.release_of(builds.TORCH_TARGET)
    published = set(builds.CUDA_BUILDS[(release, "x86_64")])
    for name in ("README.md", "Makefile"):
        text = (REPO / name).read_text(encoding="utf-8")
        named = set(re.findall(r"download\.pytorch\.org/whl/(cu\d+)", text))
        assert named and named <= published, (name, named)
        assert "--upgrade torch" not in text
