"""Tensors on the fake ``npu`` device: a ``torch.Tensor`` wrapper subclass over a CPU tensor.

The PrivateUse1 backend is renamed to ``npu`` and set up as a Python backend
(``torch.utils.backend_registration._setup_privateuseone_for_python_backend``, the mechanism
PyTorch tests out-of-tree Python backends with). Factories with ``device="npu"`` reach the
PrivateUse1 kernels registered here (``empty``, ``empty_strided``, ``_copy_from``); every other op
on a device tensor reaches :meth:`FakeNpuTensor.__torch_dispatch__`, which runs it on the CPU
data and wraps the result on the same device.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils._pytree import tree_flatten, tree_unflatten

_RT: list[Any] = []  # the runtime module (memory accounting, current device)
_aten = torch.ops.aten

#: ops that move data between the CPU and the device: mixed devices are their job
_CROSS_DEVICE = {
    _aten.copy_.default,
    _aten._to_copy.default,
    _aten._copy_from.default,
    _aten._copy_from_and_resize.default,
}
#: ops that take CPU index tensors with device data, as a card does
_CPU_INDICES = {
    _aten.index.Tensor,
    _aten.index_put_.default,
    _aten.index_put.default,
    _aten._index_put_impl_.default,
}


class _Alloc:
    """One tensor's hold on its storage in the fake device's memory count."""

    __slots__ = ("ptr",)

    def __init__(self, ptr: int) -> None:
        self.ptr = ptr

    def __del__(self) -> None:
        if _RT:
            _RT[0]._memory.release(self.ptr)


def _plain(a: Any) -> bool:
    return isinstance(a, torch.Tensor) and not isinstance(a, FakeNpuTensor)


def _device(device: Any) -> torch.device:
    d = torch.device(device) if device is not None else torch.device("npu")
    return torch.device("npu", _RT[0]._index(d))


class FakeNpuTensor(torch.Tensor):
    """A tensor on the fake ``npu`` device; ``.elem`` is its CPU data (same dtype, shape, strides)."""

    elem: torch.Tensor
    __torch_function__ = torch._C._disabled_torch_function_impl  # type: ignore[assignment]

    @staticmethod
    def __new__(cls, elem: torch.Tensor, device: Any) -> FakeNpuTensor:
        dev = _device(device)
        r = torch.Tensor._make_wrapper_subclass(  # type: ignore[attr-defined]
            cls,
            elem.size(),
            strides=elem.stride(),
            storage_offset=elem.storage_offset(),
            dtype=elem.dtype,
            layout=elem.layout,
            device=dev,
            requires_grad=elem.requires_grad,
        )
        r.elem = elem
        storage = elem.untyped_storage()
        ptr = storage.data_ptr()
        if ptr:
            _RT[0]._memory.track(ptr, dev.index, storage.nbytes())
            r._alloc = _Alloc(ptr)  # released with the tensor (no weakref: swap_tensors refuses those)
        return r  # type: ignore[no-any-return]

    @property  # type: ignore[override]
    def data(self) -> torch.Tensor:
        return torch.Tensor.data.__get__(self)  # type: ignore[attr-defined,no-any-return]

    @data.setter
    def data(self, value: torch.Tensor) -> None:
        torch.Tensor.data.__set__(self, value)  # type: ignore[attr-defined]
        if isinstance(value, FakeNpuTensor):  # the new data, not the old one under the new metadata
            self.elem = value.elem
            self._alloc = getattr(value, "_alloc", None)

    # a traceable wrapper subclass: nn.Module.to()/.bfloat16() swap parameters (torch.utils.swap_tensors)
    # instead of assigning .data, which would keep the old CPU data under the new dtype
    def __tensor_flatten__(self) -> tuple[list[str], Any]:
        return ["elem"], self.device

    @staticmethod
    def __tensor_unflatten__(
        inner: dict[str, Any], meta: Any, outer_size: Any, outer_stride: Any
    ) -> FakeNpuTensor:
        return FakeNpuTensor(inner["elem"], meta)

    def __repr__(self, *, tensor_contents: Any = None) -> str:  # type: ignore[override]
        text = repr(self.elem)
        return f"{text[:-1]}, device='{self.device}')" if text.endswith(")") else text

    def tolist(self) -> Any:  # type: ignore[override]
        return self.elem.tolist()

    def numpy(self, *, force: bool = False) -> Any:  # type: ignore[override]
        raise TypeError(
            f"can't convert {self.device} device type tensor to numpy. Use Tensor.cpu() to copy the "
            "tensor to host memory first."
        )

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:  # type: ignore[override]
        kwargs = kwargs or {}
        flat, spec = tree_flatten((args, kwargs))
        devices = {a.device for a in flat if isinstance(a, FakeNpuTensor)}
        if func not in _CROSS_DEVICE:
            cpu = [a for a in flat if _plain(a) and a.dim() > 0 and a.device.type == "cpu"]
            if func in _CPU_INDICES:
                cpu = [a for a in cpu if a.dtype not in (torch.long, torch.int, torch.bool, torch.uint8)]
            if len(devices) > 1 or (devices and cpu):
                found = sorted(str(d) for d in devices) + (["cpu"] if cpu else [])
                raise RuntimeError(
                    "Expected all tensors to be on the same device, but found at least two devices, "
                    f"{found[0]} and {found[1]}! (fake NPU, in {func})"
                )
        home = min(devices, key=str) if devices else torch.device("npu", _RT[0].current_device())
        if func is _aten._to_copy.default:
            target = kwargs.get("device")
            src = args[0].elem if isinstance(args[0], FakeNpuTensor) else args[0]
            rest = {k: v for k, v in kwargs.items() if k != "device"}
            out = func(src, *args[1:], **rest)
            if target is not None and torch.device(target).type == "cpu":
                return out
            return FakeNpuTensor(out, target if target is not None else home)
        target = home
        if "device" in kwargs and kwargs["device"] is not None:
            target = torch.device(kwargs["device"])
        inputs = {id(a.elem): a for a in flat if isinstance(a, FakeNpuTensor)}
        inputs.update({id(a): a for a in flat if _plain(a)})
        plain = [a.elem if isinstance(a, FakeNpuTensor) else a for a in flat]
        uargs, ukwargs = tree_unflatten(plain, spec)
        if "device" in ukwargs and ukwargs["device"] is not None:
            ukwargs = {**ukwargs, "device": torch.device("cpu")}
        out = func(*uargs, **ukwargs)
        out_flat, out_spec = tree_flatten(out)
        wrapped = []
        for t in out_flat:
            if isinstance(t, torch.Tensor) and not isinstance(t, FakeNpuTensor):
                if id(t) in inputs:  # in-place / out= result: the caller's own tensor
                    t = inputs[id(t)]
                elif target.type == "npu":
                    t = FakeNpuTensor(t, target)
            wrapped.append(t)
        return tree_unflatten(wrapped, out_spec)


def unwrap(t: Any) -> Any:
    return t.elem if isinstance(t, FakeNpuTensor) else t


_lib: list[Any] = []


def register(runtime: Any) -> None:
    """Rename PrivateUse1 to ``npu``, install ``runtime`` as ``torch.npu`` and the factory kernels."""
    from torch.utils import backend_registration

    _RT.append(runtime)
    backend_registration._setup_privateuseone_for_python_backend("npu", backend_module=runtime)

    def empty_memory_format(
        size: Any,
        dtype: Any = None,
        layout: Any = None,
        device: Any = None,
        pin_memory: Any = None,
        memory_format: Any = None,
    ) -> FakeNpuTensor:
        return FakeNpuTensor(torch.empty(size, dtype=dtype, memory_format=memory_format), device)

    def empty_strided(
        size: Any,
        stride: Any,
        dtype: Any = None,
        layout: Any = None,
        device: Any = None,
        pin_memory: Any = None,
    ) -> FakeNpuTensor:
        return FakeNpuTensor(torch.empty_strided(size, stride, dtype=dtype), device)

    def copy_from(src: Any, dst: Any, non_blocking: bool = False) -> Any:
        unwrap(dst).copy_(unwrap(src))
        return dst

    def copy_from_and_resize(src: Any, dst: Any) -> Any:
        d = unwrap(dst)
        d.resize_(unwrap(src).shape)
        d.copy_(unwrap(src))
        return dst

    lib = torch.library.Library("aten", "IMPL")  # noqa: TOR901 - kernels for an existing op
    lib.impl("empty.memory_format", empty_memory_format, "PrivateUse1")
    lib.impl("empty_strided", empty_strided, "PrivateUse1")
    lib.impl("_copy_from", copy_from, "PrivateUse1")
    lib.impl("_copy_from_and_resize", copy_from_and_resize, "PrivateUse1")
    _lib.append(lib)  # a Library unregisters its kernels when collected
