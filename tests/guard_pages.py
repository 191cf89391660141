"""Arrays next to an inaccessible page (tests/test_page_tails.py). No podlet import: the
fault test runs this in a child process without podlet's core."""
import ctypes
import mmap

import numpy as np

PAGE = mmap.PAGESIZE
_libc = ctypes.CDLL(None, use_errno=True)
_libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
class Guarded:
    """A NumPy array whose bytes end at (where='end') or start at (where='start') a
    PROT_NONE page. Keeps its mapping alive; the mapping is never unmapped while an Array
    may still view it (podlet's wrapper holds the NumPy array, which holds this)."""

    def __init__(self, values, where):
        values = np.ascontiguousarray(values)
        nbytes = values.nbytes
        assert nbytes % 64 == 0, "operands start 64-byte aligned; to end at the page the size must be too"
        pages = -(-nbytes // PAGE)
        self.map = mmap.mmap(-1, (pages + 1) * PAGE, prot=mmap.PROT_READ | mmap.PROT_WRITE)
        base = ctypes.addressof(ctypes.c_char.from_buffer(self.map))
        guard = base + (pages * PAGE if where == "end" else 0)
        if _libc.mprotect(guard, PAGE, 0) != 0:  # PROT_NONE
            raise OSError(ctypes.get_errno(), "mprotect")
        offset = pages * PAGE - nbytes if where == "end" else PAGE
        self.array = np.frombuffer(self.map, dtype=values.dtype, count=values.size, offset=offset).reshape(values.shape)
        self.array[...] = values
        self.array.flags.writeable = False


def guarded(values, where):
    g = Guarded(values, where)
    _keep.append(g)  # mappings outlive the test: a cached Array could still view one
    return g.array


_keep = []
