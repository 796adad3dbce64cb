"""What each published build runs on: PyTorch's CUDA and ROCm wheels, bitsandbytes' ROCm kernels; each table
cites its source, and the install hints are built from them.

Pure Python: no torch. The probe (:mod:`guitrainer.core.device.hardware`) reports what the installed build has
(``torch.cuda.get_arch_list()``); this module says which *other* build has what a card needs, and the pip command
that really installs it.

**Why an exact pin.** pip compares local version labels (PEP 440, "Local version identifiers"): ``2.13.0+cu130``
sorts above ``2.13.0+cu126``, so ``pip install --upgrade torch --index-url …/cu126`` over an installed
``2.13.0+cu130`` answers "Requirement already satisfied" and changes nothing; ``torch==2.13.0`` without the label
matches any build of 2.13.0. ``"torch==2.13.0+cu126"`` matches only that build, so pip replaces whatever else is
installed (checked with pip 23.2 and 26.3 against local indexes: /tmp/research/devices.md §1.3).
``--index-url``, never ``--extra-index-url``: with two indexes pip takes the higher label again.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from guitrainer.core.device.gpu_traits import amd_gfx_base

#: the PyTorch the app installs and is tested with: the Makefile's ``TORCH_SPEC`` (``torch==2.13.0``) and the
#: README's set-up; ``tests/test_builds.py`` checks that they agree
TORCH_TARGET = "2.13.0"
DOWNLOAD = "https://download.pytorch.org/whl"

# --------------------------------------------------------------------------- CUDA wheels

#: ``torch.cuda.get_arch_list()`` of each CUDA variant PyTorch publishes, per release and platform.
#: Source: pytorch/pytorch RELEASE.md "PyTorch CUDA Support Matrix" for release 2.12 (PR #182849) and 2.13 / 2.14
#: ("the same", PR #197555; PR #187075 lists 2.13's CUDA 12.6 / 13.0 / 13.2): Linux x86 and Windows 12.6.3 =
#: Maxwell(5.0), Pascal(6.0), Volta(7.0), Turing(7.5), Ampere(8.0, 8.6), Hopper(9.0); 13.0.2 and 13.2.1 = Turing(7.5),
#: Ampere(8.0, 8.6), Hopper(9.0), Blackwell(10.0, 12.0+PTX, PTX on Linux only); aarch64 12.6.3 = 8.0, 9.0 and 13.x =
#: 8.0, 9.0, 10.0, 11.0, 12.0+PTX. No cu128 from 2.12 on (RFC #178665 "Deprecate CUDA 12.8"; FBGEMM PR #5976:
#: "torch 2.13 ships no cu128"). The x86 cu126 list as torch prints it: 2.11.0+cu126 in pytorch/pytorch#182250.
_CU126 = ("sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90")
_CU13X = ("sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120", "compute_120")
_CU126_ARM = ("sm_80", "sm_90")
_CU13X_ARM = ("sm_80", "sm_90", "sm_100", "sm_110", "sm_120", "compute_120")
_X86 = {"cu126": _CU126, "cu130": _CU13X, "cu132": _CU13X}
_ARM = {"cu126": _CU126_ARM, "cu130": _CU13X_ARM, "cu132": _CU13X_ARM}
CUDA_BUILDS: dict[tuple[str, str], dict[str, tuple[str, ...]]] = {
    (release, machine): table for release in ("2.12", "2.13", "2.14") for machine, table in (("x86_64", _X86), ("aarch64", _ARM))
}
#: the variant each release publishes to PyPI and calls stable (RFC #178665 for 2.12, PR #187075 for 2.13: CUDA 13.0;
#: RFC #190355 for 2.14: CUDA 13.2), tried first; the legacy cu126 is the one with pre-Turing cards
STABLE_VARIANT = {"2.12": "cu130", "2.13": "cu130", "2.14": "cu132"}
#: the lowest NVIDIA driver each variant runs on. Source: NVIDIA CUDA Compatibility guide, minor-version
#: compatibility ("CUDA 12.x: >= 525", "CUDA 13.x: >= 580"); CUDA 13.0 release notes (Linux >= 580.65.06).
DRIVER_MINIMUM = {"cu126": "525", "cu130": "580", "cu132": "580"}
#: where PyTorch announces which CUDA builds a release publishes and which it drops
ANNOUNCED_AT = ("pytorch/pytorch RELEASE.md \"PyTorch CUDA Support Matrix\" and the per-release CUDA RFCs "
                "(github.com/pytorch/pytorch/issues, label \"module: binaries\")")
#: the end of the cu126 builds, the last ones for Maxwell, Pascal and Volta: RFC pytorch/pytorch#190385 "CUDA support
#: matrix for Release 2.15 — deprecate CUDA 12.6 (drops Maxwell / Pascal / Volta)"
CU126_END = "PyTorch plans to publish no cu126 builds from 2.15 on (RFC pytorch/pytorch#190385), so 2.14 would be the last for this card"

#: compute capabilities that only NVIDIA's Jetson modules have (NVIDIA "CUDA GPUs" list: Nano / TX1 5.3, TX2 6.2,
#: Xavier 7.2, Orin 8.7). Their PyTorch comes from NVIDIA's JetPack builds: download.pytorch.org's aarch64 wheels are
#: server (SBSA) builds that do not run on the L4T runtime (bitsandbytes installation docs, 0.50.0, Jetson note).
JETSON_CAPABILITIES = {(5, 3): "Jetson Nano / TX1", (6, 2): "Jetson TX2", (7, 2): "Jetson Xavier", (8, 7): "Jetson Orin"}
#: NVIDIA's Jetson AI Lab index for JetPack 6 (CUDA 12.6), the one bitsandbytes' docs point Jetson users to
JETSON_INDEX = "https://pypi.jetson-ai-lab.io/jp6/cu126"


def arch_supported(capability: tuple[int, int], arch_list: tuple[str, ...] | list[str]) -> bool:
    """Whether a build with ``arch_list`` (``sm_86``, ``compute_90``...) runs on ``capability``.

    A cubin runs on the same major version with an equal or higher minor (a GTX 1080, 6.1, runs ``sm_60``; an
    RTX 4090, 8.9, runs ``sm_86``); PTX (``compute_XY``) is JIT-compiled for any equal or newer GPU; arch-specific
    variants (``sm_90a``) match exactly. Source: NVIDIA CUDA C++ Programming Guide, "Binary Compatibility".
    """
    major, minor = capability
    for arch in arch_list:
        m = re.fullmatch(r"(sm|compute)_(\d+)(\d)([a-z]?)", arch.strip())
        if not m:
            continue
        kind, a_major, a_minor, suffix = m.group(1), int(m.group(2)), int(m.group(3)), m.group(4)
        if suffix:
            if (a_major, a_minor) == capability:
                return True
            continue
        if kind == "sm" and a_major == major and a_minor <= minor:
            return True
        if kind == "compute" and (a_major, a_minor) <= (major, minor):
            return True
    return False


def release_of(version: str) -> str:
    """``"2.13.0+cu130"`` -> ``"2.13"``."""
    m = re.match(r"(\d+)\.(\d+)", version or "")
    return f"{m.group(1)}.{m.group(2)}" if m else ""


def arm_machine(machine: str) -> bool:
    return machine.lower() in ("aarch64", "arm64")


def cuda_variants(capability: tuple[int, int], release: str = "", machine: str = "x86_64") -> list[str]:
    """The CUDA variants of ``release`` whose published arch list runs ``capability``, stable first."""
    table = CUDA_BUILDS.get((release or release_of(TORCH_TARGET), "aarch64" if arm_machine(machine) else "x86_64"), {})
    stable = STABLE_VARIANT.get(release or release_of(TORCH_TARGET), "")
    ok = [v for v, archs in table.items() if arch_supported(capability, archs)]
    return sorted(ok, key=lambda v: (v != stable, v))


def installed_variant(torch_version: str) -> str:
    """The build label of a torch version: ``"2.13.0+cu130"`` -> ``"cu130"``, ``"2.13.0"`` -> ``""``."""
    return torch_version.partition("+")[2]


@dataclass(frozen=True)
class InstallHint:
    """How to install a PyTorch that runs on this device.

    Attributes:
        command: one pip command (or two joined by ``&&``) that replaces the installed torch, for "Copy command".
        index_url: the package index it installs from ("" when there is no build for the card).
        variant: the build label it installs (``cu126``, ``cu130``; "" for Jetson and none).
        why: one or two sentences: which build has the card's architecture, the driver it needs, when its end is
            announced.
    """

    command: str
    index_url: str
    variant: str
    why: str


def pin_command(variant: str, version: str = TORCH_TARGET) -> str:
    """``python -m pip install "torch==2.13.0+cu126" --index-url https://download.pytorch.org/whl/cu126``."""
    return f'python -m pip install "torch=={version}+{variant}" --index-url {DOWNLOAD}/{variant}'


