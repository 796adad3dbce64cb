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
from guitrainer.core.device.gpu_choice import gpu_missing_message
from guitrainer.core.device.info import DeviceInfo, GpuInfo, version_tuple
from guitrainer.core.memory.estimate import sdxl_vae_fp32_cost
from guitrainer.core.model.vae_choice import (
    FP16_FIX_DOWNLOAD,
    FP16_FIX_REPO,
    find_fp16_safe_vae,
    hub_pending,
    vae_fp16_safe,
)
from guitrainer.core.precision.advice import Advice, Level

TOPIC = "precision.training"
#: the fp16-fixed SDXL VAE: the same decoder, rescaled so its activations fit fp16
SDXL_FP16_VAE = FP16_FIX_REPO


# --------------------------------------------------------------------------- what each device does best


def recommended_training(device: DeviceInfo | None) -> str:
    """The training precision this device does best.

    GPU: bf16 where it is native; fp32 on Turing chips without tensor cores (fp16 NaNs, black images); fp16
    where fp16 runs at full rate (tensor cores, P100, AMD's packed math); else fp32 (consumer Pascal, Maxwell).
    Apple: bf16 on M3 and newer, fp16 AMP where the GradScaler works (torch 2.8+), else fp32. CPU: bf16 only
    with AMX, else fp32.
    """
    if device is None:
        return "fp16"
    gpu = device.gpu
    if gpu is not None:
        if gpu.bf16_native:
            return "bf16"
        if gpu.turing_without_tensor_cores:
            return "fp32"
        return "fp16" if gpu.fp16_fast else "fp32"
    if device.kind == "mps":
        mps = device.mps
        if mps is None:
            return "fp32"
        if mps.bf16 and mps.bf16_native:
            return "bf16"
        return "fp16" if mps.fp16_amp else "fp32"
    return "bf16" if device.cpu.bf16_faster else "fp32"


def training_precision_advice(device: DeviceInfo, choice: str) -> Iterable[Advice]:
    """What the rules say about training in ``choice`` on ``device``."""
    best = recommended_training(device)
    if device.gpu is not None:
        yield from _gpu_precision_advice(device.gpu, choice, best)
    elif device.kind == "mps":
        yield from _mps_precision_advice(device, choice, best)
    else:
        yield from _cpu_precision_advice(device, choice, best)


def _gpu_precision_advice(gpu: GpuInfo, choice: str, best: str) -> Iterable[Advice]:
    if choice == "bf16" and not gpu.bf16_native:
        yield _bf16_not_native(gpu)
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
        )
    elif choice == "fp16" and not gpu.tensor_cores:
        yield Advice(
            "info",
            f"Your {gpu.name} has no {'tensor' if gpu.vendor == 'nvidia' else 'matrix'} cores but runs fp16 at full "
            "rate: fp16 AMP saves memory and some time.",
            code="fp16_no_tensor_cores",
            topic=TOPIC,
        )
    elif choice == "fp16" and gpu.bf16_native:
        yield Advice(
            "info",
            f"Your {gpu.name} does bf16 natively: bf16 AMP is as fast, needs no loss scaler and never overflows.",
            {TOPIC: "bf16"},
            code="bf16_better",
            topic=TOPIC,
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
    what = "bf16 matrix cores (those start with RDNA3 and Instinct MI100)" if gpu.vendor == "amd" else "XMX matrix engines"
    return Advice(
        "warning",
        f"Your {gpu.name} ({gpu.arch_label}) has no {what}: bf16 runs, but much slower than "
        f"{choice_label(TOPIC, fallback)}, although PyTorch reports bf16 as supported.",
        {TOPIC: fallback},
        code="bf16_not_native",
        topic=TOPIC,
    )


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
            f"{chip} has no bf16 hardware (Apple GPUs compute bf16 natively from M3 on): it is emulated and much "
            f"slower than {choice_label(TOPIC, best)}.",
            {TOPIC: best},
            code="mps_bf16_emulated",
            topic=TOPIC,
        )
    elif choice == "fp32" and best != "fp32":
        yield Advice(
            "info",
            f"{choice_label(TOPIC, best)} is faster on {chip} and uses less memory.",
            {TOPIC: best},
            code="fp32_slow",
            topic=TOPIC,
        )


