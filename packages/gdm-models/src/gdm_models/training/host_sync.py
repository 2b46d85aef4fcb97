"""Find host synchronisations in a training step, on any device.

A training step captured as one CUDA graph (:mod:`gdm_models.training.capture`) must never make the
host wait for the device (``.item()``, ``bool(t)``, ``.tolist()``, ``nonzero``, boolean-mask
indexing ``x[mask]``) nor copy host
data to the device (``torch.as_tensor(numpy_array, device="cuda")``, ``torch.tensor(0.5)``):
either one breaks the capture, and on an eager GPU step each one stalls the launch queue.

:func:`forbid_host_sync` raises :class:`HostSyncError` at the first such operation. It works on
the CPU too (where nothing really synchronises), so the property is tested in every run:

* a ``TorchDispatchMode`` sees every aten op of the forward and the backward and refuses the
  ones whose result the host must read (:data:`SYNC_OPS`, and indexing with a boolean mask)
  and copies between the host and a device;
* ``torch.tensor`` / ``torch.as_tensor`` / ``torch.from_numpy`` on host data (anything that is
  not already a tensor) and ``Tensor.numpy`` are refused while the context is active;
* on CUDA, ``torch.cuda.set_sync_debug_mode("error")`` refuses what the dispatcher cannot see.
"""

from __future__ import annotations

import contextlib
import functools
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

__all__ = ["HostSyncError", "SYNC_OPS", "forbid_host_sync"]


class HostSyncError(RuntimeError):
    """An operation that synchronises the host with the device ran inside
    :func:`forbid_host_sync`."""


_aten = torch.ops.aten

#: aten ops whose result the host has to read before it can go on (the data decides a shape
#: or a Python value)
SYNC_OPS: frozenset[Any] = frozenset(
    {
        _aten._local_scalar_dense.default,  # .item(), bool(t), float(t), .tolist()
        _aten.is_nonzero.default,
        _aten.equal.default,
        _aten.nonzero.default,
        _aten.nonzero_static.default,
        _aten.masked_select.default,
        _aten._unique2.default,
        _aten.unique_dim.default,
        _aten.unique_consecutive.default,
        _aten.bincount.default,
        _aten.repeat_interleave.Tensor,
        _aten._assert_async.msg,
    }
)

_COPY_OPS = frozenset({_aten._to_copy.default, _aten.copy_.default, _aten.to.device})

#: indexing ops: with a boolean mask among the indices (``x[mask]``, ``x[mask] = v``) the
#: kernel counts the mask's True entries on the host (a nonzero the dispatcher does not show)
_INDEX_OPS = frozenset(
    {
        _aten.index.Tensor,
        _aten.index_put.default,
        _aten.index_put_.default,
        _aten._index_put_impl_.default,
    }
)


def _device_of(x: Any) -> torch.device | None:
    return x.device if isinstance(x, torch.Tensor) else None


def _has_mask(indices: Any) -> bool:
    return any(
        isinstance(i, torch.Tensor) and i.dtype in (torch.bool, torch.uint8) for i in indices
    )


class _SyncDetector(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in SYNC_OPS:
            raise HostSyncError(f"host synchronisation: aten.{func.__name__} in the training step")
        if func in _COPY_OPS:
            self._check_copy(func, args, kwargs)
        if func in _INDEX_OPS and _has_mask(args[1] if len(args) > 1 else kwargs["indices"]):
            raise HostSyncError(
                f"host synchronisation: boolean-mask indexing (aten.{func.__name__}) in the "
                "training step; use torch.where or a multiplication by the mask"
            )
        return func(*args, **kwargs)

    @staticmethod
    def _check_copy(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        if func is _aten.copy_.default:
            dst, src = _device_of(args[0]), _device_of(args[1])
        else:
            src = _device_of(args[0])
            dst = kwargs.get("device")
            dst = torch.device(dst) if dst is not None else src
        if src is not None and dst is not None and (src.type == "cpu") != (dst.type == "cpu"):
            raise HostSyncError(f"host/device copy {src} -> {dst} (aten.{func.__name__})")


def _refuse_host_data(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def wrapper(data: Any, *args: Any, **kwargs: Any) -> Any:
        if not isinstance(data, torch.Tensor):
            raise HostSyncError(
                f"torch.{name} of host data ({type(data).__name__}) in the training step: a "
                "host-to-device copy on a GPU; make the tensor once, outside the step"
            )
        return fn(data, *args, **kwargs)

    return wrapper


def _refuse_numpy(self: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
    raise HostSyncError("Tensor.numpy() in the training step: a device-to-host copy on a GPU")


@contextlib.contextmanager
def forbid_host_sync(cuda: bool | None = None) -> Iterator[None]:
    """Raise :class:`HostSyncError` at any host synchronisation inside the block.

    Args:
        cuda: also switch CUDA's own sync checker to "error" (default: when CUDA is available).

    Example:
        >>> import torch
        >>> from gdm_models.training.host_sync import HostSyncError, forbid_host_sync
        >>> x = torch.ones(3)
        >>> with forbid_host_sync():
        ...     y = (x * 2).sum()  # stays on the device
        >>> try:
        ...     with forbid_host_sync():
        ...         bool(y > 0)
        ... except HostSyncError as err:
        ...     print("refused")
        refused
    """
    cuda = torch.cuda.is_available() if cuda is None else cuda
    saved = {name: getattr(torch, name) for name in ("tensor", "as_tensor", "from_numpy")}
    saved_numpy = torch.Tensor.numpy
    old_mode = torch.cuda.get_sync_debug_mode() if cuda else None
    try:
        for name, fn in saved.items():
            setattr(torch, name, _refuse_host_data(name, fn))
        torch.Tensor.numpy = _refuse_numpy  # type: ignore[method-assign,assignment]
        if cuda:
            with warnings.catch_warnings():  # "a prototype feature" (it is a second check)
                warnings.simplefilter("ignore", UserWarning)
                torch.cuda.set_sync_debug_mode("error")
        with _SyncDetector():
            yield
    finally:
        for name, fn in saved.items():
            setattr(torch, name, fn)
        torch.Tensor.numpy = saved_numpy  # type: ignore[method-assign]
        if old_mode is not None:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)
                torch.cuda.set_sync_debug_mode(old_mode)
