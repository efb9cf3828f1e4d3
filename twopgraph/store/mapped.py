"""Memory-mapped files that change under a running process: never a SIGBUS, one line instead.

Every store array is read through a read-only memory map (:mod:`twopgraph.store.reader`). If another
process truncates a mapped file (``truncate -s 4096 feat.npy``), the next read of a page past
the new end raises SIGBUS, which kills Python outright ("Bus error", exit 135, nothing else:
no message, no cleanup). Two defences:

* **A SIGBUS handler** (:func:`install`): a numba ``@cfunc``, i.e. machine code that runs
  without the interpreter (a Python-level handler would only run after the faulting
  instruction, which repeats forever), installed with libc's ``sigaction``. It looks the
  faulting address (``siginfo.si_addr``) up in a table of the registered maps, writes one
  prepared line ``twopgraph: error: <file> shrank while this run read it ...`` to stderr with
  ``write(2)`` and ends the process with ``_exit(2)``: only async-signal-safe calls. Any
  thread may fault (numba's parallel workers, torch's): the first claims the report with an
  atomic exchange, the others wait in ``pause()`` for the exit. Files are written atomically
  (temporary name, then rename) everywhere, so the last checkpoint is intact; the lock of the
  run (a dead pid) does not block the next one. An address outside every registered map (a
  scratch file on a full disk, a map this module does not know) gets a generic line, exit 2.
* **Checks at safe points** (:func:`check`): the registered files are ``fstat``-ed (the very
  inode mapped: each registration keeps a descriptor open), and a file that shrank or was
  modified in place since it was mapped is a :class:`StoreChanged` error (one line, exit 2,
  unwinding normally: lock released, ``metrics.json`` written). The loader calls it before
  every batch; it costs a few microseconds.

The handler has no NumPy twin: it is not a kernel (no array result), it is tested by a
subprocess that truncates a mapped file (``tests/faults/test_live_data.py``).
"""

from __future__ import annotations

import ctypes
import os
import signal
import threading
import weakref

import numpy as np
from llvmlite import binding as llvm
from llvmlite import ir
from numba import cfunc, types
from numba.core import cgutils
from numba.extending import intrinsic

from twopgraph.errors import GraphFormatError

#: Maps the handler can name at once (a store has at most 8 arrays; a run maps 2-3 stores).
CAPACITY = 256
#: Bytes of one prepared message.
MSG_BYTES = 1024
_GENERIC = (b"twopgraph: error: bus error (SIGBUS) reading a memory-mapped file: a file this "
            b"process maps shrank while it ran, or its disk is full or failed; stopped at once "
            b"(files written so far, e.g. the last checkpoint, are intact)\n")


class StoreChanged(GraphFormatError):
    """A store file was truncated or rewritten in place (while mapped, or since the store was
    written). ``what`` says what changed, without the advice (for a caller that rebuilds)."""

    def __init__(self, message: str, what: str | None = None) -> None:
        super().__init__(message)
        self.what = what or message


class _State:
    """The handler's tables, at fixed addresses for the life of the process: ``table`` rows
    are ``(start, end, message offset, message length)`` of live maps (free: ``end == 0``),
    ``msgs`` the prepared lines, ``state`` what the handler reads: the claim of the first
    faulting thread and the addresses of the others."""

    def __init__(self) -> None:
        self.table = np.zeros((CAPACITY, 4), dtype=np.int64)
        self.msgs = np.zeros(CAPACITY * MSG_BYTES + MSG_BYTES, dtype=np.uint8)
        g = np.frombuffer(_GENERIC[:MSG_BYTES], dtype=np.uint8)
        self.msgs[CAPACITY * MSG_BYTES:CAPACITY * MSG_BYTES + g.size] = g
        self.state = np.zeros(8, dtype=np.int64)
        self.state[[_TABLE, _MSGS, _GEN_OFF, _GEN_LEN, _ROWS]] = (
            self.table.ctypes.data, self.msgs.ctypes.data, CAPACITY * MSG_BYTES, g.size,
            CAPACITY)
        self.lock = threading.Lock()
        self.files: dict[int, tuple] = {}  # slot -> (path, fd, mapped bytes, mtime_ns)
        self.handler = None  # the cfunc (kept alive)
        self.installed = False