def cuda_install_hint(capability: tuple[int, int] | None, *, machine: str = "x86_64", version: str = TORCH_TARGET) -> InstallHint:
    """The PyTorch build to install for an NVIDIA GPU of ``capability`` (None: not known, e.g. under a CPU-only torch).

    The index is the one whose published arch list (:data:`CUDA_BUILDS`) runs the card, the stable one first; the
    command pins the exact build (``torch==2.13.0+cu126``), which pip installs over any other build of the same
    version. Jetson modules get NVIDIA's JetPack index, never an x86 one.
    """
    release = release_of(version)
    if capability in JETSON_CAPABILITIES:
        name = JETSON_CAPABILITIES[capability]  # type: ignore[index]
        return InstallHint(
            f"python -m pip uninstall -y torch && python -m pip install torch --index-url {JETSON_INDEX}",
            JETSON_INDEX,
            "",
            f"A {name} needs NVIDIA's JetPack build of PyTorch: the download.pytorch.org wheels do not run on "
            "Jetson's L4T runtime. The command is for JetPack 6; for other JetPack versions see NVIDIA's "
            "\"PyTorch for Jetson\" page. The old torch is removed first, since the JetPack build may carry "
            "another version label.",
        )
    if capability is None:
        stable = STABLE_VARIANT.get(release, "cu130")
        return InstallHint(
            pin_command(stable, version),
            f"{DOWNLOAD}/{stable}",
            stable,
            f"For Turing (GTX 16, RTX 20) and newer cards: {stable} (NVIDIA driver {DRIVER_MINIMUM.get(stable, '580')} "
            f"or newer). For GTX 10-series and older (Maxwell, Pascal, Volta) use cu126 instead: {pin_command('cu126', version)}.",
        )
    variants = cuda_variants(capability, release, machine)
    cap = f"{capability[0]}.{capability[1]}"
    if not variants:
        return InstallHint(
            "", "", "",
            f"No PyTorch {release} build runs on compute capability {cap} (checked against the published arch lists; "
            f"{ANNOUNCED_AT} says which cards each release supports).",
        )
    variant = variants[0]
    archs = CUDA_BUILDS[(release, "aarch64" if arm_machine(machine) else "x86_64")][variant]
    matching = [a for a in archs if arch_supported(capability, (a,))]
    runs = ([a for a in matching if a.startswith("sm_")] or matching)[-1]  # the cubin it runs: sm_86 for 8.9
    why = (f"The {variant} build of PyTorch {version} has {runs}, which runs on compute capability {cap}; it needs "
           f"NVIDIA driver {DRIVER_MINIMUM[variant]} or newer.")
    if variant == "cu126":
        why += f" {CU126_END}; such ends are announced in {ANNOUNCED_AT}."
    elif "cu126" in variants:
        why += f" With an older driver use cu126 instead (driver {DRIVER_MINIMUM['cu126']}+): {pin_command('cu126', version)}."
    return InstallHint(pin_command(variant, version), f"{DOWNLOAD}/{variant}", variant, why)


