"""explain(...).render(path): one self-contained HTML page (inline CSS, inline SVG, no scripts)."""
from __future__ import annotations

import html
import linecache
from typing import TYPE_CHECKING, List, Optional

import torch

from .exc import UserFrame
from .guards import Guard

if TYPE_CHECKING:
    from .explain import ExplainOutput, FrameReport

CONTEXT_LINES = 3

_CSS = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 0; color: #1f2328; background: #f6f8fa; }
header { background: #24292f; color: #fff; padding: 16px 32px; }
header h1 { margin: 0; font-size: 22px; }
main { padding: 8px 32px 32px; max-width: 1200px; }
h2 { border-bottom: 2px solid #d0d7de; padding-bottom: 4px; margin-top: 28px; }
h3 { margin: 18px 0 6px; }
.cards { display: flex; gap: 12px; flex-wrap: wrap; margin-top: 16px; }
.card { background: #fff; border: 1px solid #d0d7de; border-radius: 8px; padding: 8px 16px; min-width: 110px; }
.card b { display: block; font-size: 24px; }
.box { background: #fff; border: 1px solid #d0d7de; border-radius: 8px; padding: 12px 16px; margin: 10px 0; }
pre { background: #f6f8fa; border: 1px solid #d8dee4; border-radius: 6px; padding: 8px 10px;
      overflow-x: auto; font: 12.5px/1.4 ui-monospace, monospace; margin: 6px 0; }
table { border-collapse: collapse; width: 100%; font-size: 13px; }
th, td { border: 1px solid #d8dee4; padding: 3px 8px; text-align: left; vertical-align: top; }
th { background: #eaeef2; }
td code { font: 12px ui-monospace, monospace; }
.reason { font-weight: 600; color: #9a3412; }
.src { padding: 0; }
.src div { white-space: pre; padding: 0 10px; }
.src .hit { background: #fde68a; font-weight: 700; }
.src .no { color: #8c959f; display: inline-block; width: 4em; }
.tag { background: #ddf4ff; color: #0550ae; border-radius: 10px; padding: 1px 8px; font-size: 12px; }
.warn { color: #9a6700; }
"""


def _e(text: object) -> str:
    return html.escape(str(text))


def _pre(text: str) -> str:
    return f"<pre>{_e(text)}</pre>"


def _source_context(frame: UserFrame) -> str:
    """The lines around `frame`'s line from its file, the line itself marked; '' if unreadable."""
    if frame.lineno is None:
        return ""
    first = max(1, frame.lineno - CONTEXT_LINES)
    rows = []
    for lineno in range(first, frame.lineno + CONTEXT_LINES + 1):
        line = linecache.getline(frame.filename, lineno)
        if not line:
            break
        marked = lineno == frame.lineno
        rows.append(f'<div class="{"hit" if marked else ""}"><span class="no">{"&#9656;" if marked else ""}'
                    f"{lineno}</span>{_e(line.rstrip())}</div>")
    return f'<pre class="src">{"".join(rows)}</pre>' if rows else ""


def _graph_picture(graph: torch.fx.GraphModule, name: str) -> Optional[str]:
    """An SVG drawing of the graph when pydot and graphviz's `dot` are installed."""
    try:
        from torch.fx.passes.graph_drawer import FxGraphDrawer

        svg = FxGraphDrawer(graph, name).get_dot_graph().create_svg().decode()
    except Exception:  # pydot or dot missing
        return None
    return svg[svg.find("<svg"):]


def _graph_table(graph: torch.fx.GraphModule) -> str:
    rows = [
        f"<tr><td><code>{_e(node.name)}</code></td><td>{_e(node.op)}</td>"
        f"<td><code>{_e(getattr(node.target, '__name__', node.target))}</code></td>"
        f"<td><code>{_e(node.args)}</code></td></tr>"
        for node in graph.graph.nodes
    ]
    return f"<table><tr><th>node</th><th>op</th><th>target</th><th>args</th></tr>{''.join(rows)}</table>"


def _guard_table(guards: List[Guard]) -> str:
    rows = [
        f"<tr><td><code>{_e(g.name or '(global state)')}</code></td>"
        f"<td>{_e(type(g.source).__name__ if g.source is not None else 'global state')}</td>"
        f"<td>{_e(g.create_fn_name)}</td><td><code>{'<br>'.join(map(_e, g.code_list))}</code></td></tr>"
        for g in guards
    ]
    return ("<table><tr><th>name</th><th>source</th><th>create function</th><th>code</th></tr>"
            f"{''.join(rows)}</table>")


def _breaks_section(out: "ExplainOutput") -> str:
    if not out.break_reasons:
        return "<h2>Graph breaks</h2><p>None: every converted frame is one graph.</p>"
    parts = [f"<h2>Graph breaks ({out.graph_break_count})</h2>"]
    for i, reason in enumerate(out.break_reasons, 1):
        stack = "".join(
            f"<div>File <code>{_e(f.filename)}</code>, line {_e(f.lineno)}, in <code>{_e(f.name)}</code></div>"
            f"{_source_context(f)}"
            for f in reason.user_stack
        )
        parts.append(f'<div class="box"><div class="reason">{i}. {_e(reason.reason)}</div>{stack}</div>')
    return "".join(parts)


def _graphs_section(out: "ExplainOutput") -> str:
    parts = [f"<h2>Graphs ({out.graph_count})</h2>"]
    for i, graph in enumerate(out.graphs):
        picture = _graph_picture(graph, f"graph_{i}") or _graph_table(graph)
        parts.append(f'<div class="box"><h3>graph {i} <span class="tag">{len(out.ops_per_graph[i])} ops</span>'
                     f"</h3>{picture}<details><summary>FX code</summary>{_pre(graph.code.strip())}</details></div>")
    return "".join(parts)


def _frame_box(frame: "FrameReport") -> str:
    title = _e(frame.name)
    if frame.resumes:
        title += f' <span class="tag">resume function: continues {_e(frame.resumes)}</span>'
    body = [f"<h3>{title}</h3><div><code>{_e(frame.location)}</code>"]
    if frame.graph_indices:
        body.append(f" &middot; graphs {', '.join(map(str, frame.graph_indices))}")
    body.append("</div>")
    if frame.record.unsupported is not None:
        body.append(f'<p class="warn">Runs unconverted: {_e(frame.record.unsupported.msg)}</p>')
    if frame.transformed is not None:
        note = "" if frame.transformed.exact else ' <span class="warn">(not decompiled)</span>'
        body.append(f"<h4>Transformed code{note}</h4>{_pre(frame.transformed.source)}")
    if frame.check_source is not None:
        body.append(f"<h4>Guards</h4>{_guard_table(frame.guards)}"
                    f"<details><summary>check function</summary>{_pre(frame.check_source.rstrip())}</details>")
    return f'<div class="box">{"".join(body)}</div>'


def render_html(out: "ExplainOutput") -> str:
    cards = [("graphs", out.graph_count), ("graph breaks", out.graph_break_count), ("ops", out.op_count),
             ("guards", len(out.out_guards)), ("frames", len(out.frames)),
             ("compile time", f"{out.compile_seconds * 1000:.0f} ms")]
    card_html = "".join(f'<div class="card"><b>{_e(v)}</b>{_e(k)}</div>' for k, v in cards)
    frames = "".join(map(_frame_box, out.frame_reports))
    return (
        '<!DOCTYPE html><html><head><meta charset="utf-8"><title>minidynamo explain report</title>'
        f"<style>{_CSS}</style></head><body><header><h1>minidynamo explain report</h1></header><main>"
        f'<div class="cards">{card_html}</div>{_breaks_section(out)}{_graphs_section(out)}'
        f"<h2>Converted frames ({len(out.frames)})</h2>{frames}</main></body></html>"
    )