# ----------------------------------------------------------------------------------------------
# the handler (numba cfunc, cached on disk: it names libc's functions and its state by symbol,
# resolved when it is loaded, so the machine code holds no address of this process)
# ----------------------------------------------------------------------------------------------
#: Symbol of the handler's state (``_State.state``), registered with llvmlite before loading.
_SYMBOL = "twopgraph_livemap_state"
# state slots (int64): the claim flag, the table's and the messages' addresses, the generic
# message's offset and length, the table's rows
_FLAG, _TABLE, _MSGS, _GEN_OFF, _GEN_LEN, _ROWS = range(6)

_i64 = ir.IntType(64)
_i32 = ir.IntType(32)


def _libc_fn(builder, name, ret, args):
    return cgutils.get_or_insert_function(builder.module, ir.FunctionType(ret, args), name)


@intrinsic
def _state_base(typingctx):
    """Address of the state array (the external symbol :data:`_SYMBOL`)."""
    def codegen(context, builder, sig, args):
        gv = builder.module.globals.get(_SYMBOL)
        if gv is None:
            gv = ir.GlobalVariable(builder.module, _i64, name=_SYMBOL)
            gv.linkage = "external"
        return builder.ptrtoint(gv, _i64)
    return types.int64(), codegen


@intrinsic
def _load(typingctx, addr):
    """The int64 at address ``addr``."""
    def codegen(context, builder, sig, args):
        return builder.load(builder.inttoptr(args[0], _i64.as_pointer()))
    return types.int64(types.int64), codegen


@intrinsic
def _claim(typingctx, addr):
    """Atomically set the int64 at ``addr`` to 1; its old value."""
    def codegen(context, builder, sig, args):
        ptr = builder.inttoptr(args[0], _i64.as_pointer())
        return builder.atomic_rmw("xchg", ptr, ir.Constant(_i64, 1), "seq_cst")
    return types.int64(types.int64), codegen


@intrinsic
def _ptr_int(typingctx, ptr):
    """A ``void*`` as an integer address."""
    def codegen(context, builder, sig, args):
        return builder.ptrtoint(args[0], _i64)
    return types.int64(types.voidptr), codegen


@intrinsic
def _write_stderr(typingctx, addr, size):
    """libc ``write(2, addr, size)`` (async-signal-safe)."""
    def codegen(context, builder, sig, args):
        fn = _libc_fn(builder, "write", _i64, [_i32, cgutils.voidptr_t, _i64])
        builder.call(fn, [ir.Constant(_i32, 2), builder.inttoptr(args[0], cgutils.voidptr_t),
                          args[1]])
        return context.get_dummy_value()
    return types.none(types.int64, types.int64), codegen


@intrinsic
def _exit_now(typingctx, code):
    """libc ``_exit(code)`` (async-signal-safe; no atexit handlers, no flushing)."""
    def codegen(context, builder, sig, args):
        fn = _libc_fn(builder, "_exit", ir.VoidType(), [_i32])
        builder.call(fn, [builder.trunc(args[0], _i32)])
        return context.get_dummy_value()
    return types.none(types.int64), codegen


@intrinsic
def _pause(typingctx):
    """libc ``pause()``: sleep until a signal (here: until the reporting thread exits)."""
    def codegen(context, builder, sig, args):
        fn = _libc_fn(builder, "pause", _i32, [])
        builder.call(fn, [])
        return context.get_dummy_value()
    return types.none(), codegen


def _handler_py(sig, info, ctx):
    # siginfo_t: si_signo, si_errno, si_code (3 ints, padded to 16 bytes), then si_addr
    fault = _load(_ptr_int(info) + 16)
    base = _state_base()
    if _claim(base + 8 * _FLAG) != 0:  # another thread is reporting: wait for its _exit
        while True:
            _pause()
    table, msgs = _load(base + 8 * _TABLE), _load(base + 8 * _MSGS)
    ptr, size = msgs + _load(base + 8 * _GEN_OFF), _load(base + 8 * _GEN_LEN)
    for i in range(_load(base + 8 * _ROWS)):
        row = table + 32 * i
        start, end = _load(row), _load(row + 8)
        if end != 0 and start <= fault < end:
            ptr, size = msgs + _load(row + 16), _load(row + 24)
            break
    _write_stderr(ptr, size)
    _exit_now(2)


_STATE = _State()


def _compiled_handler():
    """The cfunc of :func:`_handler_py` (compiled once, then loaded from numba's cache)."""
    llvm.add_symbol(_SYMBOL, _STATE.state.ctypes.data)
    return cfunc(types.void(types.int32, types.voidptr, types.voidptr), nopython=True,
                 cache=True)(_handler_py)


