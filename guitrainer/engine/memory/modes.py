"""What makes a training step measurable without a GPU: dispatch modes and stand-ins used by :mod:`.memory`.

* :class:`StorageTracker` counts the bytes of every live tensor storage (CUDA allocator rounding) and keeps the peak;
* :class:`CudaAutocastEmulation` applies CUDA autocast's casting policy to CPU (fake) tensors;
* :class:`FakeScalars` answers ``.item()`` of a fake tensor, so optimizers that read scalars (Adafactor) run;
* :class:`ScalerStandIn` does a GradScaler's allocations where its inf check cannot run.
"""

from __future__ import annotations

import functools
import weakref
from typing import Any

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves, tree_map

CUDA_BLOCK = 512  # the CUDA caching allocator rounds every allocation up to this


class StorageTracker(TorchDispatchMode):
    """Counts the bytes of live tensor storages created while active; ``peak`` is the high-water mark.

    A storage is counted once (views share it) when an op first returns it, and uncounted by a weakref
    finalizer when the last tensor using it dies. Works on fake tensors (their storages are real Python
    objects) and on real CPU tensors alike.
    """

    def __init__(self, block: int = CUDA_BLOCK) -> None:
        super().__init__()
        self.block = block
        self.live = 0
        self.peak = 0
        self._seen: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()

    def reset_peak(self) -> None:
        self.peak = self.live

    def track(self, t: torch.Tensor) -> None:
        """Count ``t``'s storage if it is new (also for tensors made before the tracker was active)."""
        st = t.untyped_storage()
        if st in self._seen:
            return
        nbytes = -(-st.nbytes() // self.block) * self.block
        self._seen[st] = nbytes
        self.live += nbytes
        self.peak = max(self.peak, self.live)
        weakref.finalize(st, self._free, nbytes)

    def _free(self, nbytes: int) -> None:
        self.live -= nbytes

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        for o in tree_leaves(out):
            if isinstance(o, torch.Tensor):
                self.track(o)
        return out


_LOWER = {
    F.conv1d, F.conv2d, F.conv3d, F.conv_transpose1d, F.conv_transpose2d, F.linear, F.bilinear,
    F.scaled_dot_product_attention, torch.matmul, torch.mm, torch.bmm, torch.baddbmm, torch.addmm,
    torch.addbmm, torch.einsum, torch.Tensor.matmul, torch.Tensor.__matmul__, torch.Tensor.bmm,
    torch.Tensor.mm, torch.conv2d, torch.conv1d, torch.prelu,
}
_FP32 = {
    F.group_norm, F.layer_norm, F.mse_loss, F.l1_loss, F.smooth_l1_loss, F.huber_loss, F.softmax,
    F.log_softmax, F.softplus, F.cosine_similarity, F.kl_div, F.nll_loss, F.cross_entropy,
    F.binary_cross_entropy_with_logits, torch.exp, torch.log, torch.pow, torch.rsqrt, torch.logsumexp,
    torch.Tensor.exp, torch.Tensor.log, torch.Tensor.pow, torch.Tensor.rsqrt, torch.Tensor.softmax,
    torch.cumsum, torch.Tensor.cumsum, torch.group_norm, torch.layer_norm,
}
_PROMOTE = {torch.cat, torch.stack, torch.addcmul, torch.addcdiv, torch.index_put}


class CudaAutocastEmulation(TorchFunctionMode):
    """CUDA autocast's casting policy as a torch-function mode, for fake CPU tensors.

    Casts happen above autograd exactly as with real autocast, so autograd saves the cast copies it would
    save on a GPU. fp32 leaf tensors that need grad (LoRA weights) are cast once and cached for the mode's
    lifetime, like autocast's weight-cast cache.
    """

    def __init__(self, dtype: torch.dtype) -> None:
        super().__init__()
        self.dtype = dtype
        self._cache: dict[int, torch.Tensor] = {}

    def _cast(self, a: Any, dtype: torch.dtype) -> Any:
        if not isinstance(a, torch.Tensor) or not a.is_floating_point() or a.dtype == dtype:
            return a
        if a.is_leaf and a.requires_grad and dtype == self.dtype:
            key = id(a)
            if key not in self._cache:
                self._cache[key] = a.to(dtype)
            return self._cache[key]
        return a.to(dtype)

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if func in _LOWER:
            target = self.dtype
        elif func in _FP32:
            target = torch.float32
        elif func in _PROMOTE:
            tensors = [a for a in tree_leaves((args, kwargs)) if isinstance(a, torch.Tensor) and a.is_floating_point()]
            if len({t.dtype for t in tensors}) <= 1:
                return func(*args, **kwargs)
            target = functools.reduce(torch.promote_types, (t.dtype for t in tensors))
        else:
            return func(*args, **kwargs)
        args, kwargs = tree_map(lambda a: self._cast(a, target), (args, kwargs))
        return func(*args, **kwargs)


# --------------------------------------------------------------------------- the step


class ScalerStandIn:
    """GradScaler's allocations where its skip decision cannot run (a fake tensor has no value to test for
    inf): the loss is scaled, the gradients are unscaled in place (as ``unscale_`` does), the step always runs."""

    def __init__(self, scale: float = 2.0**16) -> None:
        self._scale = scale

    def scale(self, loss: torch.Tensor) -> torch.Tensor:
        return loss * self._scale

    def unscale_(self, optimizer: torch.optim.Optimizer) -> None:
        grads = [p.grad for g in optimizer.param_groups for p in g["params"] if p.grad is not None]
        if grads:
            torch._foreach_mul_(grads, 1.0 / self._scale)

    def step(self, optimizer: torch.optim.Optimizer) -> None:
        optimizer.step()

    def update(self) -> None:
        pass

    def get_scale(self) -> float:
        return self._scale


class FakeScalars(TorchDispatchMode):
    """``.item()`` of a fake (or ``meta``) tensor answers 1 instead of failing: optimizers that read a scalar to
    decide a step size (Adafactor reads its step count and norms) run on fake tensors, and text encoders whose mask
    code reads a value (transformers' Qwen3 checks for packed sequences) encode on ``meta`` for their shapes. Only allocations are measured,
    so the value does not matter; it is never 0, which such formulas divide by."""

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        from torch._subclasses.fake_tensor import FakeTensor

        if func is torch.ops.aten._local_scalar_dense.default and (isinstance(args[0], FakeTensor) or args[0].is_meta):
            dtype = args[0].dtype
            return True if dtype == torch.bool else (1.0 if dtype.is_floating_point else 1)
        return func(*args, **(kwargs or {}))
