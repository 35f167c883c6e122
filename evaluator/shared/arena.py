"""Worker side: one block of memory shared by the referee and a candidate's runner, passed as a file descriptor.

The referee allocates it and places the candidate's inputs and the output slots in it; the runner maps the same
memory and sees them as tensors without a copy. Nothing else crosses between the two processes: no pickles, no
Python objects, only bytes at offsets the referee chose.

- CPU: a `memfd` (anonymous shared memory), mapped by both, sealed at its size (neither side can resize it).
- CUDA: device memory from the driver's virtual memory API (`cuMemCreate`), exported as a POSIX file descriptor
  (`cuMemExportToShareableHandle`) and imported by the runner (`cuMemImportFromShareableHandle`). Unlike the
  legacy `cudaIpc*` handles this works between PID namespaces: the descriptor travels over a Unix socket.

Descriptors travel with `socket.send_fds` (see pool.py / worker.py).
"""

from __future__ import annotations

import ctypes
import fcntl
import mmap
import os
from typing import Any

import torch

ALIGN = 512


def align(n: int, a: int = ALIGN) -> int:
    return (n + a - 1) // a * a


# -- the CUDA driver's virtual memory management API ----------------------------------------------------------------

class _Location(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


class _AllocFlags(ctypes.Structure):
    _fields_ = [("compressionType", ctypes.c_ubyte), ("gpuDirectRDMACapable", ctypes.c_ubyte),
                ("usage", ctypes.c_ushort), ("reserved", ctypes.c_ubyte * 4)]


class _AllocProp(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("requestedHandleTypes", ctypes.c_int), ("location", _Location),
                ("win32HandleMetaData", ctypes.c_void_p), ("allocFlags", _AllocFlags)]


class _AccessDesc(ctypes.Structure):
    _fields_ = [("location", _Location), ("flags", ctypes.c_int)]


_CU_MEM_ALLOCATION_TYPE_PINNED = 1
_CU_MEM_HANDLE_TYPE_POSIX_FD = 1
_CU_MEM_LOCATION_TYPE_DEVICE = 1
_CU_MEM_ACCESS_FLAGS_PROT_READWRITE = 3
_CU_MEM_ALLOC_GRANULARITY_RECOMMENDED = 1


class DriverError(RuntimeError):
    pass


_cu: Any = None


def _driver() -> Any:
    global _cu
    if _cu is None:
        lib = ctypes.CDLL("libcuda.so.1")
        for name in ("cuMemCreate", "cuMemRelease", "cuMemExportToShareableHandle", "cuMemImportFromShareableHandle",
                     "cuMemAddressReserve", "cuMemAddressFree", "cuMemMap", "cuMemUnmap", "cuMemSetAccess",
                     "cuMemGetAllocationGranularity", "cuGetErrorString", "cuCtxGetCurrent"):
            getattr(lib, name).restype = ctypes.c_int
        _cu = lib
    return _cu


def _check(r: int, what: str) -> None:
    if r != 0:
        s = ctypes.c_char_p()
        _driver().cuGetErrorString(r, ctypes.byref(s))
        raise DriverError(f"{what}: CUDA driver error {r} ({(s.value or b'?').decode()})")


def _prop(device_index: int) -> _AllocProp:
    p = _AllocProp()
    p.type = _CU_MEM_ALLOCATION_TYPE_PINNED
    p.requestedHandleTypes = _CU_MEM_HANDLE_TYPE_POSIX_FD
    p.location = _Location(_CU_MEM_LOCATION_TYPE_DEVICE, device_index)
    return p


class _CudaArrayInterface:
    """What torch.as_tensor needs to wrap raw device memory without a copy."""

    def __init__(self, ptr: int, nbytes: int) -> None:
        self.__cuda_array_interface__ = {"shape": (nbytes,), "typestr": "|u1", "data": (ptr, False), "version": 3,
                                         "strides": None, "stream": None}


class Arena:
    """A shared byte buffer: `tensor` is a uint8 tensor over all of it; `view()` carves typed tensors."""

    def __init__(self, device: torch.device, nbytes: int, fd: int | None = None) -> None:
        self.device = device
        self.fd = -1
        self._handle = ctypes.c_ulonglong(0)
        self._ptr = ctypes.c_ulonglong(0)
        self._mm: mmap.mmap | None = None
        self.closed = False
        if device.type == "cuda":
            self._init_cuda(nbytes, fd)
        else:
            self._init_cpu(nbytes, fd)

    # CPU: memfd + mmap
    def _init_cpu(self, nbytes: int, fd: int | None) -> None:
        self.nbytes = align(max(nbytes, 1), mmap.PAGESIZE)
        if fd is None:
            # sealed at its size: the runner holds the same file and could otherwise truncate it under the referee
            # (whose next write would die of SIGBUS)
            fd = os.memfd_create("klsp-arena", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
            os.ftruncate(fd, self.nbytes)
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL)
        else:
            self.nbytes = os.fstat(fd).st_size
        self.fd = fd
        self._mm = mmap.mmap(fd, self.nbytes, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        self.tensor = torch.frombuffer(self._mm, dtype=torch.uint8, count=self.nbytes)

    # CUDA: driver VMM, exported as a POSIX fd
    def _init_cuda(self, nbytes: int, fd: int | None) -> None:
        cu = _driver()
        idx = self.device.index if self.device.index is not None else torch.cuda.current_device()
        torch.cuda.set_device(idx)
        torch.cuda.current_stream(idx)  # makes the primary context current on this thread
        prop = _prop(idx)
        gran = ctypes.c_size_t(0)
        _check(cu.cuMemGetAllocationGranularity(ctypes.byref(gran), ctypes.byref(prop),
                                                _CU_MEM_ALLOC_GRANULARITY_RECOMMENDED), "granularity")
        if fd is None:
            self.nbytes = align(max(nbytes, 1), gran.value)
            _check(cu.cuMemCreate(ctypes.byref(self._handle), ctypes.c_size_t(self.nbytes), ctypes.byref(prop),
                                  ctypes.c_ulonglong(0)), "cuMemCreate")
            out = ctypes.c_int(-1)
            _check(cu.cuMemExportToShareableHandle(ctypes.byref(out), self._handle, _CU_MEM_HANDLE_TYPE_POSIX_FD,
                                                   ctypes.c_ulonglong(0)), "cuMemExportToShareableHandle")
            self.fd = out.value
        else:
            self.nbytes = align(max(nbytes, 1), gran.value)
            _check(cu.cuMemImportFromShareableHandle(ctypes.byref(self._handle), ctypes.c_void_p(fd),
                                                     _CU_MEM_HANDLE_TYPE_POSIX_FD), "cuMemImportFromShareableHandle")
            self.fd = fd
        _check(cu.cuMemAddressReserve(ctypes.byref(self._ptr), ctypes.c_size_t(self.nbytes), ctypes.c_size_t(0),
                                      ctypes.c_ulonglong(0), ctypes.c_ulonglong(0)), "cuMemAddressReserve")
        _check(cu.cuMemMap(self._ptr, ctypes.c_size_t(self.nbytes), ctypes.c_size_t(0), self._handle,
                           ctypes.c_ulonglong(0)), "cuMemMap")
        desc = _AccessDesc(_Location(_CU_MEM_LOCATION_TYPE_DEVICE, idx), _CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
        _check(cu.cuMemSetAccess(self._ptr, ctypes.c_size_t(self.nbytes), ctypes.byref(desc), ctypes.c_size_t(1)),
               "cuMemSetAccess")
        self.tensor = torch.as_tensor(_CudaArrayInterface(self._ptr.value, self.nbytes), device=self.device)

    def view(self, offset: int, shape: list[int] | tuple[int, ...], dtype: torch.dtype,
             stride: list[int] | tuple[int, ...] | None = None) -> torch.Tensor:
        """A tensor of `shape`/`dtype` (contiguous unless `stride`) over the bytes at `offset`."""
        esize = torch.empty((), dtype=dtype).element_size()
        n = 1
        for s in shape:
            n *= int(s)
        if stride is None:
            span = n
        else:
            span = 1 + sum((int(d) - 1) * int(st) for d, st in zip(shape, stride)) if n else 0
        nbytes = max(span, 0) * esize
        if offset % esize or offset < 0 or offset + nbytes > self.nbytes:
            raise ValueError(f"arena view out of bounds: offset {offset}, {nbytes} bytes of {self.nbytes}")
        flat = self.tensor[offset:offset + nbytes].view(dtype)
        if stride is None:
            return flat.view(tuple(int(s) for s in shape))
        return flat.as_strided(tuple(int(s) for s in shape), tuple(int(s) for s in stride))

    def close(self) -> None:
        """Unmap (the memory is freed once every process holding it has closed it)."""
        if self.closed:
            return
        self.closed = True
        self.tensor = None  # type: ignore[assignment]
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            cu = _driver()
            cu.cuMemUnmap(self._ptr, ctypes.c_size_t(self.nbytes))
            cu.cuMemAddressFree(self._ptr, ctypes.c_size_t(self.nbytes))
            cu.cuMemRelease(self._handle)
        elif self._mm is not None:
            try:
                self._mm.close()
            except BufferError:  # a view is still alive somewhere; the mapping goes with the process
                pass
        if self.fd >= 0:
            try:
                os.close(self.fd)
            except OSError:
                pass
            self.fd = -1