def install() -> bool:
    """Install the SIGBUS handler once per process (idempotent, thread-safe); False where it
    cannot be (no libc ``sigaction``)."""
    st = _STATE
    if st.installed:
        return True
    with st.lock:
        if st.installed:
            return True
        try:
            st.handler = _compiled_handler()
            libc = ctypes.CDLL(None, use_errno=True)
            act = (ctypes.c_char * 256)()  # struct sigaction (152 bytes on x86-64/aarch64)
            ctypes.memmove(act, ctypes.byref(ctypes.c_void_p(st.handler.address)), 8)
            flags = ctypes.c_int(0x4)  # SA_SIGINFO (sa_mask: empty)
            ctypes.memmove(ctypes.addressof(act) + 8 + 128, ctypes.byref(flags), 4)
            sigaction = libc.sigaction
            sigaction.argtypes = (ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)
            sigaction.restype = ctypes.c_int
            if sigaction(int(signal.SIGBUS), act, None) != 0:
                return False
        except (OSError, AttributeError):
            return False
        st.installed = True
        return True


# ----------------------------------------------------------------------------------------------
# registration and checks
# ----------------------------------------------------------------------------------------------
def _message(path: str, hint: str) -> bytes:
    line = (f"twopgraph: error: {path} shrank while this run read it (a memory-mapped store "
            f"file truncated by another process); stopped at once, files written so far (the "
            f"last checkpoint) are intact; {hint}\n").encode(errors="replace")
    if len(line) > MSG_BYTES:
        line = line[:MSG_BYTES - 2] + b"\n"
    return line


def register(arr: np.ndarray, path: str | os.PathLike,
             hint: str = "delete the store folder to rebuild it") -> None:
    """Watch the memory map ``arr`` of the file at ``path``: a SIGBUS inside it names the file
    (see :func:`install`) and :func:`check` notices it shrinking or changing. Unregistered when
    ``arr`` is garbage-collected. A no-op for arrays that are not memory maps."""
    mm = getattr(arr, "_mmap", None)
    if mm is None or arr.nbytes == 0:
        return
    install()
    st = _STATE
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        s = os.fstat(fd)
    except OSError:
        return
    start = int(arr.ctypes.data)
    end = start + int(arr.nbytes)
    offset = getattr(arr, "offset", 0) or 0
    msg = np.frombuffer(_message(str(path), hint), dtype=np.uint8)
    with st.lock:
        free = np.flatnonzero(st.table[:, 1] == 0)
        if free.size == 0:
            os.close(fd)
            return
        slot = int(free[0])
        st.msgs[slot * MSG_BYTES:slot * MSG_BYTES + msg.size] = msg
        st.table[slot, 2:] = (slot * MSG_BYTES, msg.size)
        st.table[slot, 0] = start
        st.table[slot, 1] = end  # last: the row is live from here on
        st.files[slot] = (str(path), fd, int(offset) + int(arr.nbytes), s.st_mtime_ns)
    weakref.finalize(arr, _unregister, slot)


def _unregister(slot: int) -> None:
    st = _STATE
    with st.lock:
        st.table[slot, 1] = 0
        st.table[slot, 0] = 0
        rec = st.files.pop(slot, None)
    if rec is not None:
        try:
            os.close(rec[1])
        except OSError:
            pass


def check() -> None:
    """Raise :class:`StoreChanged` (one line) if a registered file shrank below what is mapped
    or was modified since it was mapped. A few ``fstat`` calls."""
    st = _STATE
    if not st.files:
        return
    with st.lock:
        recs = list(st.files.values())
    for path, fd, need, mtime in recs:
        try:
            s = os.fstat(fd)
        except OSError:
            continue  # closed meanwhile (unregistered)
        if s.st_size < need:
            raise StoreChanged(f"{path} shrank to {s.st_size:,} bytes (of {need:,}) while this "
                               f"run read it (truncated by another process); stopped, the last "
                               f"checkpoint is intact; delete the store folder to rebuild it")
        if s.st_mtime_ns != mtime:
            raise StoreChanged(f"{path} was modified while this run read it (rewritten in place "
                               f"by another process); stopped, the last checkpoint is intact; "
                               f"delete the store folder to rebuild it")


def watched() -> list[str]:
    """Paths of the files registered now (for tests and diagnostics)."""
    with _STATE.lock:
        return [rec[0] for rec in _STATE.files.values()]
