"""The bytecode layer for the running CPython: re-exports the module written for this version."""
import sys

if sys.version_info[:2] == (3, 11):
    from .py311 import *  # noqa: F401,F403
    from .py311 import __all__  # noqa: F401
else:
    raise ImportError(
        f"minidynamo supports CPython 3.11, not {sys.version_info[0]}.{sys.version_info[1]}: a new version "
        f"needs minidynamo/pyversion/py{sys.version_info[0]}{sys.version_info[1]}.py beside py311.py "
        f"(and csrc/frame_py{sys.version_info[0]}{sys.version_info[1]}.c beside csrc/frame_py311.c)"
    )
