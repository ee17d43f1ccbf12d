"""Caller memory for native I/O, without copies: (address, length) and an object that keeps the memory
valid until the operation finished. Accepted: torch CPU tensors (contiguous), and any C-contiguous
buffer-protocol object (bytes, bytearray, memoryview, numpy arrays, mmap, array.array)."""

from __future__ import annotations

from . import _native


class Memory:
    __slots__ = ("address", "nbytes", "_owner", "_pinned")

    def __init__(self, address: int, nbytes: int, owner, pinned=None):
        self.address = address
        self.nbytes = nbytes
        self._owner = owner
        self._pinned = pinned

    def release(self) -> None:
        if self._pinned is not None:
            self._pinned.release()
            self._pinned = None
        self._owner = None


def _is_torch_tensor(obj) -> bool:
    cls = type(obj)
    return cls.__module__.startswith("torch") and hasattr(obj, "data_ptr") and hasattr(obj, "untyped_storage")


def memory_of(obj, writable: bool) -> Memory:
    """Pins `obj`'s memory. A writable request refuses read-only buffers (bytes)."""
    if _is_torch_tensor(obj):
        if obj.device.type != "cpu":
            raise ValueError(f"fjord: tensor on {obj.device}; only CPU tensors are read or written in place")
        if not obj.is_contiguous():
            raise ValueError("fjord: the tensor is not contiguous (call .contiguous() first)")
        return Memory(obj.data_ptr(), obj.numel() * obj.element_size(), obj)
    try:
        pinned = _native.pin(obj, writable)
    except (BufferError, ValueError) as e:
        what = "a writable, C-contiguous buffer" if writable else "a C-contiguous buffer"
        raise TypeError(f"fjord: {type(obj).__name__} is not {what}: {e}") from None
    except TypeError:
        raise TypeError(f"fjord: {type(obj).__name__} does not support the buffer protocol") from None
    return Memory(pinned.address, pinned.nbytes, obj, pinned)


def crc32c(obj, crc: int = 0) -> int:
    """CRC32C (Castagnoli) of a buffer or CPU tensor's bytes, continuing `crc` (ISA-L, GIL released)."""
    memory = memory_of(obj, writable=False)
    try:
        return _native.crc32c(memory.address, memory.nbytes, crc)
    finally:
        memory.release()