# --------------------------------------------------------------------------- ROCm wheels

#: ``PYTORCH_ROCM_ARCH`` of PyTorch's own ROCm wheels (``.ci/docker/manywheel/build.sh``; the branch table in
#: unslothai/unsloth PR #9829, read from the release scripts): no gfx1031-gfx1036 in any release, and gfx1103 only
#: on main after the 2.13 branch (PR #179653, not counted here). What ``torch.cuda.get_arch_list()`` returns on them.
ROCM_WHEEL_ARCHS = ("gfx900", "gfx906", "gfx908", "gfx90a", "gfx942", "gfx950", "gfx1030", "gfx1100", "gfx1101",
                    "gfx1102", "gfx1150", "gfx1151", "gfx1200", "gfx1201")
#: chips that run another chip's code objects when ``HSA_OVERRIDE_GFX_VERSION`` names it: the other RDNA2 chips
#: load gfx1030 code with ``10.3.0`` (ROCm/rocALUTION#197 on gfx1031: "adding HSA_OVERRIDE_GFX_VERSION=10.3.0 fixes
#: the problem"). Not offered: gfx1033 (Steam Deck; wrong results even with native builds, unsloth PR #8412) and
#: gfx1103 -> 11.0.0 ("page faults and hard hangs", pytorch/pytorch PR #179653).
HSA_OVERRIDES = {g: ("gfx1030", "10.3.0") for g in ("gfx1031", "gfx1032", "gfx1034", "gfx1035", "gfx1036")}


