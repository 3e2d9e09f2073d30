"""The process-wide torch state a compile may change: captured before, put back after, compared by tests."""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, List, Tuple

import torch
import torch._C._functorch as _functorch
from torch.overrides import _get_current_function_mode_stack
from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

AUTOCAST_DEVICES: Tuple[str, ...] = tuple(
    d for d in ("cpu", "cuda", "xpu", "mps", "hpu", "xla", "ipu", "mtia", "maia", "privateuseone")
    if torch._C._is_autocast_available(d))
_INFRA_MODE_KEYS = tuple(torch._C._TorchDispatchModeKey.__members__.values())
_FUNCTORCH_EXIT = {
    _functorch.TransformType.Vmap: _functorch._vmap_decrement_nesting,
    _functorch.TransformType.Grad: _functorch._grad_decrement_nesting,
    _functorch.TransformType.Jvp: _functorch._jvp_decrement_nesting,
    _functorch.TransformType.Functionalize: _functorch._func_decrement_nesting,
}
_MODE_FIELDS = ("torch_function_modes", "dispatch_modes", "infra_modes")
_LABELS = {  # each field as reports name it (autocast is named per device)
    "grad_enabled": "grad mode", "inference_mode": "inference mode", "autocast_cache_enabled": "autocast cache",
    "autocast_nesting": "autocast nesting", "default_dtype": "default dtype",
    "deterministic": "deterministic algorithms", "anomaly": "anomaly mode",
    "torch_function_state": "torch function state", "torch_function_modes": "torch function modes",
    "dispatch_modes": "dispatch modes (fake mode, ...)", "infra_modes": "fake, proxy and functional modes",
    "functorch_levels": "functorch levels", "tls_dispatch_keys": "dispatch keys",
}


def _autocast_nesting() -> int:
    depth = torch.autocast_increment_nesting() - 1
    torch.autocast_decrement_nesting()
    return depth


def _functorch_levels() -> Tuple[Any, ...]:
    return tuple(i.key() for i in _functorch.get_interpreter_stack() or ())


