"""Long kernel builds show progress on stderr (kernels built / total: live on a terminal, one line
otherwise; off with config.compile_progress), and large libraries build as several translation
units in parallel."""
import io

import pytest
import torch

import minidynamo
from minidynamo.codegen import cpp_build
from minidynamo.codegen.build_progress import BuildProgress
from test_cpp_backend import assert_close


@pytest.fixture(autouse=True)
def _fresh(tmp_path, monkeypatch):
    monkeypatch.setattr(minidynamo.config, "cache_dir", str(tmp_path))  # every graph is built
    minidynamo.reset()
    yield
    minidynamo.reset()


def _chain(x, w):
    """Kernel groups between matmuls: one translation unit each."""
    for i in range(6):
        x = torch.tanh(x * (i + 1)).softmax(-1) @ w
    return x


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_long_build_prints_one_line_off_a_terminal(monkeypatch, capsys):
    monkeypatch.setattr(minidynamo.config, "compile_progress_after", 0.0)  # every build is "long"
    x, w = torch.randn(8, 16), torch.randn(16, 16)
    assert_close(minidynamo.optimize("cpp")(_chain)(x, w), _chain(x, w))
    lines = [ln for ln in capsys.readouterr().err.splitlines() if "g++" in ln]
    assert len(lines) == 1 and "kernels built" in lines[0]
    built, total = lines[0].split("g++: ")[1].split(" ")[0].split("/")
    assert built == total and int(total) >= 6


def test_progress_off_with_config_flag(monkeypatch, capsys):
    monkeypatch.setattr(minidynamo.config, "compile_progress_after", 0.0)
    monkeypatch.setattr(minidynamo.config, "compile_progress", False)
    x, w = torch.randn(8, 16), torch.randn(16, 16)
    minidynamo.optimize("cpp")(_chain)(x, w)
    assert "g++" not in capsys.readouterr().err


def test_short_build_prints_nothing(capsys):
    minidynamo.optimize("cpp")(lambda x: x.sin() + 1)(torch.randn(4))
    assert "g++" not in capsys.readouterr().err  # far under compile_progress_after (2 s)


def test_terminal_line_counts_kernels_as_units_finish(monkeypatch):
    monkeypatch.setattr(minidynamo.config, "compile_progress_after", 0.0)
    out = _Terminal()
    progress = BuildProgress(total=10, units=2, stream=out)
    progress.update(0)
    progress.update(6)
    progress.finish()
    text = out.getvalue()
    assert "\r[minidynamo] g++: 0/10 kernels built" in text and "\r[minidynamo] g++: 6/10" in text
    assert "10/10 kernels built in 2 parallel units" in text.rsplit("\r", 1)[1] and text.endswith("\n")


def test_translation_units_split_groups_and_keep_the_prelude():
    head = "// prelude\n"
    bodies = [f"static void kernel{i}() {{}}\nextern \"C\" void group{i}() {{ kernel{i}(); }}" for i in range(40)]
    units = cpp_build.translation_units(head + cpp_build.UNIT_BREAK + cpp_build.UNIT_BREAK.join(bodies), jobs=2)
    assert 1 < len(units) <= 4
    assert sum(n for _, n in units) == 40
    assert all(text.startswith(head) for text, _ in units)
    assert "".join(text for text, _ in units).count("extern \"C\" void group") == 40
    assert len(cpp_build.translation_units(head, jobs=2)) == 1


def test_library_built_in_units_runs_every_group(monkeypatch):
    monkeypatch.setattr(cpp_build, "UNIT_MIN_KERNELS", 1)
    monkeypatch.setattr(cpp_build, "_jobs", lambda: 2)
    split = cpp_build.translation_units
    seen = []
    monkeypatch.setattr(cpp_build, "translation_units", lambda *a: seen.append(split(*a)) or seen[-1])
    x, w = torch.randn(8, 24), torch.randn(24, 24)  # a new library (built libraries are kept in memory)
    assert_close(minidynamo.optimize("cpp")(_chain)(x, w), _chain(x, w))
    assert minidynamo.stats()["backend_fallbacks"] == 0
    assert len(seen[0]) > 1
