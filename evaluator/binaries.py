"""Evaluator side (torch-free): what a candidate's own compiled extension defines, read from the library the
evaluator itself built and stored in its build cache (no sandboxed process is asked).

- `device_entries`: the exact names of the kernels (`__global__` entry functions) in the library's embedded device
  code: the fatbinary in `.nv_fatbin`, each uncompressed cubin's ELF symbol table (entries carry STO_ENTRY).
  Compressed cubins are skipped (the kernels' identifiers still come from the sources the evaluator built).
- `registered_ops`: which of some `ns::op` names the library registers with torch *with a kernel of its own*
  (TORCH_LIBRARY: the namespace and the operator's schema are strings in the binary, and the binary imports
  torch's registration of a C++ kernel). A Python `torch.library` operator has no such string; a schema defined in
  C++ whose implementation is registered from Python has the strings but no C++ kernel registration.
- `direct_library_calls`: the library operators and BLAS routines the library calls past torch's dispatcher (read
  from its dynamic symbol table: the functions it imports), the loader's run-time lookups (`dlsym`, `dlopen`)
  that reach them with no import, and ATen's switches of the profiler's recording (`at::enableRecordFunction`).
  Such calls record no profiler event, so their time would be counted inside the candidate's own functions.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import struct
import subprocess

from .opclass import COMPUTE_CLASSES, known_op_class

_FATBIN_MAGIC = 0xBA55ED50
_STO_ENTRY = 0x10
_STT_FUNC = 2


def _sections(data: bytes) -> dict[str, tuple[int, int, int, int]]:
    """name -> (offset, size, type, link index) of a 64-bit little-endian ELF's sections."""
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        return {}
    shoff = struct.unpack_from("<Q", data, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    if not shoff or shentsize < 64 or shoff + shnum * shentsize > len(data):
        return {}
    heads = []
    for i in range(shnum):
        name, typ, _flags, _addr, off, size, link = struct.unpack_from("<IIQQQQI", data, shoff + i * shentsize)
        heads.append((name, typ, off, size, link))
    if shstrndx >= len(heads):
        return {}
    stroff = heads[shstrndx][2]
    out: dict[str, tuple[int, int, int, int]] = {}
    for idx, (name, typ, off, size, link) in enumerate(heads):
        end = data.find(b"\0", stroff + name)
        key = data[stroff + name:end].decode(errors="replace")
        out[key] = (off, size, typ, link)
        out[f"#{idx}"] = (off, size, typ, link)
    return out


def _cubin_entries(elf: bytes) -> set[str]:
    secs = _sections(elf)
    names: set[str] = set()
    for key, (off, size, typ, link) in secs.items():
        if typ != 2 or key.startswith("#"):  # SHT_SYMTAB
            continue
        strtab = secs.get(f"#{link}")
        if strtab is None:
            continue
        for i in range(size // 24):
            st_name, st_info, st_other = struct.unpack_from("<IBB", elf, off + i * 24)
            if (st_info & 0xF) == _STT_FUNC and (st_other & _STO_ENTRY):
                s = strtab[0] + st_name
                names.add(elf[s:elf.find(b"\0", s)].decode(errors="replace"))
    return names


def _fatbin_cubins(blob: bytes) -> list[bytes]:
    out = []
    p = 0
    while p + 16 <= len(blob):
        magic, _ver, hsize, fsize = struct.unpack_from("<IHHQ", blob, p)
        if magic != _FATBIN_MAGIC:
            break
        q, end = p + hsize, p + hsize + fsize
        while q + 16 <= end:
            kind, _ever, ehsize, psize = struct.unpack_from("<HHIQ", blob, q)
            payload = blob[q + ehsize:q + ehsize + psize]
            if kind == 2 and payload[:4] == b"\x7fELF":
                out.append(payload)
            q += ehsize + psize
            if ehsize == 0:
                break
        p = end
    return out


@functools.lru_cache(maxsize=256)
def _entries(path: str, mtime: float) -> frozenset[str] | None:
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return None
    sec = _sections(data).get(".nv_fatbin")
    if sec is None:
        return frozenset()
    cubins = _fatbin_cubins(data[sec[0]:sec[0] + sec[1]])
    if not cubins:
        return None  # device code there, but compressed (or a format this reader does not know)
    names: set[str] = set()
    for c in cubins:
        names |= _cubin_entries(c)
    return frozenset(names)


def device_entries(path: str) -> set[str] | None:
    """Mangled names of the kernels in a library's device code; None when it has some this reader cannot read."""
    try:
        got = _entries(path, os.stat(path).st_mtime)
    except OSError:
        return None
    return None if got is None else set(got)


def demangle(names: set[str]) -> dict[str, str]:
    """mangled -> demangled (c++filt where installed; an unmangled name stays itself)."""
    out = {n: n for n in names}
    todo = [n for n in names if n.startswith("_Z")]
    tool = shutil.which("c++filt") or shutil.which("cu++filt")
    if todo and tool:
        try:
            p = subprocess.run([tool], input="\n".join(todo), capture_output=True, text=True, timeout=20, check=False)
            for m, d in zip(todo, p.stdout.splitlines()):
                out[m] = d.strip()
        except (OSError, subprocess.TimeoutExpired):
            pass
    return out


@functools.lru_cache(maxsize=256)
def _strings(path: str, mtime: float) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return b""


@functools.lru_cache(maxsize=256)
def _imports(path: str, mtime: float) -> frozenset[str]:
    """The names of the functions a shared library imports (undefined symbols of its .dynsym)."""
    return _dynsym(path, mtime, defined=False)


@functools.lru_cache(maxsize=256)
def _exports(path: str, mtime: float) -> frozenset[str]:
    return _dynsym(path, mtime, defined=True)


def _dynsym(path: str, mtime: float, defined: bool) -> frozenset[str]:
    """The names of a shared library's dynamic symbols: those it defines, or those it imports (SHN_UNDEF)."""
    data = _strings(path, mtime)
    secs = _sections(data)
    sym = secs.get(".dynsym")
    if sym is None:
        return frozenset()
    off, size, _typ, link = sym
    strtab = secs.get(f"#{link}")
    if strtab is None:
        return frozenset()
    names: set[str] = set()
    for i in range(size // 24):
        st_name, _info, _other, st_shndx = struct.unpack_from("<IBBH", data, off + i * 24)
        if st_name and (st_shndx != 0) == defined:  # SHN_UNDEF (0): defined elsewhere
            s = strtab[0] + st_name
            names.add(data[s:data.find(b"\0", s)].decode(errors="replace"))
    return frozenset(names)


def imports(path: str) -> frozenset[str]:
    try:
        return _imports(path, os.stat(path).st_mtime)
    except OSError:
        return frozenset()


def is_python_module(path: str) -> bool:
    """The library is a Python extension module (it exports `PyInit_<name>`): the runner hands it back wrapped, so
    its functions' calls are profiled. One that is not (`load_inline(is_python_module=False)`) is called through
    ctypes or torch.ops, which no wrapper of the runner's sees."""
    try:
        names = _exports(path, os.stat(path).st_mtime)
    except OSError:
        return True
    return any(n.startswith("PyInit_") for n in names)


def _nested_name(sym: str) -> list[str]:
    """The components of an Itanium-mangled nested name: "_ZN2at3cpu9clamp_minE..." -> ["at", "cpu", "clamp_min"]."""
    m = re.match(r"_ZN[rVKRO]*", sym)
    if not m:
        return []
    out, i = [], m.end()
    while i < len(sym) and sym[i].isdigit():
        j = i
        while j < len(sym) and sym[j].isdigit():
            j += 1
        n = int(sym[i:j])
        out.append(sym[j:j + n])
        i = j + n
    return out


# ATen's per-backend entry points of its operators (ATen/ops/*_<backend>_dispatch.h), which skip the dispatcher
_ENTRY_NAMESPACES = {"cpu", "cuda", "redispatch", "compositeexplicitautograd", "compositeimplicitautograd",
                     "compositeexplicitautogradnonfunctional"}
_SNAKE = re.compile(r"[a-z][a-z0-9_]*")
_BLAS = re.compile(r"(cblas_\w+|mkl_\w+|dnnl_\w+|[sdcz](gemm|gemv|dot|axpy|scal|syrk|trsm|ger)_?)")
# ATen's switches of the profiler's recording: with recording off, the operators it calls record no event
_RECORDING = frozenset({"enableRecordFunction", "set_record_function_tls_", "clearCallbacks",
                        "clearThreadLocalCallbacks", "clearGlobalCallbacks", "removeCallback", "disableCallback"})
RECORDING_CONTROLS = frozenset(f"at::{n}" for n in _RECORDING)
# the dynamic loader's ways to reach code by name at run time: what such a binary calls no import shows
RUNTIME_LOOKUPS = frozenset({"dlsym", "dlvsym", "dlopen", "dlmopen", "dl_iterate_phdr", "_r_debug", "_dl_sym"})


def direct_library_calls(paths: list[str]) -> list[str]:
    """Library work the libraries call past torch's dispatcher: ATen operators through their per-backend entry
    points (`at::cpu::clamp_min`, `at::cuda::elu_out`) or ATen's kernels (`at::native::add_out`), ATen's cuBLAS
    wrappers (`at::cuda::blas::gemm`), CPU BLAS routines (`cblas_sgemm`, `sgemm_`); the loader's run-time
    lookups (`dlsym`, `dlopen`, `dl_iterate_phdr`), through which a binary reaches any of those by name with no
    import to show it; and ATen's switches of the profiler's recording (`at::enableRecordFunction`), under which
    any operator it calls records no event. Sorted, readable names."""
    found: set[str] = set()
    for p in paths:
        for sym in imports(p):
            if sym in RUNTIME_LOOKUPS:
                found.add(sym)
                continue
            if _BLAS.fullmatch(sym):
                found.add(sym)
                continue
            parts = _nested_name(sym)
            if len(parts) == 2 and parts[0] == "at" and parts[1] in _RECORDING:
                found.add(f"at::{parts[1]}")
                continue
            if len(parts) < 3 or parts[0] != "at":
                continue
            ns, name = parts[1], parts[2]
            if ns == "cuda" and name == "blas" and len(parts) > 3:
                found.add(f"at::cuda::blas::{parts[3]}")
            elif len(parts) == 3 and ns in _ENTRY_NAMESPACES and _SNAKE.fullmatch(name):
                found.add(f"at::{ns}::{name}")
            elif len(parts) == 3 and ns == "native" and known_op_class(name) in COMPUTE_CLASSES:
                found.add(f"at::native::{name}")
    return sorted(found)


def registers_kernels(path: str) -> bool:
    """The library registers a C++ kernel with torch's dispatcher (`torch::Library::_impl`, or `_def` with a
    function: TORCH_LIBRARY's `m.def(schema, fn)` / `m.impl(name, fn)`), not only a schema."""
    return any("5torch7Library5_impl" in s or ("5torch7Library4_def" in s and "CppFunction" in s)
               for s in imports(path))


def registered_ops(paths: list[str], names: set[str]) -> set[str]:
    """Those of `names` ("ns::op") whose namespace and operator name both appear in one of the libraries that
    registers a C++ kernel (a schema alone, implemented from Python, is not the library's code). A library with
    kernels for some of its operators and a schema alone for another cannot be told apart here."""
    found: set[str] = set()
    blobs = []
    for p in paths:
        try:
            if registers_kernels(p):
                blobs.append(_strings(p, os.stat(p).st_mtime))
        except OSError:
            continue
    for n in names:
        if "::" not in n:
            continue
        ns, op = n.split("::", 1)
        op = op.split(".", 1)[0]
        for b in blobs:
            if ns.encode() + b"\0" in b and (op.encode() + b"(" in b or b"\0" + op.encode() + b"\0" in b):
                found.add(n)
                break
    return found
