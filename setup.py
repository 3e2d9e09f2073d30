"""Builds minidynamo._C: the C core in csrc/ plus the frame layer of the running CPython version."""
import glob
import sys
from typing import Dict, List, Sequence, Tuple

from setuptools import Extension, setup

# One C file per supported CPython version knows its frame layout (csrc/frame.c holds what they share);
# minidynamo/pyversion/ has the matching Python module for its bytecode.
FRAME_FILES: Dict[Tuple[int, int], str] = {
    (3, 11): "csrc/frame_py311.c",
    (3, 13): "csrc/frame_py313.c",
    (3, 14): "csrc/frame_py314.c",
}
_FRAME_PREFIX = "csrc/frame_py"


def c_sources(version: Sequence[int] = sys.version_info) -> List[str]:
    """The C files to compile for CPython `version`: the shared core and that version's frame file.
    Stops the build with a message naming the supported versions on any other version."""
    major, minor = version[0], version[1]
    frame_file = FRAME_FILES.get((major, minor))
    if frame_file is None:
        supported = ", ".join(f"{a}.{b}" for a, b in sorted(FRAME_FILES))
        raise SystemExit(
            f"minidynamo supports CPython {supported}, not {major}.{minor}. Adding {major}.{minor} takes "
            f"csrc/frame_py{major}{minor}.c and minidynamo/pyversion/py{major}{minor}.py (see README)."
        )
    shared = [path for path in sorted(glob.glob("csrc/*.c")) if not path.startswith(_FRAME_PREFIX)]
    return sorted(shared + [frame_file])


if __name__ == "__main__":
    setup(
        ext_modules=[
            Extension(
                "minidynamo._C",
                sources=c_sources(),
                depends=sorted(glob.glob("csrc/*.h")),
                extra_compile_args=["-O2", "-std=c11", "-Wall", "-Wno-missing-field-initializers"],
            )
        ]
    )
