"""ODR / ISA safety of the kernel objects (the note in kernels/avx2_engine.h and
amx_tiles.h): a file compiled for an ISA the host may lack (*_avx2, *_avx512*, *_amx)
must define no weak symbol (a template or inline function with external linkage): the
linker may keep that copy for the whole library, and a host without the ISA would then
crash in code that never asked for it. Checked with nm on the objects of the build that
podlet._core was loaded from."""
import glob
import os
import subprocess

from podlet import _core

ISA_SUFFIXES = ("_avx2.cc.o", "_avx512.cc.o", "_avx512bf16.cc.o", "_amx.cc.o")
ALLOWED = {"DW.ref.__gxx_personality_v0"}  # the C++ personality routine's reference: no code


def kernel_objects():
    here = os.path.dirname(os.path.abspath(_core.__file__))
    for _ in range(5):
        objs = glob.glob(os.path.join(here, "CMakeFiles", "_core.dir", "cpp", "podlet", "kernels", "*.o"))
        if objs:
            return objs
        here = os.path.dirname(here)
    raise AssertionError(f"no CMakeFiles/_core.dir/.../kernels/*.o above {_core.__file__}: "
                         "run the tests against an editable (or sanitizer) build")


def test_isa_objects_define_no_weak_symbols():
    objs = [o for o in kernel_objects() if o.endswith(ISA_SUFFIXES)]
    assert any(o.endswith("_amx.cc.o") for o in objs) and any(o.endswith("_avx2.cc.o") for o in objs)
    bad = {}
    for o in objs:
        out = subprocess.run(["nm", "-C", "--defined-only", o], capture_output=True, text=True, check=True).stdout
        weak = [ln.split(maxsplit=2)[2] for ln in out.splitlines()
                if len(ln.split(maxsplit=2)) == 3 and ln.split(maxsplit=2)[1] in ("W", "V", "u")]
        weak = [w for w in weak if w not in ALLOWED]
        if weak:
            bad[os.path.basename(o)] = weak[:5]
    assert not bad, f"weak symbols in ISA objects (see kernels/avx2_engine.h's ODR note): {bad}"
