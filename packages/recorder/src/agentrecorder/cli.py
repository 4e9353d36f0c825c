"""``knowlyr-recorder``: convert agent logs, validate, summarise, show and view trajectories.

    knowlyr-recorder convert logs/ 'runs/**/*.traj' -o trajectories.jsonl --skip-invalid
    knowlyr-recorder validate trajectories.jsonl
    knowlyr-recorder stats trajectories.jsonl [--json]
    knowlyr-recorder show trajectories.jsonl --index 3
    knowlyr-recorder view run.traj -o run.html
    knowlyr-recorder formats
    knowlyr-recorder mcp                       # MCP server over stdio (extra: mcp)

``stats``, ``show`` and ``view`` accept trajectory JSONL or any supported log (converted on
the fly). Errors are one line, ``file[:line]: field: problem``, never a traceback; exit
status 1 means bad input, 2 bad usage. ``convert --skip-invalid`` converts the good files,
lists the bad ones and exits 0 as long as at least one file converted; when none did it
exits 1 and leaves an existing output file untouched.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

from agentrecorder import registry
from agentrecorder.convert import convert_paths, expand_inputs, is_trajectory_file, iter_convert, load_trajectories
from agentrecorder.errors import ConversionError
from knowlyrcore.errors import KnowlyrError
from knowlyrcore.trajectory import Trajectory

PROG = "knowlyr-recorder"


def _err(message: str) -> None:
    print(f"{PROG}: {message}", file=sys.stderr)


def _plural(n: int, word: str) -> str:
    return f"{n} {word if n == 1 else word[:-1] + 'ies' if word.endswith('y') else word + 's'}"


def _all_trajectories(inputs: Sequence[str], fmt: str) -> Iterator[Trajectory]:
    for path in expand_inputs(inputs):
        yield from load_trajectories(path, fmt)


def _pick(inputs: Sequence[str], fmt: str, index: int | None, wanted_id: str | None) -> Trajectory:
    seen = 0
    for position, trajectory in enumerate(_all_trajectories(inputs, fmt)):
        seen += 1
        if (wanted_id is not None and trajectory.id == wanted_id) or (wanted_id is None and position == (index or 0)):
            return trajectory
    which = f"id {wanted_id!r}" if wanted_id is not None else f"index {index or 0}"
    raise ConversionError(", ".join(inputs), None, f"no trajectory with {which} ({seen} trajectories)")


def cmd_convert(args: argparse.Namespace) -> int:
    output = None if args.output in (None, "-") else args.output
    report, collected = convert_paths(args.inputs, output, args.format, skip_invalid=args.skip_invalid)
    for result in report.files:
        if result.error is None:
            if not args.quiet:
                how = result.detection or f"format {result.format}"
                _err(
                    f"{result.path}: {how}: {_plural(result.trajectories, 'trajectory')}, {_plural(result.steps, 'step')}"
                )
        else:
            _err(f"skipped {result.error}")
    if output is None:
        from knowlyrcore.jsonl import dumps_record

        lines = [dumps_record(t.model_dump(mode="json"), "<stdout>", n) for n, t in enumerate(collected, start=1)]
        sys.stdout.writelines(line + "\n" for line in lines)  # all checked before any is printed
    failed = len(report.failed)
    where = output or "stdout"
    if not report.converted:
        _err(
            f"no file converted ({failed} skipped); nothing written" + (f", {output} left as it was" if output else "")
        )
        return 1
    if not args.quiet or failed:
        _err(f"wrote {_plural(report.written, 'trajectory')} from {_plural(len(report.converted), 'file')} to {where}"
             + (f"; {failed} file{'s' if failed != 1 else ''} skipped" if failed else ""))  # fmt: skip
    return 0


def cmd_validate(args: argparse.Namespace) -> int:
    from knowlyrcore.jsonl import read_trajectories

    bad = 0
    for path in expand_inputs(args.inputs):
        try:
            if is_trajectory_file(path):
                count = steps = 0
                for trajectory in read_trajectories(path):
                    count += 1
                    steps += len(trajectory.steps)
                print(f"{path}: ok, {_plural(count, 'trajectory')}, {_plural(steps, 'step')}")
            else:
                trajectories = list(iter_convert(path, args.format))
                fmt = trajectories[0].source.split(":", 1)[0] if trajectories and trajectories[0].source else "?"
                steps = sum(len(t.steps) for t in trajectories)
                print(f"{path}: ok as {fmt} log, {_plural(len(trajectories), 'trajectory')}, {_plural(steps, 'step')}")
        except KnowlyrError as exc:
            bad += 1
            print(f"{exc}", file=sys.stderr)
    return 1 if bad else 0


def cmd_stats(args: argparse.Namespace) -> int:
    from agentrecorder.stats import format_summary, summarize

    summary = summarize(_all_trajectories(args.inputs, args.format))
    print(json.dumps(summary, indent=2) if args.json else format_summary(summary))
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    from agentrecorder.show import render

    print(render(_pick(args.inputs, args.format, args.index, args.id), max_lines=args.max_lines))
    return 0


def cmd_view(args: argparse.Namespace) -> int:
    from agentrecorder.view import render_html

    trajectory = _pick(args.inputs, args.format, args.index, args.id)
    output = Path(args.output or f"{Path(args.inputs[0]).stem}.html")
    _write_text_atomic(output, render_html(trajectory))
    _err(f"wrote {output} ({len(trajectory.steps)} steps)")
    return 0


def _write_text_atomic(path: Path, text: str) -> None:
    from knowlyrcore.jsonl import write_bytes_atomic

    write_bytes_atomic(path, text.encode("utf-8"))


def cmd_formats(args: argparse.Namespace) -> int:
    adapters, broken = registry.adapters(), registry.broken()
    if args.json:
        listed = [{"name": a.name, "priority": a.priority, "description": a.description} for a in adapters]
        print(json.dumps(listed + [{"name": n, "error": why} for n, why in broken.items()]))
        return 0
    width = max(len(name) for name in [a.name for a in adapters] + list(broken))
    print("formats, in auto-detection order:")
    for a in adapters:
        print(f"  {a.name.ljust(width)}  {a.description}")
    for name, why in broken.items():
        print(f"  {name.ljust(width)}  cannot be loaded: {why}")
    return 0


def cmd_mcp(args: argparse.Namespace) -> int:
    from knowlyrcore.mcp import run_module

    return run_module("knowlyr-recorder", "agentrecorder.mcp_server", args.server_args)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description="Turn agent framework logs into knowlyr trajectories.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def with_inputs(p: argparse.ArgumentParser, many: bool = True) -> None:
        p.add_argument("inputs", nargs="+" if many else 1, metavar="INPUT", help="file, directory or glob")
        p.add_argument("-f", "--format", default="auto", help="log format (see `formats`); default: auto-detect")

    p = sub.add_parser("convert", help="convert logs into trajectory JSONL")
    with_inputs(p)
    p.add_argument("-o", "--output", help="output JSONL (written atomically); default: stdout")
    p.add_argument("--skip-invalid", action="store_true", help="convert the good files, report and skip bad ones")
    p.add_argument("-q", "--quiet", action="store_true", help="report only problems")
    p.set_defaults(run=cmd_convert)

    p = sub.add_parser("validate", help="check trajectory JSONL (or that a log converts)")
    with_inputs(p)
    p.set_defaults(run=cmd_validate)

    p = sub.add_parser("stats", help="steps, tool histogram, success rate, tokens")
    with_inputs(p)
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(run=cmd_stats)

    for name, run, helptext in (("show", cmd_show, "print one trajectory"), ("view", cmd_view, "write an HTML page")):
        p = sub.add_parser(name, help=helptext)
        with_inputs(p)
        p.add_argument("--index", type=int, default=0, help="which trajectory (0-based; default 0)")
        p.add_argument("--id", help="pick the trajectory with this id instead")
        if name == "show":
            p.add_argument("--max-lines", type=int, default=12, help="lines shown per text (default 12)")
        else:
            p.add_argument("-o", "--output", help="HTML file to write (default: <input stem>.html)")
        p.set_defaults(run=run)

    p = sub.add_parser("formats", help="list the supported log formats")
    p.add_argument("--json", action="store_true")
    p.set_defaults(run=cmd_formats)

    # every argument goes to the server's own parser (`mcp --help` lists them): no prefix char matches
    p = sub.add_parser("mcp", help="run the MCP server over stdio (extra: mcp)", add_help=False, prefix_chars="\0")
    p.add_argument("server_args", nargs="*")
    p.set_defaults(run=cmd_mcp)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.run(args)
    except KnowlyrError as exc:
        _err(f"error: {exc}")
        return 1
    except BrokenPipeError:
        return 0
    except OSError as exc:
        _err(f"error: {exc.filename or '<io>'}: {exc.strerror or exc}")
        return 1
    except MemoryError:
        _err("error: out of memory reading the input; split the file or convert JSONL line by line")
        return 1
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # a bug, but the user still gets one line, not a traceback
        _err(f"error: unexpected {type(exc).__name__}: {exc} (please report this with the input file)")
        return 1


if __name__ == "__main__":
    sys.exit(main())
