"""The precision rules: (DeviceInfo, TrainingConfig) -> Advice, one function per fact, each naming its source.

The device facts themselves (which GPU has bf16, tensor cores, fast fp16) are decided in
:mod:`guitrainer.core.device.gpu_traits` and :mod:`guitrainer.core.device.info`; here they become advice a
person can act on. :func:`guitrainer.core.precision.advisor.advise` runs :data:`RULES`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from guitrainer.base.units import format_bytes
from guitrainer.config import TrainingConfig
from guitrainer.config.precision_choices import choice_label
from guitrainer.core.device.builds import (
    BNB_ROCM_TARGETS,
    TORCH_TARGET,
    bnb_rocm_targets,
    cuda_install_hint,
    hsa_override,
)
from guitrainer.core.device.gpu_choice import gpu_missing_message
from guitrainer.core.device.info import DeviceInfo, GpuInfo, version_tuple
from guitrainer.core.memory.estimate import sdxl_vae_fp32_cost
from guitrainer.core.memory.specs import config_family
from guitrainer.core.model.vae_choice import (
    FP16_FIX_DOWNLOAD,
    FP16_FIX_REPO,
    find_fp16_safe_vae,
    hub_pending,
    vae_fp16_safe,
)
from guitrainer.core.precision.advice import Advice, Level
from guitrainer.core.precision.family_rules import rule_family_precision

TOPIC = "precision.training"
#: the fp16-fixed SDXL VAE: the same decoder, rescaled so its activations fit fp16
SDXL_FP16_VAE = FP16_FIX_REPO


# --------------------------------------------------------------------------- what each device does best

#: model families small enough that a CPU trains them fastest in fp32 whatever bf16 hardware it has. Measured by
#: the precision lab (bench/precision_lab.py; bench/RESULTS.md, "Precision lab"): the demo model (64 px) ran fp32
#: 0.069 s/step against 0.127 for bf16 AMP on an AMD EPYC with AVX512-BF16, and 0.354 against 0.558 on a Xeon with
#: AMX (issue 27); bench's mid-size UNet (128/256/512 channels, 256 px, the "sd15" family) ran bf16 AMP at 0.931
#: against fp32's 1.591 on the same EPYC. bf16 hardware pays where the matrix multiplies are large.
CPU_SMALL_FAMILIES = frozenset({"demo"})
#: the same measurements, for the messages
CPU_DEMO_MEASURED = "the demo model: fp32 0.069 s/step against bf16 AMP's 0.127 on an AVX512-BF16 EPYC"
CPU_MID_MEASURED = "bench's mid-size UNet: bf16 AMP 1.7x faster than fp32 on an AVX512-BF16 EPYC"


def cpu_bf16_hardware(device: DeviceInfo) -> str:
    """The x86 bf16 matrix instructions the CPU has, in words ("AMX (bf16 matrix tiles)", "AVX512-BF16"), or "".

    Both run bf16 dot products in hardware (Intel ISA Extensions reference: ``TDPBF16PS``, ``VDPBF16PS``) and
    PyTorch's CPU autocast reaches them through oneDNN. Arm's BF16 extension is not counted: no measurement here
    shows what PyTorch's CPU training gains from it (:func:`_cpu_precision_advice` says so).
    """
    cpu = device.cpu
    if cpu.amx:
        return "AMX (bf16 matrix tiles)"
    if "avx512_bf16" in cpu.bf16_flags:
        return "AVX512-BF16"
    return ""


def recommended_training(device: DeviceInfo | None, family: str = "") -> str:
    """The training precision this device does best, by the rules (a measurement outranks it:
    :func:`guitrainer.core.precision.measurements.recommended_here`).

    GPU: bf16 where it is native (and as fast as fp16: not on an MI100); fp32 on Turing chips without tensor cores (fp16 NaNs, black images); fp16
    where fp16 runs at full rate (tensor cores, P100, AMD's packed math); else fp32 (consumer Pascal, Maxwell).
    Apple: fp16 AMP where the GradScaler works (torch 2.8+), else fp32 (bf16 saves memory there, not time). CPU:
    bf16 with x86 bf16 matrix instructions (AVX512-BF16, AMX) except for the tiny demo model
    (:data:`CPU_SMALL_FAMILIES`), else fp32. ``family`` is the model family trained ("" when not known: taken
    as a full-size model).
    """
    if device is None:
        return "fp16"
    gpu = device.gpu
    if gpu is not None:
        if gpu.bf16_native and gpu.bf16_full_rate:
            return "bf16"
        if gpu.turing_without_tensor_cores:
            return "fp32"
        return "fp16" if gpu.fp16_fast else "fp32"
    if device.kind == "mps":
        mps = device.mps
        return "fp16" if mps is not None and mps.fp16_amp else "fp32"
    if family in CPU_SMALL_FAMILIES or not cpu_bf16_hardware(device):
        return "fp32"
    return "bf16"


def training_precision_advice(device: DeviceInfo, choice: str, family: str = "") -> Iterable[Advice]:
    """What the rules say about training in ``choice`` on ``device`` (``family``: the model family, "" unknown)."""
    best = recommended_training(device, family)
    if device.gpu is not None:
        yield from _gpu_precision_advice(device.gpu, choice, best)
    elif device.kind == "mps":
        yield from _mps_precision_advice(device, choice, best)
    else:
        yield from _cpu_precision_advice(device, choice, best)


def _gpu_precision_advice(gpu: GpuInfo, choice: str, best: str) -> Iterable[Advice]:
    if choice == "bf16" and not gpu.bf16_native:
        yield _bf16_not_native(gpu)
    elif choice == "bf16" and not gpu.bf16_full_rate:
        yield Advice(
            "info",
            f"Your {gpu.name} ({gpu.arch_label}) multiplies bf16 at half its fp16 rate (AMD's MI100 specifications: "
            "92.3 against 184.6 TFLOPS), so fp16 AMP trains faster; bf16 only saves you the loss scaler.",
            {TOPIC: "fp16"},
            code="bf16_half_rate",
            topic=TOPIC,
            faster="fp16",
            basis=f"Your {gpu.name} multiplies bf16 at half its fp16 rate",
        )
    elif choice == "fp16" and gpu.turing_without_tensor_cores:
        yield Advice(
            "warning",
            f"Your {gpu.name} is a Turing chip without tensor cores (TU116/TU117: GTX 16, MX 450/550, T-series "
            "Quadro); these are known to give NaN losses or black samples in fp16. fp32 is the safe choice here "
            "(it needs more memory).",
            {TOPIC: "fp32"},
            code="fp16_gtx16",
            topic=TOPIC,
        )
    elif choice == "fp16" and not gpu.fp16_fast:
        yield Advice(
            "warning",
            f"Your {gpu.name} ({gpu.arch_label}) runs fp16 arithmetic at a small fraction of its fp32 speed, so fp16 "
            "AMP is usually slower than fp32 here. What fp16 still buys is memory: half-size weights and "
            "activations. Use fp32 unless the run does not fit.",
            {TOPIC: "fp32"},
            code="fp16_slow_pascal",
            topic=TOPIC,
            faster="fp32",
            basis=f"Your {gpu.name} runs fp16 at a small fraction of its fp32 rate",
        )
    elif choice == "fp16" and not gpu.tensor_cores:
        yield Advice(
            "info",
            f"Your {gpu.name} has no {'tensor' if gpu.vendor == 'nvidia' else 'matrix'} cores but runs fp16 at full "
            "rate: fp16 AMP saves memory and some time.",
            code="fp16_no_tensor_cores",
            topic=TOPIC,
            faster="fp16",
            basis=f"Your {gpu.name} runs fp16 at full rate",
        )
    elif choice == "fp16" and gpu.bf16_native and gpu.bf16_full_rate:
        yield Advice(
            "info",
            f"Your {gpu.name} does bf16 natively: bf16 AMP is as fast, needs no loss scaler and never overflows.",
            {TOPIC: "bf16"},
            code="bf16_better",
            topic=TOPIC,
            faster="bf16",
            basis=f"Your {gpu.name} does bf16 natively",
        )
    elif choice == "fp32" and best != "fp32":
        why = "tensor cores" if gpu.tensor_cores and gpu.vendor == "nvidia" else (
            "matrix cores" if gpu.tensor_cores else "full-rate fp16")
        yield Advice(
            "info",
            f"Your {gpu.name} has {why}: {choice_label(TOPIC, best)} is faster than fp32 and uses much less "
            "memory, with the same results in practice.",
            {TOPIC: best},
            code="fp32_slow",
            topic=TOPIC,
            faster=best,
            basis=f"Your {gpu.name} has {why}",
        )


def _bf16_not_native(gpu: GpuInfo) -> Advice:
    """bf16 on a GPU without it. NVIDIA before 8.0: an error (torch emulates it very slowly); AMD RDNA2 / Vega
    and Intel GPUs without XMX: a warning (it runs, slowly; ROCm's ``is_bf16_supported()`` even says yes)."""
    fallback = "fp16" if gpu.fp16_fast and not gpu.turing_without_tensor_cores else "fp32"
    if gpu.vendor == "nvidia":
        return Advice(
            "error",
            f"Your {gpu.name} ({gpu.arch_label}) has no bf16 hardware; bf16 needs an RTX 30-series or newer card "
            f"(8.0+). PyTorch would emulate it very slowly. {choice_label(TOPIC, fallback)} does the job here.",
            {TOPIC: fallback},
            code="bf16_not_native",
            topic=TOPIC,
        )
    if gpu.xmx_source.startswith("unknown"):
        return Advice(
            "warning",
            f"Whether your {gpu.name} has XMX matrix engines could not be told "
            f"({gpu.xmx_source.removeprefix('unknown: ')}); without them bf16 runs much slower than "
            f"{choice_label(TOPIC, fallback)}, so that is the safe choice. The precision lab measures both.",
            {TOPIC: fallback},
            code="bf16_not_native",
            topic=TOPIC,
        )
    what = "bf16 matrix cores (those start with RDNA3 and Instinct MI100)" if gpu.vendor == "amd" else "XMX matrix engines"
    return Advice(
        "warning",
        f"Your {gpu.name} ({gpu.arch_label}) has no {what}: bf16 runs, but much slower than "
        f"{choice_label(TOPIC, fallback)}, although PyTorch reports bf16 as supported.",
        {TOPIC: fallback},
        code="bf16_not_native",
        topic=TOPIC,
        faster=fallback,
        basis=f"Your {gpu.name} has no {what.split(' (')[0]}",
    )


#: Apple GPU matrix-multiply throughput in TFLOPS, fp32 / fp16 / bf16 (zzc0721/torch-performance-test-data: #191,
#: M1 Pro, torch 2.7: 4.28 / 4.75 / 2.30; #65, M4 Max, torch 2.8: 13.78 / 14.82 / 13.18): fp16 is the faster half
#: format on every chip; bf16 is emulated at about half of fp32's rate on M1 / M2 and no faster on M3 / M4
MPS_M1_TFLOPS = "an M1 Pro multiplies bf16 at 2.30 TFLOPS against 4.28 in fp32 and 4.75 in fp16"
MPS_M4_TFLOPS = "an M4 Max multiplies bf16 at 13.2 TFLOPS against 13.8 in fp32 and 14.8 in fp16"


def _mps_precision_advice(device: DeviceInfo, choice: str, best: str) -> Iterable[Advice]:
    mps = device.mps
    assert mps is not None
    chip = mps.chip or "This Mac"
    if choice == "fp16" and not mps.fp16_amp:
        yield Advice(
            "error",
            f"fp16 AMP on Apple GPUs needs PyTorch 2.8 or newer (the loss scaler it needs works on MPS from 2.8); "
            f"this is {device.torch_version}. Use {choice_label(TOPIC, best)}, or update PyTorch.",
            {TOPIC: best},
            code="mps_fp16_old_torch",
            topic=TOPIC,
        )
    elif choice == "bf16" and not mps.bf16:
        yield Advice(
            "error",
            f"bf16 on Apple GPUs needs PyTorch 2.6+ and macOS 14+; this is PyTorch {device.torch_version} on "
            f"macOS {mps.macos_version or '?'}.",
            {TOPIC: best},
            code="mps_bf16_unsupported",
            topic=TOPIC,
        )
    elif choice == "bf16" and not mps.bf16_native:
        yield Advice(
            "warning",
            f"{chip} has no bf16 hardware (Apple GPUs compute bf16 natively from M3 on): it is emulated at about half "
            f"of fp32's speed ({MPS_M1_TFLOPS}). {choice_label(TOPIC, best)} is faster.",
            {TOPIC: best},
            code="mps_bf16_emulated",
            topic=TOPIC,
            faster=best,
            basis=f"{chip} has no bf16 hardware",
        )
    elif choice == "bf16":
        yield Advice(
            "info",
            f"{chip} computes bf16 in hardware, which saves memory like fp16 but, in published figures, no time: "
            f"{MPS_M4_TFLOPS} (torch 2.8). The precision lab (\"Measure on this machine…\") measures it on this Mac.",
            {TOPIC: best} if best != "bf16" else {},
            code="mps_bf16_memory_only",
            topic=TOPIC,
            faster=best,
            basis=f"{chip} computes bf16 in hardware",
        )
    elif choice == "fp32" and best != "fp32":
        yield Advice(
            "info",
            f"{choice_label(TOPIC, best)} is faster on {chip} and uses less memory ({MPS_M4_TFLOPS}; "
            f"{MPS_M1_TFLOPS}).",
            {TOPIC: best},
            code="fp32_slow",
            topic=TOPIC,
            faster=best,
            basis="Apple GPUs multiply fp16 faster than fp32",
        )


def _cpu_precision_advice(device: DeviceInfo, choice: str, best: str) -> Iterable[Advice]:
    """CPU advice. What the rules know: bf16 matrix instructions (AVX512-BF16, AMX) make bf16 faster on models with
    large layers and slower on the tiny demo model (:data:`CPU_SMALL_FAMILIES`, measured; ``best`` already says
    which); AMX-FP16 (Granite Rapids) runs fp16 matrix multiplies in hardware, which other CPUs compute slowly;
    Arm's BF16 extension is not measured here."""
    cpu = device.cpu
    hw = cpu_bf16_hardware(device)
    if choice == "fp16" and cpu.amx_fp16:
        yield Advice(
            "info",
            "This CPU has AMX-FP16 (Granite Rapids and newer), so fp16 matrix multiplies run in hardware as bf16's "
            f"do on AMX; {choice_label(TOPIC, best)} needs no loss scaler and is what the rules pick. Whether fp16 is "
            "faster for your model, the precision lab (\"Measure on this machine…\") measures.",
            {TOPIC: best},
            code="fp16_on_cpu_amx_fp16",
            topic=TOPIC,
        )
    elif choice == "fp16":
        yield Advice(
            "warning",
            "fp16 on the CPU works but is slow: without AMX-FP16 (Granite Rapids) a CPU has no fast fp16 matrix math "
            "(the demo model measured fp16 AMP at 0.279 s/step against fp32's 0.069 on an AVX512-BF16 EPYC). "
            f"{choice_label(TOPIC, best)} is faster here.",
            {TOPIC: best},
            code="fp16_on_cpu",
            topic=TOPIC,
            faster=best,
            basis=f"This CPU has {hw}, which makes bf16 AMP the rules' choice" if best == "bf16"
            else "This CPU has no fast fp16 matrix math",
        )
    elif choice == "bf16" and best == "bf16":
        return
    elif choice == "bf16" and hw:
        yield Advice(
            "info",
            f"This CPU has {hw}, but on a model this small bf16 AMP is slower than fp32: the conversions cost more "
            f"than the bf16 hardware saves ({CPU_DEMO_MEASURED}; 0.558 against 0.354 on a Xeon with AMX). It pays on "
            f"larger models ({CPU_MID_MEASURED}).",
            {TOPIC: "fp32"},
            code="bf16_on_cpu_small_model",
            topic=TOPIC,
            faster="fp32",
            basis=f"This CPU has {hw}, but the model is small",
        )
    elif choice == "bf16" and cpu.arm_bf16:
        yield Advice(
            "info",
            "This Arm CPU has the BF16 instructions (BFDOT / BFMMLA), but no measurement here shows how much PyTorch's "
            "CPU training gains from them, so the rules keep fp32. The precision lab (\"Measure on this machine…\") "
            "measures it.",
            {TOPIC: "fp32"},
            code="bf16_on_arm_cpu",
            topic=TOPIC,
        )
    elif choice == "bf16":
        if cpu.amx is None and not cpu.bf16_flags:
            why = "Could not tell whether this CPU has bf16 instructions"
        else:
            why = "This CPU has no bf16 instructions (neither AVX512-BF16 nor AMX)"
        yield Advice(
            "warning",
            why + ": bf16 is converted in software and runs slower than fp32 here. bf16 hardware: AMD Zen 4 and "
            "newer, Intel Xeon Cooper Lake (AVX512-BF16) and Sapphire Rapids and newer (AMX).",
            {TOPIC: "fp32"},
            code="bf16_on_cpu_emulated",
            topic=TOPIC,
            faster="fp32",
            basis=why,
        )
    elif choice == "fp32" and best == "bf16":
        yield Advice(
            "info",
            f"This CPU has {hw}: bf16 AMP is faster than fp32 on full-size models ({CPU_MID_MEASURED}), though not "
            f"on tiny ones ({CPU_DEMO_MEASURED}). The precision lab (\"Measure on this machine…\") measures your "
            "model.",
            {TOPIC: "bf16"},
            code="fp32_slow",
            topic=TOPIC,
            faster="bf16",
            basis=f"This CPU has {hw}",
        )


# --------------------------------------------------------------------------- PyTorch builds


def torch_install_hint(capability: tuple[int, int] | None, machine: str = "x86_64") -> str:
    """The pip command that installs a torch build with kernels for an NVIDIA GPU of ``capability``
    (:func:`guitrainer.core.device.builds.cuda_install_hint`: the published arch lists, an exact build pin)."""
    return cuda_install_hint(capability, machine=machine).command


def build_is_older_than(gpu: GpuInfo, arch_list: tuple[str, ...]) -> bool:
    """Whether the GPU is *older* than every architecture the torch build has (the build dropped it)."""
    majors = [version_tuple(a.split("_")[1][:-1] + "." + a.split("_")[1][-1]) for a in arch_list
              if a.startswith(("sm_", "compute_")) and a.split("_")[1][:-1].isdigit()]
    lowest = min(majors, default=())
    return bool(lowest) and gpu.capability < lowest[:2]


def build_problem(device: DeviceInfo, gpu: GpuInfo) -> tuple[str, str] | None:
    """``(message, command)`` when the installed torch has no kernels for ``gpu``; None when it has (or nobody knows).

    NVIDIA: the build to install, from the published arch lists (:mod:`guitrainer.core.device.builds`). AMD: ROCm
    code objects are per gfx target; where another target's code runs with ``HSA_OVERRIDE_GFX_VERSION`` (the other
    RDNA2 chips on gfx1030's) the command starts the app with it.
    """
    if gpu.kernels_in_build is not False:
        return None
    archs = ", ".join(device.arch_list) or "none"
    if gpu.vendor == "amd":
        message = (f"This PyTorch (torch {device.torch_version}, ROCm {device.hip_version or '?'}) has no kernels for "
                   f"your {gpu.name} ({gpu.arch}); it has {archs}. Training would stop at the first step with "
                   "\"HIP error: invalid device function\".")
        override = hsa_override(gpu.gfx_arch, device.arch_list)
        if override:
            return (message + f" Workaround: start the app with HSA_OVERRIDE_GFX_VERSION={override}, which makes the "
                    f"{gpu.arch} run this build's gfx1030 code (the same RDNA2 instruction set; unofficial, but the "
                    "fix ROCm's own trackers give).", f"HSA_OVERRIDE_GFX_VERSION={override} python -m guitrainer")
        return (message + f" Install a PyTorch built for {gpu.arch}: AMD publishes per-architecture ROCm wheels "
                "(repo.amd.com/rocm/whl-multi-arch).", "")
    older = build_is_older_than(gpu, device.arch_list)
    hint = cuda_install_hint(gpu.capability, machine=device.machine)
    message = (f"Your {gpu.name} ({gpu.arch}) is {'older' if older else 'newer'} than this PyTorch build "
               f"(torch {device.torch_version}, CUDA {device.cuda_version or '?'}) supports: it has {archs}, and "
               f"training would stop with \"no kernel image is available\". {hint.why}")
    return message, hint.command


def rule_torch(device: DeviceInfo, cfg: TrainingConfig) -> Iterable[Advice]:
    """torch missing, a build without the card's architecture, a CPU build next to an NVIDIA GPU, or a Mac whose
    GPU this torch cannot use."""
    if not device.torch_ok:
        reason = dict(device.unknown).get("torch", "it could not be imported")
        yield Advice("error", f"PyTorch is not available ({reason}), so nothing can be trained.",
                     suggestion_text=f'python -m pip install "torch=={TORCH_TARGET}"', code="torch_missing",
                     topic="device")
        return
    gpu = device.gpu
    problem = build_problem(device, gpu) if gpu is not None else None
    if problem is not None:
        message, command = problem
        yield Advice("error", message, suggestion_text=command, code="torch_arch_missing", topic="device")
    if device.kind == "cpu" and device.nvidia_gpu_unused:
        hint = cuda_install_hint(device.unused_nvidia_capability, machine=device.machine)
        yield Advice(
            "warning",
            "An NVIDIA graphics card seems to be installed, but this PyTorch is a CPU-only build, so training runs "
            f"on the CPU. Install the CUDA build of PyTorch to use the card. {hint.why}",
            suggestion_text=hint.command,
            code="torch_cpu_build",
            topic="device",
        )
    if device.kind == "cpu" and device.mps is not None and device.mps.unsupported:
        yield Advice("warning", f"This Mac's GPU cannot be used: {device.mps.unsupported}. Training runs on the CPU "
                     "until macOS is updated.", code="mps_needs_macos14", topic="device")


def rule_gpu_index(device: DeviceInfo, cfg: TrainingConfig) -> Iterable[Advice]:
    """``precision.gpu_index`` names a GPU this machine does not have: the trainer would refuse to start."""
    index = cfg.precision.gpu_index
    if not device.torch_ok or device.gpu_index_valid(index):
        return
    yield Advice(
        "error",
        gpu_missing_message(index, [g.name for g in device.gpus]) + ".",
        {"precision.gpu_index": -1},
        suggestion_text="train on the first GPU (automatic)" if device.gpus else "automatic (no GPU)",
        code="gpu_missing",
        topic="precision.gpu_index",
    )


def rule_cpu_training(device: DeviceInfo, cfg: TrainingConfig) -> Iterable[Advice]:
    if device.kind != "cpu" or not device.torch_ok:
        return
    if cfg.model.base.strip() == "demo" or cfg.model.family == "demo":
        yield Advice("info", "No GPU found: training runs on the CPU. That is fine for the built-in demo model.",
                     code="cpu_training", topic="device")
    else:
        yield Advice("warning", "No GPU found: training a real Stable Diffusion model on the CPU takes many hours or days.",
                     code="cpu_training", topic="device")


def rule_training_precision(device: DeviceInfo, cfg: TrainingConfig) -> Iterable[Advice]:
    return training_precision_advice(device, cfg.precision.training, config_family(cfg))


def rule_sdxl_vae(device: DeviceInfo, cfg: TrainingConfig) -> Iterable[Advice]:
    """SDXL's VAE overflows in fp16 (black or noisy images: the diffusers SDXL docs and the fp16-fix VAE's model
    card), so the trainer keeps it in fp32; the cost is our own estimator's, for this config. A VAE whose config
    says ``force_upcast = false`` (the fp16-fixed one) runs in fp16 at no cost: when one is on this computer,
    the advice sets ``model.vae`` to it; otherwise it says what to download."""
    if cfg.precision.training != "fp16" or cfg.model.family != "sdxl":
        return
    topic = "model.vae"
    if vae_fp16_safe(cfg):
        whose = f"The VAE you chose ({cfg.model.vae})" if cfg.model.vae.strip() else "This model's own VAE"
        later = " It is downloaded when training starts (online only)." if hub_pending(cfg.model.vae) else ""
        yield Advice("info", f"{whose} is fp16-safe (its config says force_upcast = false): it runs in fp16 like "
                     f"the rest of the model, with no extra memory.{later}", code="sdxl_vae_fp16_safe", topic=topic)
        return
    cost = format_bytes(sdxl_vae_fp32_cost(cfg))
    when = ("while the latents are cached (then the VAE is freed)" if cfg.precision.cache_latents
            else "on every step, since latents are not cached")
    # the cost first: a collapsed note shows the first ~110 characters
    message = (f"SDXL's VAE stays in fp32 under fp16, costing about {cost} more at {cfg.dataset.resolution} px "
               f"{when}: in fp16 it overflows (black or noisy images). The fp16-fixed SDXL VAE ({SDXL_FP16_VAE}) "
               "runs in fp16 without that cost.")
    found = find_fp16_safe_vae(cfg)
    if found:
        yield Advice("info", message + f" It is on this computer: {found}.", {topic: found},
                     suggestion_text="use the fp16-fixed SDXL VAE", code="sdxl_vae_fp32", topic=topic)
        return
    yield Advice(
        "info",
        message + " To use it, download it (the command below puts it in the Hugging Face cache, where this app "
        "finds it), or put its config.json and diffusion_pytorch_model.safetensors in a folder next to the base "
        "model; then choose it as the VAE on the Model & Precision page.",
        suggestion_text=FP16_FIX_DOWNLOAD,
        code="sdxl_vae_fp32",
        topic=topic,
    )


# --------------------------------------------------------------------------- 8-bit optimizers

EIGHT_BIT_OPTIMIZERS: tuple[str, ...] = ("AdamW8bit", "Lion8bit", "PagedAdamW8bit")
#: bitsandbytes versions that first shipped each backend's 8-bit optimizer kernels, as its release history
#: gives them: CUDA 12.8 builds with sm_100 / sm_120 (Blackwell) kernels in 0.45.3; Intel XPU 8-bit optimizers
#: (bitsandbytes PR #1692, released in 0.48.0); ROCm builds in the PyPI wheels from 0.49 (installation docs at tag
#: 0.49.0, "AMD ROCm (Preview) - Installation from PyPI"); CPU 8-bit blockwise optimizer kernels in 0.50.0
#: (``backends/cpu/ops.py`` registers ``optimizer_update_8bit_blockwise`` for "cpu" from that tag, not at 0.49.2;
#: PR #1901). Which gfx targets each ROCm library has: :data:`guitrainer.core.device.builds.BNB_ROCM_TARGETS`.
BNB_BLACKWELL = (0, 45, 3)
BNB_XPU_8BIT = (0, 48)
BNB_ROCM = (0, 49)
BNB_CPU_8BIT = (0, 50)
#: paged optimizers on Intel GPUs (SYCL shared memory): bitsandbytes PR #1898 "Enable Paged Optimizer Support for
#: XPU", first in 0.50.0 (``cget_managed_ptr`` gains its SYCL branch there). CUDA and ROCm page through
#: ``cudaMallocManaged`` / its HIP twin (bitsandbytes PR #2069: "Managed memory is implemented for CUDA/ROCm ... and
#: XPU"); everywhere else the paged state falls back to plain tensors.
BNB_XPU_PAGED = (0, 50)


def eight_bit_status(device: DeviceInfo) -> tuple[Level | None, str]:
    """Whether bitsandbytes' 8-bit optimizers work here: (None, "") when they do, else (level, reason)."""
    bnb = device.bitsandbytes
    if not bnb.available:
        return "error", f"bitsandbytes is not usable here ({bnb.reason or 'not installed'})"
    version = version_tuple(bnb.version)
    if device.kind == "mps":
        return "error", "bitsandbytes has no 8-bit optimizers for Apple GPUs"
    if device.kind == "cpu":
        if version and version < BNB_CPU_8BIT:
            return "error", f"8-bit optimizers on the CPU need bitsandbytes 0.50 or newer; this is {bnb.version}"
        return "warning", "on the CPU 8-bit optimizers are slow, and a CPU rarely runs out of memory"
    gpu = device.gpu
    assert gpu is not None
    need = _bnb_need(gpu, bnb.backend)
    if need is not None:
        return "error", need
    minimum, what = {"amd": (BNB_ROCM, "AMD GPUs (ROCm)"), "intel": (BNB_XPU_8BIT, "Intel GPUs")}.get(
        gpu.vendor, (BNB_BLACKWELL, "Blackwell cards") if gpu.capability >= (10, 0) else ((), ""))
    if minimum and version and version < minimum:
        return "error", (f"8-bit optimizers on {what} need bitsandbytes {'.'.join(map(str, minimum))} or newer; "
                         f"this is {bnb.version}: pip install -U bitsandbytes")
    if gpu.vendor == "amd":
        return _bnb_rocm_status(device, gpu)
    if gpu.jetson:
        return "warning", (f"bitsandbytes' PyPI wheels do not run on a {gpu.jetson} (they are built for server ARM, "
                           "not Jetson's L4T runtime: bitsandbytes' installation docs); install it from Jetson AI "
                           "Lab's index (pypi.jetson-ai-lab.io/jp6/cu126) or build it on the device")
    return None, ""


def _bnb_rocm_status(device: DeviceInfo, gpu: GpuInfo) -> tuple[Level | None, str]:
    """bitsandbytes' ROCm kernels are built per gfx target and per ROCm library, and it loads the library that
    matches this torch's HIP version (:func:`guitrainer.core.device.builds.bnb_rocm_targets`)."""
    bnb = device.bitsandbytes
    library, targets = bnb_rocm_targets(bnb.version, device.hip_version)
    if library is None:
        return None, ""  # unknown versions: the probe's own import is the only word
    if gpu.gfx_arch in targets:
        return None, ""
    rocm = f"{library[0]}.{library[1]}"
    if any(gpu.gfx_arch in lib for lib in BNB_ROCM_TARGETS[max(BNB_ROCM_TARGETS)].values()):
        newer = [f"{v[0]}.{v[1]}" for v, lib in BNB_ROCM_TARGETS[max(BNB_ROCM_TARGETS)].items() if gpu.gfx_arch in lib]
        return "error", (f"bitsandbytes {bnb.version} loads its ROCm {rocm} library for this PyTorch, which has no "
                         f"kernels for {gpu.arch_label}; bitsandbytes 0.50's ROCm {newer[-1]} library has them, and "
                         f"it loads with a PyTorch built on ROCm {newer[-1]} (AMD's ROCm wheels)")
    return "error", (f"no published bitsandbytes build has 8-bit optimizer kernels for {gpu.arch_label} "
                     "(bitsandbytes' installation docs list the ROCm targets of each release)")


def _bnb_need(gpu: GpuInfo, backend: str) -> str | None:
    """Why this bitsandbytes backend cannot run 8-bit optimizers on ``gpu`` (None: it can)."""
    if gpu.vendor == "nvidia" and gpu.capability < (6, 0):
        return (f"bitsandbytes' 8-bit optimizers need a GPU of compute capability 6.0 or newer; this one is "
                f"{gpu.capability[0]}.{gpu.capability[1]}")
    wanted = {"nvidia": ("cuda",), "amd": ("rocm", "hip", "cuda"), "intel": ("xpu",)}[gpu.vendor]
    if backend not in wanted:
        return f"this bitsandbytes has no support for this GPU (backend: {backend})"
    return None


def paging_works(device: DeviceInfo) -> bool:
    """Whether a paged optimizer's state can move to system memory here (:data:`BNB_XPU_PAGED`)."""
    if device.kind == "cuda":
        return True
    return device.kind == "xpu" and version_tuple(device.bitsandbytes.version) >= BNB_XPU_PAGED


def rule_optimizer(device: DeviceInfo, cfg: TrainingConfig) -> Iterable[Advice]:
    name = cfg.optimizer.name
    topic = "optimizer.name"
    if name not in EIGHT_BIT_OPTIMIZERS:
        return
    level, reason = eight_bit_status(device)
    if name == "PagedAdamW8bit" and not paging_works(device):
        where = ("an Intel GPU needs bitsandbytes 0.50 or newer for it" if device.kind == "xpu"
                 else "paging needs a CUDA, ROCm or Intel GPU")
        yield Advice(
            "error" if level == "error" else "warning",
            f"Paged optimizers move their state to system memory, but {where}, so here paging has no effect"
            + (f"; also, {reason}." if reason else "."),
            {topic: "AdamW8bit" if level is None else "AdamW"},
            code="paged_without_cuda",
            topic=topic,
        )
        return
    if level is not None:
        yield Advice(
            level,
            f"{name}: {reason}. Plain AdamW works everywhere (it uses more memory for its state).",
            {topic: "AdamW"},
            code="eight_bit_unusable" if level == "error" else "eight_bit_cpu",
            topic=topic,
        )


# --------------------------------------------------------------------------- storage precision

#: the first PyTorch with ``torch.float8_e4m3fn`` (PyTorch 2.1 release notes: "float8 dtypes")
TORCH_FLOAT8 = (2, 1)
#: the first PyTorch with float8 operators on Intel GPUs: the 2.10 release tracker (pytorch/pytorch#169571, "Implement
#: FP8 support on Intel GPUs by adding commonly used basic operators"); before it add / mul / where on float8 were
#: "not implemented" on XPU (intel/torch-xpu-ops#1939)
TORCH_XPU_FLOAT8 = (2, 10)
#: what fp8 storage costs in speed, measured by the precision lab on a CPU (bench/RESULTS.md, "Precision lab", the
#: fp8 rows of three runs on an AMD EPYC): 2-44 % slower per step on the demo model, up to 2.2x on bench's mid-size
#: UNet (one fp32 run measured it faster: the machine's run-to-run noise is large); an earlier engine measured 4-13 %
FP8_SPEED_COST = "on a CPU in our bench from a few percent to about 2x slower, by model and precision"


def fp8_storage_unavailable(device: DeviceInfo) -> str:
    """Why fp8 base weights cannot run on ``device`` ("" when they can): no float8 types (MPS, torch < 2.1) or no
    float8 operators (Intel GPUs before torch 2.10)."""
    if device.kind == "mps":
        return "fp8 weights are not available on Apple GPUs (MPS has no float8 types)"
    if device.torch_ok and device.torch_tuple < TORCH_FLOAT8:
        return f"fp8 weights need PyTorch 2.1 or newer (float8 types); this is {device.torch_version}"
    if device.kind == "xpu" and device.torch_ok and device.torch_tuple < TORCH_XPU_FLOAT8:
        return (f"fp8 weights on Intel GPUs need PyTorch 2.10 or newer (its first float8 operators for XPU); this is "
                f"{device.torch_version}")
    return ""


def rule_base_weights(device: DeviceInfo, cfg: TrainingConfig) -> Iterable[Advice]:
    """fp8 storage of the frozen weights: where it cannot run, and its costs (quality, speed) where it can."""
    if cfg.precision.base_weights != "fp8":
        return
    topic = "precision.base_weights"
    unavailable = fp8_storage_unavailable(device)
    if unavailable:
        code = ("fp8_on_mps" if device.kind == "mps" else
                "fp8_old_torch" if device.torch_tuple < TORCH_FLOAT8 else "fp8_xpu_old_torch")
        yield Advice("error", unavailable + ".", {topic: "auto"}, code=code, topic=topic)
        return
    best = recommended_training(device, config_family(cfg))
    if cfg.precision.training == "fp32" and device.gpu is not None and best != "fp32":
        # on a GPU whose fp16 / bf16 matrix units make AMP the faster way to use fp8 weights; not on GTX 16xx or
        # Pascal (fp32 is their best) nor on a CPU (the lab measured fp32 + fp8 fastest there on the demo model)
        yield Advice("warning", "fp8 weights widen to fp32 layer by layer here: they save memory, but on this GPU "
                     f"{choice_label(TOPIC, best)} with fp8 weights trains faster.", {TOPIC: best},
                     code="fp8_with_fp32", topic=topic, faster=best,
                     basis=f"Your {device.gpu.name} runs {choice_label(TOPIC, best)} faster than fp32")
    if not cfg.precision.gradient_checkpointing:  # tracked steps: SD 1.5 +644 MiB, SDXL 1024 px +1.0 GiB (RESULTS)
        yield Advice("warning", "fp8 weights need gradient checkpointing to save memory: without it each layer's "
                     "widened copy is kept for the backward pass, and the run needs more memory than without fp8.",
                     {"precision.gradient_checkpointing": True}, suggestion_text="turn gradient checkpointing on",
                     code="fp8_without_checkpointing", topic=topic)
    width = {"fp32": 4}.get(cfg.precision.training, 2)
    share = "three quarters" if width == 4 else "half"
    yield Advice("info", f"fp8 weights keep the frozen UNet or transformer and the text encoders in 1 byte per value "
                 f"instead of {width} "
                 f"({cfg.precision.training}): {share} of their memory saved, at a small cost in quality (the LoRA "
                 "learns against slightly rounded weights) and some speed: every layer is widened again on every step "
                 f"({FP8_SPEED_COST}).", code="fp8_caveat", topic=topic)


def rule_quantised_base_weights(device: DeviceInfo, cfg: TrainingConfig) -> Iterable[Advice]:
    """int8 / nf4 storage of the frozen weights (bitsandbytes' layers): where it cannot run, and its caveat."""
    fmt = cfg.precision.base_weights
    if fmt not in ("int8", "nf4"):
        return
    topic = "precision.base_weights"
    instead = "auto" if fp8_storage_unavailable(device) else "fp8"
    bnb = device.bitsandbytes
    reason = ""
    if not bnb.available:
        reason = f"bitsandbytes is not usable here ({bnb.reason or 'not installed'})"
    elif device.kind == "cpu" and version_tuple(bnb.version) and version_tuple(bnb.version) < BNB_CPU_8BIT:
        reason = f"{fmt} layers on the CPU need bitsandbytes 0.50 or newer; this is {bnb.version}"
    elif device.gpu is not None:
        reason = _bnb_need(device.gpu, bnb.backend) or ""
    if reason:
        yield Advice("error", f"{fmt} frozen weights need bitsandbytes' quantised layers: {reason}.", {topic: instead},
                     code="quantised_unusable", topic=topic)
        return
    # the config refuses these combinations (config/training.py); the page says so where the choice is made
    if cfg.precision.offload_blocks > 0:
        yield Advice("error", f"{fmt} frozen weights cannot be kept in system RAM yet: set Blocks in system RAM to "
                     "0, or store them in fp8, which can.", {"precision.offload_blocks": 0.0},
                     code="quantised_offload", topic=topic)
    if cfg.network.type != "lora":
        yield Advice("error", f"{fmt} frozen weights train a plain LoRA only: set the network type to LoRA, or store "
                     "the frozen weights in fp8.", {"network.type": "lora"}, code="quantised_network", topic=topic)
    if device.kind == "mps":
        yield Advice("warning", f"{fmt} frozen weights on an Apple GPU are untested here: bitsandbytes' Apple "
                     "support is new, and fp8 does not run there either.", {topic: "auto"},
                     code="quantised_on_mps", topic=topic)
    width = {"fp32": 4}.get(cfg.precision.training, 2)
    stored = "1 byte per value (and one scale per row)" if fmt == "int8" else "about half a byte per value"
    source = ("LLM.int8() (Dettmers et al. 2022) lost nothing on language models; diffusers' 2025 comparison "
              "found 8-bit images (of Flux) hard to tell from bf16 ones" if fmt == "int8" else
              "QLoRA (Dettmers et al. 2023) matched 16-bit LoRA on language models; diffusers' 2025 comparison "
              "found 4-bit images (of Flux) more visibly changed than 8-bit ones")
    yield Advice("info", f"{fmt} keeps the UNet's or transformer's Linear weights in {stored} instead of "
                 f"{width} bytes ({cfg.precision.training}); the embedders, final layers, convolutions and text encoders "
                 f"stay in {cfg.precision.training}. The LoRA learns against rounded weights and each layer is "
                 f"dequantised at every use, so steps are slower; {source}.", code="quantised_caveat", topic=topic)


def rule_lora_weights(device: DeviceInfo, cfg: TrainingConfig) -> Iterable[Advice]:
    """bf16 LoRA weights (kohya's --full_bf16): only for very large ranks, and only with bf16 hardware."""
    if cfg.precision.lora_weights != "bf16":
        return
    topic = "precision.lora_weights"
    if device.bf16_native is False:
        yield Advice("warning", "bf16 LoRA weights on a device without bf16 hardware are emulated and slow.",
                     {topic: "fp32"}, code="bf16_lora_emulated", topic=topic)
    if cfg.precision.training == "fp16":
        yield Advice("warning", "bf16 LoRA weights with fp16 AMP mix two half formats; use bf16 AMP with them, "
                     "or keep the LoRA in fp32.", {topic: "fp32"}, code="bf16_lora_fp16", topic=topic)
    elif cfg.network.rank < 128:
        yield Advice("info", f"At rank {cfg.network.rank} the LoRA is small: fp32 costs little more memory and no "
                     "update is rounded away. bf16 pays off for very large ranks.", {topic: "fp32"},
                     code="bf16_lora_small", topic=topic)


RuleFn = Callable[[DeviceInfo, "TrainingConfig"], Iterable[Advice]]

RULES: tuple[RuleFn, ...] = (
    rule_torch,
    rule_gpu_index,
    rule_training_precision,
    rule_sdxl_vae,
    rule_optimizer,
    rule_base_weights,
    rule_quantised_base_weights,
    rule_lora_weights,
    rule_cpu_training,
    rule_family_precision,
)