def _cpu_precision_advice(device: DeviceInfo, choice: str, best: str) -> Iterable[Advice]:
    cpu = device.cpu
    if choice == "fp16":
        yield Advice(
            "warning",
            "fp16 on the CPU works but is slow: CPUs have no fast fp16 math. "
            + ("This CPU has AMX, so bf16 AMP is the better choice." if best == "bf16" else "fp32 is faster here."),
            {TOPIC: best},
            code="fp16_on_cpu",
            topic=TOPIC,
        )
    elif choice == "bf16" and not cpu.bf16_faster:
        has = ", ".join(f for f in cpu.bf16_flags if f.startswith("avx512")) or ""
        if cpu.amx is None and not cpu.bf16_flags:
            why = "Could not tell whether this CPU has AMX"
        else:
            why = "This CPU has no AMX" + (f" (only {has}, which converts but does not speed up bf16)" if has else "")
        yield Advice(
            "warning",
            why + ": bf16 runs slower than fp32 here (measured 1.5x slower on an AVX512-BF16 CPU). bf16 is faster "
            "only on CPUs with AMX (Xeon Sapphire Rapids and newer).",
            {TOPIC: "fp32"},
            code="bf16_on_cpu_emulated",
            topic=TOPIC,
        )
    elif choice == "fp32" and best == "bf16":
        yield Advice("info", "This CPU has AMX: bf16 AMP trains faster than fp32.", {TOPIC: "bf16"},
                     code="fp32_slow", topic=TOPIC)


# --------------------------------------------------------------------------- PyTorch builds


def torch_install_hint(capability: tuple[int, int] | None) -> str:
    """The pip command that installs a torch build with kernels for an NVIDIA GPU of ``capability``.

    The CUDA 12.8 and 12.9 wheels of PyTorch 2.8 and newer dropped Maxwell, Pascal and Volta (sm_50 - sm_70);
    the CUDA 12.6 wheels keep them. Blackwell (sm_100 / sm_120) needs the CUDA 12.8 wheels or newer.
    Source: PyTorch 2.8 release notes ("CUDA ... support for Maxwell, Pascal and Volta removed from 12.8/12.9
    builds"); PyTorch 2.7 release notes (Blackwell support with CUDA 12.8).
    """
    index = "cu126" if capability is not None and capability < (7, 5) else "cu128"
    return f"pip install --upgrade torch torchvision --index-url https://download.pytorch.org/whl/{index}"


def build_is_older_than(gpu: GpuInfo, arch_list: tuple[str, ...]) -> bool:
    """Whether the GPU is *older* than every architecture the torch build has (the build dropped it)."""
    majors = [version_tuple(a.split("_")[1][:-1] + "." + a.split("_")[1][-1]) for a in arch_list
              if a.startswith(("sm_", "compute_")) and a.split("_")[1][:-1].isdigit()]
    lowest = min(majors, default=())
    return bool(lowest) and gpu.capability < lowest[:2]


def rule_torch(device: DeviceInfo, cfg: TrainingConfig) -> Iterable[Advice]:
    """torch missing, a build without the card's architecture, or a CPU build next to an NVIDIA GPU."""
    if not device.torch_ok:
        reason = dict(device.unknown).get("torch", "it could not be imported")
        yield Advice("error", f"PyTorch is not available ({reason}), so nothing can be trained.",
                     suggestion_text=torch_install_hint(None), code="torch_missing", topic="device")
        return
    gpu = device.gpu
    if gpu is not None and gpu.kernels_in_build is False:
        older = build_is_older_than(gpu, device.arch_list)
        yield Advice(
            "error",
            f"Your {gpu.name} ({gpu.arch}) is {'older' if older else 'newer'} than this PyTorch build "
            f"(torch {device.torch_version}, CUDA {device.cuda_version or '?'}) supports: training would stop with "
            "\"no kernel image is available\". Install a PyTorch built for this card"
            + (" (the CUDA 12.6 build still has it)." if older else "."),
            suggestion_text=torch_install_hint(gpu.capability),
            code="torch_arch_missing",
            topic="device",
        )
    if device.kind == "cpu" and device.nvidia_gpu_unused:
        yield Advice(
            "warning",
            "An NVIDIA graphics card seems to be installed, but this PyTorch is a CPU-only build, so training runs "
            "on the CPU. Install the CUDA build of PyTorch to use the card.",
            suggestion_text=torch_install_hint(None),
            code="torch_cpu_build",
            topic="device",
        )


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
    return training_precision_advice(device, cfg.precision.training)


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
        "model; then choose it as the VAE on the Model page.",
        suggestion_text=FP16_FIX_DOWNLOAD,
        code="sdxl_vae_fp32",
        topic=topic,
    )


# --------------------------------------------------------------------------- 8-bit optimizers

