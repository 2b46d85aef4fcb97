"""Optional ``torch.compile`` with a fallback to eager execution.

:func:`compile_or_eager` wraps a function so that it runs compiled when ``torch.compile`` is
available and works, and eagerly otherwise; the first failure (missing ``torch.compile``, an
error while compiling or at the first compiled call) emits one :class:`CompileFallbackWarning`
(a one-line notice) and the wrapper stays eager from then on. The math is unchanged either way.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import torch

__all__ = ["CompileFallbackWarning", "compile_or_eager", "default_compile_mode"]


class CompileFallbackWarning(RuntimeWarning):
    """torch.compile was unavailable or failed; the eager path runs instead."""


def default_compile_mode(device: torch.device) -> str:
    """ "reduce-overhead" (CUDA graphs: one launch per captured graph) on CUDA, else "default"."""
    return "reduce-overhead" if device.type == "cuda" else "default"


def _notice(name: str, why: str) -> None:
    warnings.warn(
        f"torch.compile unavailable for {name} ({why}); running eager",
        CompileFallbackWarning,
        stacklevel=3,
    )


class _CompiledOrEager:
    def __init__(self, fn: Callable[..., Any], name: str, **kwargs: Any) -> None:
        self.eager, self.name = fn, name
        self.compiled: Callable[..., Any] | None = None
        compile_fn = getattr(torch, "compile", None)
        if compile_fn is None:
            _notice(name, "this torch has no torch.compile")
            return
        try:
            self.compiled = compile_fn(fn, **kwargs)
        except Exception as e:  # noqa: BLE001 - any failure means: run eager
            _notice(name, f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")

    @property
    def is_compiled(self) -> bool:
        """Whether calls still go through the compiled function."""
        return self.compiled is not None

    def __call__(self, *args: Any) -> Any:
        if self.compiled is not None:
            try:
                return self.compiled(*args)
            except Exception as e:  # noqa: BLE001 - compilation happens at the first call
                first = str(e).splitlines()[0] if str(e) else ""
                _notice(self.name, f"{type(e).__name__}: {first}")
                self.compiled = None
        return self.eager(*args)


def compile_or_eager(fn: Callable[..., Any], name: str, **kwargs: Any) -> _CompiledOrEager:
    """``torch.compile(fn, **kwargs)`` that falls back to ``fn`` with a one-line notice."""
    return _CompiledOrEager(fn, name, **kwargs)
