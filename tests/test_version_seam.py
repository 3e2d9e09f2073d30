"""The Python-version seam: CPython 3.11's opcodes are named in minidynamo/pyversion/py311.py only, and
the build picks the C frame file of the running version (or stops with a clear message)."""
import dis
import glob
import importlib.util
import os
import re
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SEAM_DIR = os.path.join(ROOT, "minidynamo", "pyversion")

# Opcodes a version port has to revisit: new in CPython 3.11 (not in 3.10) or gone in 3.12.
NEW_IN_311 = {
    "CACHE", "PUSH_NULL", "PUSH_EXC_INFO", "CHECK_EXC_MATCH", "CHECK_EG_MATCH", "PREP_RERAISE_STAR",
    "BEFORE_WITH", "RETURN_GENERATOR", "ASYNC_GEN_WRAP", "SEND", "SWAP", "COPY", "BINARY_OP",
    "JUMP_BACKWARD", "JUMP_BACKWARD_NO_INTERRUPT", "MAKE_CELL", "COPY_FREE_VARS", "RESUME", "PRECALL", "CALL",
    "KW_NAMES",
    *(f"POP_JUMP_{way}_IF_{cond}" for way in ("FORWARD", "BACKWARD") for cond in ("TRUE", "FALSE", "NONE", "NOT_NONE")),
}
GONE_IN_312 = {
    "PRECALL", "LOAD_METHOD", "JUMP_IF_TRUE_OR_POP", "JUMP_IF_FALSE_OR_POP", "LOAD_CLASSDEREF", "UNARY_POSITIVE",
    "LIST_TO_TUPLE", "PRINT_EXPR", "IMPORT_STAR", "ASYNC_GEN_WRAP", "PREP_RERAISE_STAR",
}
VERSION_SPECIFIC = NEW_IN_311 | GONE_IN_312
# whole names, and the family prefix a name test could use (startswith("POP_JUMP"))
_PATTERN = re.compile(r"\b(?:" + "|".join(sorted(VERSION_SPECIFIC, key=len, reverse=True)) + r")\b|\bPOP_JUMP")


def _load_setup():
    spec = importlib.util.spec_from_file_location("minidynamo_setup_under_test", os.path.join(ROOT, "setup.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # defines; setup() itself runs only as __main__
    return module


@pytest.mark.skipif(sys.version_info[:2] != (3, 11), reason="the opcode list is 3.11's")
def test_version_specific_names_are_opcodes_here():
    assert VERSION_SPECIFIC <= set(dis.opmap), sorted(VERSION_SPECIFIC - set(dis.opmap))


def test_version_specific_opcodes_are_named_only_in_the_seam():
    seam = os.path.join(SEAM_DIR, "py311.py")
    found = []
    for path in sorted(glob.glob(os.path.join(ROOT, "minidynamo", "**", "*.py"), recursive=True)):
        if path == seam:
            continue
        with open(path) as f:
            for lineno, line in enumerate(f, 1):
                for match in _PATTERN.finditer(line):
                    found.append(f"{os.path.relpath(path, ROOT)}:{lineno}: {match.group()}")
    assert not found, "3.11-only opcode names outside minidynamo/pyversion/py311.py:\n" + "\n".join(found)


def test_the_pattern_sees_what_the_seam_names():
    """The scan is not vacuous: the seam module itself names the opcodes the pattern looks for."""
    with open(os.path.join(SEAM_DIR, "py311.py")) as f:
        named = {m.group() for m in _PATTERN.finditer(f.read())}
    assert {"PRECALL", "KW_NAMES", "PUSH_NULL", "RESUME", "COPY_FREE_VARS", "MAKE_CELL", "POP_JUMP",
            "POP_JUMP_FORWARD_IF_TRUE", "JUMP_BACKWARD", "LOAD_METHOD", "CALL", "COPY"} <= named


def test_translator_handlers_of_version_opcodes_come_from_the_version_module():
    from minidynamo import pyversion
    from minidynamo.symbolic_convert import InstructionTranslatorBase

    assert issubclass(InstructionTranslatorBase, pyversion.VersionHandlers)
    handled_here = {name for name in vars(InstructionTranslatorBase) if name.isupper()}
    assert not handled_here & VERSION_SPECIFIC, sorted(handled_here & VERSION_SPECIFIC)


@pytest.mark.parametrize("version", [(3, 11, 7, "final", 0), (3, 13, 5), (3, 14, 10)])
def test_setup_compiles_the_frame_file_of_the_version(monkeypatch, version):
    monkeypatch.chdir(ROOT)
    setup = _load_setup()
    sources = setup.c_sources(version)
    shared = [p for p in sorted(glob.glob("csrc/*.c")) if not os.path.basename(p).startswith("frame_py")]
    assert "csrc/frame.c" in shared
    assert sources == sorted(shared + [f"csrc/frame_py{version[0]}{version[1]}.c"])
    if sys.version_info[:2] == version[:2]:
        assert setup.c_sources() == sources


def test_setup_picks_another_versions_frame_file_when_one_is_listed(monkeypatch):
    monkeypatch.chdir(ROOT)
    setup = _load_setup()
    monkeypatch.setitem(setup.FRAME_FILES, (3, 12), "csrc/frame_py312.c")
    sources = setup.c_sources((3, 12, 0))
    assert "csrc/frame_py312.c" in sources and "csrc/frame_py311.c" not in sources
    assert [p for p in sources if "frame_py" in p] == ["csrc/frame_py312.c"]


@pytest.mark.parametrize("version", [(3, 10, 14), (3, 12, 1), (3, 15, 0)])
def test_setup_stops_with_a_clear_message_on_an_unsupported_version(monkeypatch, version):
    monkeypatch.chdir(ROOT)
    setup = _load_setup()
    with pytest.raises(SystemExit) as info:
        setup.c_sources(version)
    message = str(info.value.code)
    tag = f"{version[0]}{version[1]}"
    assert f"supports CPython 3.11, 3.13, 3.14, not {version[0]}.{version[1]}" in message
    assert f"csrc/frame_py{tag}.c" in message and f"minidynamo/pyversion/py{tag}.py" in message


def test_each_python_bytecode_module_has_its_c_frame_file():
    """The C layer of a version may land before its Python layer, never the other way round."""
    setup = _load_setup()
    c_versions = {f"py{major}{minor}" for major, minor in setup.FRAME_FILES}
    py_versions = {os.path.basename(p)[:-3] for p in glob.glob(os.path.join(SEAM_DIR, "py[0-9]*.py"))}
    frame_files = {os.path.basename(p)[len("frame_"):-2] for p in glob.glob(os.path.join(ROOT, "csrc", "frame_py*.c"))}
    assert c_versions == frame_files
    assert py_versions <= c_versions


def test_importing_the_seam_on_an_unsupported_version_says_what_to_add(monkeypatch):
    monkeypatch.setattr(sys, "version_info", (3, 12, 0, "final", 0))
    spec = importlib.util.spec_from_file_location("pyversion_under_test", os.path.join(SEAM_DIR, "__init__.py"))
    with pytest.raises(ImportError, match=r"supports CPython 3\.11, not 3\.12.*pyversion/py312\.py.*frame_py312\.c"):
        spec.loader.exec_module(importlib.util.module_from_spec(spec))