EIGHT_BIT_OPTIMIZERS: tuple[str, ...] = ("AdamW8bit", "Lion8bit", "PagedAdamW8bit")
#: bitsandbytes versions that first shipped each backend's 8-bit optimizer kernels, as its release history
#: gives them: CUDA 12.8 builds with sm_100 / sm_120 (Blackwell) kernels in 0.45.3; Intel XPU 8-bit optimizers
#: (bitsandbytes PR #1692, released in 0.48.0); ROCm builds in the PyPI wheels from 0.49 (ROCm backend tracker
#: bitsandbytes#1271; OneTrainer#1715 pins 0.49.x for ROCm); CPU 8-bit blockwise optimizer kernels in 0.50.0
#: (``backends/cpu/ops.py`` registers ``optimizer_update_8bit_blockwise`` for "cpu" from that release).
BNB_BLACKWELL = (0, 45, 3)
BNB_XPU_8BIT = (0, 48)
BNB_ROCM = (0, 49)
BNB_CPU_8BIT = (0, 50)


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
    return None, ""


def _bnb_need(gpu: GpuInfo, backend: str) -> str | None:
    """Why this bitsandbytes backend cannot run 8-bit optimizers on ``gpu`` (None: it can)."""
    if gpu.vendor == "nvidia" and gpu.capability < (6, 0):
        return (f"bitsandbytes' 8-bit optimizers need a GPU of compute capability 6.0 or newer; this one is "
                f"{gpu.capability[0]}.{gpu.capability[1]}")
    wanted = {"nvidia": ("cuda",), "amd": ("rocm", "hip", "cuda"), "intel": ("xpu",)}[gpu.vendor]
    if backend not in wanted:
        return f"this bitsandbytes has no support for this GPU (backend: {backend})"
    return None


def rule_optimizer(device: DeviceInfo, cfg: TrainingConfig) -> Iterable[Advice]:
    name = cfg.optimizer.name
    topic = "optimizer.name"
    if name not in EIGHT_BIT_OPTIMIZERS:
        return
    level, reason = eight_bit_status(device)
    if name == "PagedAdamW8bit" and device.kind != "cuda":
        yield Advice(
            "error" if level == "error" else "warning",
            "Paged optimizers move their state to system memory only from a CUDA GPU, so here paging has no effect"
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


def rule_base_weights(device: DeviceInfo, cfg: TrainingConfig) -> Iterable[Advice]:
    """fp8 storage of the frozen weights: where it cannot run, and its quality caveat where it can."""
    if cfg.precision.base_weights != "fp8":
        return
    topic = "precision.base_weights"
    if device.kind == "mps":
        yield Advice("error", "fp8 weights are not available on Apple GPUs (MPS has no float8 types).",
                     {topic: "auto"}, code="fp8_on_mps", topic=topic)
        return
    if device.torch_ok and device.torch_tuple < TORCH_FLOAT8:
        yield Advice("error", f"fp8 weights need PyTorch 2.1 or newer (float8 types); this is {device.torch_version}.",
                     {topic: "auto"}, code="fp8_old_torch", topic=topic)
        return
    if cfg.precision.training == "fp32" and device.kind in ("cuda", "xpu"):
        # a GPU's fp16 / bf16 matrix units make AMP the faster way to use fp8 weights; on a CPU the precision lab
        # measured fp32 with fp8 weights fastest (bench/RESULTS.md), so nothing is said there
        yield Advice("warning", "fp8 weights widen to fp32 layer by layer here: they save memory, but on this GPU "
                     "fp16 / bf16 AMP with fp8 weights trains faster.", code="fp8_with_fp32", topic=topic)
    if not cfg.precision.gradient_checkpointing:  # tracked steps: SD 1.5 +644 MiB, SDXL 1024 px +1.0 GiB (RESULTS)
        yield Advice("warning", "fp8 weights need gradient checkpointing to save memory: without it each layer's "
                     "widened copy is kept for the backward pass, and the run needs more memory than without fp8.",
                     {"precision.gradient_checkpointing": True}, suggestion_text="turn gradient checkpointing on",
                     code="fp8_without_checkpointing", topic=topic)
    width = {"fp32": 4}.get(cfg.precision.training, 2)
    share = "three quarters" if width == 4 else "half"
    yield Advice("info", f"fp8 weights keep the frozen UNet and text encoders in 1 byte per value instead of {width} "
                 f"({cfg.precision.training}): {share} of their memory saved, at a small cost in quality (the LoRA "
                 "learns against slightly rounded weights).", code="fp8_caveat", topic=topic)


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
    rule_lora_weights,
    rule_cpu_training,
)
