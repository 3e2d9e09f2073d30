"""explain(): counts, guards, breaks, per-frame decompiled code and check functions; the HTML report."""
import html
import shutil
import subprocess
import sys

import pytest
import torch

import minidynamo
from minidynamo import pyversion
from minidynamo.explain import decompile

try:
    import depyf  # noqa: F401

    HAVE_DEPYF = True
except ImportError:
    HAVE_DEPYF = False
# depyf decompiles 3.11's bytecode, not 3.13's or 3.14's: the report then says it shows a `dis` listing
DECOMPILED = HAVE_DEPYF and pyversion.DECOMPILED_BY_DEPYF


def toy(a, b):
    x = a / (torch.abs(a) + 1)
    if b.sum() < 0:
        b = b * -1
    return x * b


@pytest.fixture(scope="module")
def out():
    torch.manual_seed(0)
    return minidynamo.explain(toy)(torch.randn(10), -torch.ones(10))


def test_counts_and_breaks(out):
    assert out.graph_count == 2 and out.graph_break_count == 1
    assert out.op_count == sum(len(ops) for ops in out.ops_per_graph) > 0
    assert len(out.compile_times) == 2
    reason = out.break_reasons[0]
    assert "data-dependent" in reason.reason
    assert reason.user_stack[-1].line.strip() == "if b.sum() < 0:"
    assert reason.user_stack[-1].filename == __file__


def test_guards_carry_name_source_create_function_and_code(out):
    names = {g.name for g in out.out_guards}
    assert {"L['a']", "L['b']"} <= names
    for guard in out.out_guards:
        assert isinstance(guard.create_fn_name, str) and guard.code_list
        assert guard.source is None or guard.name


def test_frames_have_decompiled_code_resume_functions_and_check_source(out):
    first, resume = out.frame_reports
    assert first.name == "toy" and first.resumes is None and first.graph_indices == [0]
    assert "__resume_at_" in first.transformed.source
    assert resume.name.startswith("__resume_at_") and resume.name.endswith("_in_toy")
    assert resume.resumes.startswith("toy at offset") and resume.graph_indices == [1]
    if DECOMPILED:
        assert first.transformed.exact and resume.transformed.exact
        assert "__compiled_graph_0(a, b)" in first.transformed.source
        assert "__compiled_graph_1" in resume.transformed.source
    else:
        for frame in (first, resume):
            assert not frame.transformed.exact
            assert frame.transformed.source.startswith("# bytecode listing (depyf ")
            assert "RETURN_VALUE" in frame.transformed.source
    for frame in (first, resume):
        assert frame.check_source and frame.guards


def test_decompile_falls_back_to_a_bytecode_listing(monkeypatch):
    monkeypatch.setitem(sys.modules, "depyf", None)  # import depyf -> ImportError
    listing = decompile(toy.__code__)
    assert not listing.exact
    why = "depyf is not installed" if pyversion.DECOMPILED_BY_DEPYF else "depyf does not decompile CPython 3.1"
    assert why in listing.source and "RETURN_VALUE" in listing.source


def test_str_is_a_readable_report(out):
    text = str(out)
    for piece in ("Graph count: 2", "Graph break count: 1", "--- break reasons ---", "--- guards ---",
                  "# transformed code", "# guard check:", "resume function: __resume_at_", "Compile time:"):
        assert piece in text, piece


def test_html_report_holds_every_graph_guard_and_break(out, tmp_path):
    path = out.render(str(tmp_path / "report.html"))
    page = open(path, encoding="utf-8").read()
    assert page.startswith("<!DOCTYPE html>") and "<script" not in page and "http" not in page
    for graph in out.graphs:
        assert html.escape(graph.code.strip()) in page
        for node in graph.graph.nodes:
            assert f"<code>{html.escape(node.name)}</code>" in page
    for guard in out.out_guards:
        assert html.escape(guard.name or "(global state)") in page
        for code in guard.code_list:
            assert html.escape(code) in page
    for reason in out.break_reasons:
        assert html.escape(reason.reason) in page
        assert '<div class="hit">' in page and html.escape("if b.sum() < 0:") in page
    for frame in out.frame_reports:
        assert html.escape(frame.transformed.source) in page
        assert html.escape(frame.check_source.rstrip()) in page


@pytest.mark.skipif(shutil.which("chromium") is None, reason="needs chromium")
def test_html_report_renders_in_a_headless_browser(out, tmp_path):
    page, shot = tmp_path / "report.html", tmp_path / "shot.png"
    out.render(str(page))
    subprocess.run(["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                    "--disable-background-networking", "--disable-component-update", "--disable-sync",
                    f"--user-data-dir={tmp_path / 'profile'}", f"--screenshot={shot}", "--window-size=1280,2000",
                    page.as_uri()], capture_output=True, timeout=60, check=True)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000
