"""Command line: `python -m minidynamo explain script.py [args]`, `python -m minidynamo backends`."""
from __future__ import annotations

import argparse
import os
import runpy
import sys
from typing import List, Optional

from . import convert_frame, list_backends
from .explain import ExplainOutput
from .logs import CHANNELS, set_logs
from .resume_execution import frame_name


def summarize(record: convert_frame.FrameRecord) -> str:
    """One or a few lines about a converted frame, for the running report."""
    code = record.code
    where = f"{frame_name(code)} ({os.path.relpath(code.co_filename)}:{code.co_firstlineno})"
    if record.unsupported is not None and record.transformed_code is None:
        return f"[minidynamo] {where}: runs unconverted: {record.unsupported.msg}"
    frame = ExplainOutput.from_frames([record])
    lines = [f"[minidynamo] {where}: {frame.graph_count} graph(s), {frame.op_count} op(s), "
             f"{len(frame.out_guards)} guard(s), {frame.graph_break_count} break(s), "
             f"{record.seconds * 1000:.1f} ms"]
    for reason in frame.break_reasons:
        place = reason.user_stack[-1] if reason.user_stack else None
        at = f" at {os.path.relpath(place.filename)}:{place.lineno}" if place is not None else ""
        lines.append(f"    break{at}: {reason.reason}")
    return "\n".join(lines)


def explain_script(script: str, script_args: List[str], html: Optional[str], verbose: bool) -> ExplainOutput:
    """Run `script` as __main__, reporting each frame minidynamo converts on stderr as it happens."""
    records: List[convert_frame.FrameRecord] = []

    def listener(record: convert_frame.FrameRecord) -> None:
        records.append(record)
        print(summarize(record), file=sys.stderr)

    saved_argv, saved_path = sys.argv, list(sys.path)
    sys.argv = [script, *script_args]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    convert_frame.compile_listeners.append(listener)
    try:
        runpy.run_path(script, run_name="__main__")
    finally:
        convert_frame.compile_listeners.remove(listener)
        sys.argv, sys.path[:] = saved_argv, saved_path
    out = ExplainOutput.from_frames(records)
    print(f"[minidynamo] total: {len(records)} frame(s) converted, {out.graph_count} graph(s), "
          f"{out.graph_break_count} break(s), {out.compile_seconds * 1000:.0f} ms compiling", file=sys.stderr)
    if verbose:
        print(out, file=sys.stderr)
    if html:
        print(f"[minidynamo] HTML report: {os.path.abspath(out.render(html))}", file=sys.stderr)
    return out


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m minidynamo", description="minidynamo, a PEP 523 frame-evaluation JIT for PyTorch.")
    commands = parser.add_subparsers(dest="command", required=True)
    explain = commands.add_parser(
        "explain", help="run a script, reporting what minidynamo converts (functions under optimize/compile)")
    explain.add_argument("--html", metavar="PATH", help="also write the HTML report of every converted frame")
    explain.add_argument("--logs", metavar="CHANNELS", help=f"log channels to turn on: {','.join(CHANNELS)} or all")
    explain.add_argument("-v", "--verbose", action="store_true", help="print the full explain report at the end")
    explain.add_argument("script")
    explain.add_argument("args", nargs=argparse.REMAINDER, help="arguments passed to the script")
    commands.add_parser("backends", help="list the registered backends")
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "backends":
        print("\n".join(list_backends()))
        return 0
    if args.logs:
        set_logs(args.logs)
    explain_script(args.script, args.args, args.html, args.verbose)
    return 0


if __name__ == "__main__":
    sys.exit(main())