def rocm_arch_supported(gfx: str, arch_list: tuple[str, ...] | list[str]) -> bool | None:
    """Whether a ROCm build with ``arch_list`` (gfx names) has code for ``gfx`` (None: the list is unknown).

    ROCm code objects are per ISA: unlike CUDA there is no "same major runs it" rule, and a missing target stops the
    first kernel with "HIP error: invalid device function" (pytorch/pytorch#132570: RX 6700 XT, gfx1031).
    """
    if not arch_list or not gfx:
        return None
    return amd_gfx_base(gfx) in {amd_gfx_base(a) for a in arch_list}


def hsa_override(gfx: str, arch_list: tuple[str, ...] | list[str]) -> str:
    """The ``HSA_OVERRIDE_GFX_VERSION`` value that lets ``gfx`` run this build's code ("" when none applies)."""
    base, value = HSA_OVERRIDES.get(amd_gfx_base(gfx), ("", ""))
    return value if base and base in {amd_gfx_base(a) for a in arch_list} else ""


# --------------------------------------------------------------------------- bitsandbytes on ROCm

_CDNA = ("gfx90a", "gfx942")
_RDNA3_4 = ("gfx1100", "gfx1101", "gfx1102", "gfx1103", "gfx1150", "gfx1151", "gfx1152", "gfx1153", "gfx1200", "gfx1201")
#: the gfx targets of each ROCm library in bitsandbytes' PyPI wheels, by release series and ROCm version.
#: Source: bitsandbytes docs/source/installation.mdx, "AMD ROCm - Installation from PyPI", at tags 0.49.2 and 0.50.0
#: (0.50.1 adds gfx1250 to the 7.14 library). gfx906 (MI50) and gfx900 are in none of them.
BNB_ROCM_TARGETS: dict[tuple[int, int], dict[tuple[int, int], tuple[str, ...]]] = {
    (0, 49): {
        (6, 2): _CDNA + ("gfx1100", "gfx1101"),
        (6, 3): _CDNA + ("gfx1100", "gfx1101"),
        (6, 4): _CDNA + ("gfx1100", "gfx1101", "gfx1150", "gfx1151", "gfx1200", "gfx1201"),
        **{v: _CDNA + ("gfx950", "gfx1100", "gfx1101", "gfx1150", "gfx1151", "gfx1200", "gfx1201")
           for v in ((7, 0), (7, 1), (7, 2))},
    },
    (0, 50): {
        (6, 4): _CDNA + _RDNA3_4,
        **{v: _CDNA + ("gfx950",) + _RDNA3_4 for v in ((7, 0), (7, 1), (7, 2))},
        (7, 14): ("gfx908",) + _CDNA + ("gfx950",) + tuple(f"gfx103{i}" for i in range(7)) + _RDNA3_4,
    },
}


def _pair(version: str | None) -> tuple[int, int] | None:
    m = re.match(r"(\d+)\.(\d+)", version or "")
    return (int(m.group(1)), int(m.group(2))) if m else None


def bnb_rocm_library(bnb_version: str, hip_version: str | None) -> tuple[int, int] | None:
    """The ROCm library bitsandbytes loads for this torch: the highest packaged version not above the HIP runtime,
    same major, else the lowest above it (bitsandbytes ``cextension.py`` at 0.50.0). None when unknown."""
    series = _series(bnb_version)
    runtime = _pair(hip_version)
    if series is None or runtime is None:
        return None
    packaged = sorted(v for v in BNB_ROCM_TARGETS[series] if v[0] == runtime[0])
    below = [v for v in packaged if v <= runtime]
    above = [v for v in packaged if v > runtime]
    return below[-1] if below else (above[0] if above else None)


def _series(bnb_version: str) -> tuple[int, int] | None:
    """The :data:`BNB_ROCM_TARGETS` series a bitsandbytes version belongs to; newer releases read as 0.50's
    (their published lists only ever grew), older than 0.49 as None (no ROCm in the PyPI wheels)."""
    v = _pair(bnb_version)
    if v is None or v < (0, 49):
        return None
    return max(s for s in BNB_ROCM_TARGETS if s <= v)


def bnb_rocm_targets(bnb_version: str, hip_version: str | None) -> tuple[tuple[int, int] | None, tuple[str, ...]]:
    """(the ROCm library bitsandbytes loads, its gfx targets); ``(None, ())`` when not known."""
    series, library = _series(bnb_version), bnb_rocm_library(bnb_version, hip_version)
    if series is None or library is None:
        return None, ()
    return library, BNB_ROCM_TARGETS[series][library]