@dataclass(frozen=True)
class GlobalState:
    """What eager code can observe of torch's global (thread-local) modes and flags."""

    grad_enabled: bool
    inference_mode: bool
    autocast: Tuple[Tuple[str, bool, torch.dtype], ...]  # per device type: enabled, dtype
    autocast_cache_enabled: bool
    autocast_nesting: int
    default_dtype: torch.dtype
    deterministic: Tuple[bool, bool]  # enabled, warn only
    anomaly: Tuple[bool, bool]  # enabled, check nan
    torch_function_state: Any
    torch_function_modes: Tuple[Any, ...]
    dispatch_modes: Tuple[Any, ...]  # the user stack
    infra_modes: Tuple[Any, ...]  # fake, proxy, functional modes (one slot each)
    functorch_levels: Tuple[Any, ...]
    tls_dispatch_keys: Tuple[int, int]  # included, excluded (raw key sets)

    @classmethod
    def capture(cls) -> "GlobalState":
        return cls(
            grad_enabled=torch.is_grad_enabled(),
            inference_mode=torch.is_inference_mode_enabled(),
            autocast=tuple((d, torch.is_autocast_enabled(d), torch.get_autocast_dtype(d)) for d in AUTOCAST_DEVICES),
            autocast_cache_enabled=torch.is_autocast_cache_enabled(),
            autocast_nesting=_autocast_nesting(),
            default_dtype=torch.get_default_dtype(),
            deterministic=(torch.are_deterministic_algorithms_enabled(),
                           torch.is_deterministic_algorithms_warn_only_enabled()),
            anomaly=(torch.is_anomaly_enabled(), torch.is_anomaly_check_nan_enabled()),
            torch_function_state=torch._C._get_torch_function_state(),
            torch_function_modes=tuple(_get_current_function_mode_stack()),
            dispatch_modes=tuple(torch._C._get_dispatch_stack_at(i) for i in range(torch._C._len_torch_dispatch_stack())),
            infra_modes=tuple(torch._C._get_dispatch_mode(k) for k in _INFRA_MODE_KEYS),
            functorch_levels=_functorch_levels(),
            tls_dispatch_keys=(torch._C._dispatch_tls_local_include_set().raw_repr(),
                               torch._C._dispatch_tls_local_exclude_set().raw_repr()),
        )

    def differing(self, other: "GlobalState") -> List[Tuple[str, Any, Any]]:
        """(setting, mine, other's) for each setting that differs (modes compared by their types:
        two runs of the same code make equal modes, not the same ones)."""
        found: List[Tuple[str, Any, Any]] = []
        for f in fields(self):
            mine, theirs = getattr(self, f.name), getattr(other, f.name)
            if f.name == "autocast":
                found += [(f"autocast {m[0]}", m[1:], t[1:]) for m, t in zip(mine, theirs) if m != t]
                continue
            if f.name in _MODE_FIELDS:
                mine, theirs = tuple(map(type, mine)), tuple(map(type, theirs))
            if mine != theirs:
                found.append((_LABELS[f.name], mine, theirs))
        return found

    def differences(self, other: "GlobalState") -> List[str]:
        """`setting: mine != other's` for each setting that differs."""
        return [f"{name}: {mine!r} != {theirs!r}" for name, mine, theirs in self.differing(other)]

    def restore(self) -> None:
        """Put torch back in this state (whatever a trace interrupted at any point left behind)."""
        now = GlobalState.capture()
        if now == self:
            return
        self._restore_modes(now)
        torch._C._set_grad_enabled(self.grad_enabled)
        for device, enabled, dtype in self.autocast:
            torch.set_autocast_enabled(device, enabled)
            torch.set_autocast_dtype(device, dtype)
        torch.set_autocast_cache_enabled(self.autocast_cache_enabled)
        for _ in range(now.autocast_nesting, self.autocast_nesting):
            torch.autocast_increment_nesting()
        for _ in range(self.autocast_nesting, now.autocast_nesting):
            torch.autocast_decrement_nesting()
        torch._C._set_default_dtype(self.default_dtype)
        torch._C._set_deterministic_algorithms(self.deterministic[0], warn_only=self.deterministic[1])
        torch.set_anomaly_enabled(*self.anomaly)
        torch._C._set_torch_function_state(self.torch_function_state)
        self._restore_tls_keys()

    def _restore_modes(self, now: "GlobalState") -> None:
        if now.torch_function_modes != self.torch_function_modes:
            while torch._C._len_torch_function_stack():
                torch._C._pop_torch_function_stack()
            for mode in self.torch_function_modes:
                torch._C._push_on_torch_function_stack(mode)
        if now.dispatch_modes != self.dispatch_modes:
            while torch._C._len_torch_dispatch_stack():
                torch._C._pop_torch_dispatch_stack(None)
            for mode in self.dispatch_modes:
                torch._C._push_on_torch_dispatch_stack(mode)
        for key, mode, current in zip(_INFRA_MODE_KEYS, self.infra_modes, now.infra_modes):
            if current is not mode:
                torch._C._unset_dispatch_mode(key)
                if mode is not None:
                    torch._C._set_dispatch_mode(mode)
        for level in now.functorch_levels[len(self.functorch_levels):][::-1]:
            _FUNCTORCH_EXIT[level]()

    def _restore_tls_keys(self) -> None:
        """Last: the dispatch keys the steps above set, and any other (python dispatcher, ...)."""
        now = (torch._C._dispatch_tls_local_include_set().raw_repr(), torch._C._dispatch_tls_local_exclude_set().raw_repr())
        if now == self.tls_dispatch_keys:
            return
        # torch sets the whole key sets only through a guard that puts back what it found on exit;
        # two guards left out of order leave the second one's entry state, the one we want.
        want = [torch._C.DispatchKeySet.from_raw_repr(r) for r in self.tls_dispatch_keys]
        first, second = torch._C._ForceDispatchKeyGuard(*want), torch._C._ForceDispatchKeyGuard(*want)
        first.__enter__()
        second.__enter__()
        first.__exit__(None, None, None)
        second.__exit__(None, None, None)


def suspend_saved_tensors_hooks() -> List[Any]:
    """Take the user's saved-tensors hooks (torch.autograd.graph.saved_tensors_hooks, checkpoint) off
    the stack while a frame compiles: the fake tensors of the trace are not theirs to see."""
    suspended = []
    while (top := torch._C._autograd._top_saved_tensors_default_hooks(True)) is not None:
        suspended.append(top)
        torch._C._autograd._pop_saved_tensors_default_hooks()
    return suspended


def resume_saved_tensors_hooks(suspended: List[Any]) -> None:
    for pack, unpack in reversed(suspended):
        torch._C._autograd._push_saved_tensors_default_hooks(pack, unpack)
