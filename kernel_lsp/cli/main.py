"""The `kernel-lsp` command: serve, optimize, eval, bench, answers, export, reward.

Errors a user can fix (a missing file, a file without a Model, a bad setting) print one line to stderr and exit
with status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from .. import __version__
from ..config import STRATEGIES, ConfigError, Settings, check, load

EXIT_OK, EXIT_FAIL, EXIT_USAGE, EXIT_UNAVAILABLE = 0, 1, 2, 3


class UsageError(Exception):
    """A bad invocation: printed as one line, exit status 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, not usage + message
        raise UsageError(f"{message} (see `{self.prog} --help`)")


def _sample_counts(text: str) -> int | list[int]:
    """bench's --samples: one count, or several ("1,2,4,8": n = the largest, figures against each)."""
    try:
        counts = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a count or counts like 1,2,4,8, not {text!r}") from None
    if not counts:
        raise argparse.ArgumentTypeError("expected a count or counts like 1,2,4,8")
    return counts[0] if len(counts) == 1 else counts


def _add_settings_flags(p: argparse.ArgumentParser, *, generation: bool = True, sample_list: bool = False) -> None:
    g = p.add_argument_group("settings (override [tool.kernel-lsp] and KERNEL_LSP_* variables)")
    if generation:
        g.add_argument("--model", help="path to a .gguf file, or 'default' for the embedded small model")
        g.add_argument("--endpoint", help="OpenAI-compatible base URL, e.g. http://127.0.0.1:8080/v1")
        g.add_argument("--endpoint-model", help="model name to ask the endpoint for")
        g.add_argument("--strategy", choices=STRATEGIES)
        if sample_list:
            g.add_argument("-n", "--samples", type=_sample_counts, help="completions per round (best-of-n); with "
                           "--compare also several, e.g. 1,2,4,8: the largest are drawn, the figures are given "
                           "against each")
        else:
            g.add_argument("-n", "--samples", type=int, help="completions per round (best-of-n)")
        g.add_argument("--rounds", type=int, help="refinement rounds")
    g.add_argument("--device", choices=("auto", "cpu", "cuda"))
    g.add_argument("--gpu", type=int, help="GPU index")
    g.add_argument("--atol", type=float)
    g.add_argument("--rtol", type=float)
    g.add_argument("--trials", type=int)
    if generation:
        g.add_argument("--max-tokens", type=int)
    g.add_argument("--seed", type=int)
    g.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="any other setting")


_SETTING_FLAGS = ("model", "endpoint", "endpoint_model", "strategy", "samples", "rounds", "device", "gpu",
                  "atol", "rtol", "trials", "max_tokens", "seed")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="kernel-lsp", description="Replace PyTorch operators with verified custom CUDA kernels.")
    p.add_argument("--version", action="version", version=f"kernel-lsp {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    s = sub.add_parser("serve", help="run the language server (stdio by default)")
    s.add_argument("--tcp", metavar="HOST:PORT", help="listen on TCP instead of stdio (for debugging)")
    s.add_argument("--log-file", help="also write the log to this file")
    s.add_argument("--log-level", choices=("debug", "info", "warning", "error"), default=None)

    o = sub.add_parser("optimize", help="generate, verify and time kernels for a module, headless")
    o.add_argument("file", help="a Python file holding an nn.Module with get_inputs()/get_init_inputs()")
    o.add_argument("--module", help="the class to optimise (default: Model, else the first nn.Module)")
    o.add_argument("--json", action="store_true", help="print the result as JSON")
    o.add_argument("--out", help="write the result to this file: the best correct ModelNew, when it is faster than "
                   "eager")
    _add_settings_flags(o)

    e = sub.add_parser("eval", help="run the oracle on a reference and a candidate")
    e.add_argument("reference", help="file with Model, get_inputs(), get_init_inputs()")
    e.add_argument("candidate", help="file with ModelNew")
    e.add_argument("--json", action="store_true", help="print the verdict as JSON")
    e.add_argument("--profile", action="store_true", help="also profile the reference")
    _add_settings_flags(e, generation=False)

    b = sub.add_parser("bench", help="sweep KernelBench tasks and print fast_p tables")
    b.add_argument("--kernelbench", help="folder holding level{1,2,3}.jsonl")
    b.add_argument("--level", type=int, action="append", help="level(s) to run (default: 1)")
    b.add_argument("--tasks", help="problem ids, e.g. 1-10,23")
    b.add_argument("--candidates", help="evaluate existing ModelNew files from this folder, no model")
    b.add_argument("--out", help="folder for the Markdown/CSV/JSON tables and the figure "
                                 "(default: <state_dir>/bench in the current folder)")
    b.add_argument("--ray", help="Ray address ('auto' for a local cluster)")
    b.add_argument("--compare", metavar="S1,S2,...",
                   help="run each strategy over the same tasks, model and samples and write one comparison "
                   "(compare.md/.csv/.json/.png); default selection: the first 10 tasks of levels 1-3")
    _add_settings_flags(b, sample_list=True)

    a = sub.add_parser("answers", help="list the jobs that asked the model, and show or save what it answered")
    a.add_argument("path", nargs="?", default=".", help="the module file or workspace folder whose history to read "
                   "(default: the current folder)")
    a.add_argument("--job", help="a job's number, or 'last': its raw answers and the candidates extracted from them "
                   "(without it: the list of jobs)")
    a.add_argument("--out", help="write the job's answers (NN-answer-rRsS.txt), extracted candidates "
                   "(NN-candidate-M.py) and answers.json into this folder")
    a.add_argument("--json", action="store_true", help="print as JSON")
    a.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="a setting, e.g. state_dir=DIR (the history is <state_dir>/history.sqlite)")

    x = sub.add_parser("export", help="write the trajectories of a history as a training dataset (JSONL, Parquet)")
    x.add_argument("--from", dest="source", default=".", metavar="DIR",
                   help="a workspace, a state folder (.kernel-lsp) or a bench --out folder (default: the current "
                   "folder)")
    x.add_argument("--out", required=True, metavar="FILE",
                   help="the JSONL file; with pyarrow installed also FILE.parquet")
    x.add_argument("--task", action="append", metavar="TEXT",
                   help="only tasks whose key holds TEXT or matches it as a glob (repeat or comma-separate)")
    x.add_argument("--strategy", dest="strategies", action="append", metavar="NAME",
                   help="only jobs of these strategies")
    x.add_argument("--status", action="append", metavar="STATUS",
                   help="only steps with these statuses (correct, incorrect, compile_error, no_kernel, ...)")
    x.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="a setting, e.g. state_dir=DIR")

    r = sub.add_parser("reward", help="score a batch of (reference, completion) rows with the oracle")
    r.add_argument("input", metavar="IN.jsonl", help='one {"reference": ..., "completion": ...} object a line '
                   "('-': standard input)")
    r.add_argument("--out", required=True, metavar="OUT.jsonl", help="one result a line, in the order of IN")
    r.add_argument("--ray", help="evaluate on a Ray cluster at this address ('auto' for a local one), one "
                   "evaluator per GPU")
    _add_settings_flags(r, generation=False)
    return p


def settings_from_args(args: argparse.Namespace, workspace: Path) -> Settings:
    """The settings of a command: the workspace's, with its flags and --set values on top. A bad value is reported
    as coming from its flag (`--samples`, `--set`), not from "settings"."""
    overrides: dict[str, object] = {}
    for name in _SETTING_FLAGS:
        value = getattr(args, name, None)
        if isinstance(value, list):  # bench --samples 1,2,4,8: the largest count is drawn
            value = max(value)
        if value is not None:
            key, typed = check(name, value, "--" + name.replace("_", "-"))
            overrides[key] = typed
    for item in getattr(args, "set", []) or []:
        if "=" not in item:
            raise UsageError(f"--set {item!r}: expected KEY=VALUE")
        k, v = item.split("=", 1)
        key, typed = check(k, v, f"--set {item}")
        overrides[key] = typed
    return load(workspace, overrides=overrides, source="command line")


def _check_source_file(path: str, what: str) -> Path:
    p = Path(path)
    if not p.exists():
        raise UsageError(f"{what} {path}: no such file")
    if p.is_dir():
        raise UsageError(f"{what} {path}: is a folder, not a Python file")
    if p.suffix != ".py":
        raise UsageError(f"{what} {path}: not a Python file (.py)")
    if not os.access(p, os.R_OK):
        raise UsageError(f"{what} {path}: cannot read (permission denied)")
    return p


def read_source(path: Path, what: str) -> str:
    """The text of a source file: UTF-8, not empty; else a UsageError saying so."""
    try:
        data = path.read_bytes()
    except OSError as e:
        raise UsageError(f"{what} {path}: cannot read: {e.strerror or e}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise UsageError(f"{what} {path}: not UTF-8 text (byte 0x{data[e.start]:02x} at offset {e.start})") from None
    if not text.strip():
        raise UsageError(f"{what} {path}: the file is empty")
    return text


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args, extra = parser.parse_known_args(argv)
        if extra:
            where = f"kernel-lsp {args.command}" if args.command else "kernel-lsp"
            raise UsageError(f"unrecognized arguments: {' '.join(extra)} (see `{where} --help`)")
        if args.command is None:
            parser.print_help(sys.stderr)
            return EXIT_USAGE
        if args.command == "serve":
            from ..server.main import serve

            return serve(tcp=args.tcp, log_file=args.log_file, log_level=args.log_level)
        if args.command == "optimize":
            path = _check_source_file(args.file, "file")
            from ..tasks import TaskError, task_from_source

            try:  # read and checked as `eval` reads its reference: one mistake, the same words
                task = task_from_source(read_source(path, "file"), args.module, path=str(path))
            except TaskError as e:
                raise UsageError(f"file {e}") from None
            settings = settings_from_args(args, path.parent)
            return _run_optimize(task, settings, args)
        if args.command == "eval":
            ref = _check_source_file(args.reference, "reference")
            cand = _check_source_file(args.candidate, "candidate")
            ref_src, cand_src = _eval_sources(ref, cand)
            settings = settings_from_args(args, ref.parent)
            return _run_eval(ref, cand, ref_src, cand_src, settings, args)
        if args.command == "bench":
            settings = settings_from_args(args, Path.cwd())
            return _run_bench(settings, args)
        if args.command == "answers":
            return _run_answers(args)
        if args.command == "export":
            return _run_export(args)
        if args.command == "reward":
            return _run_reward(args)
        raise UsageError(f"unknown command {args.command!r}")
    except UsageError as e:
        print(f"kernel-lsp: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except ConfigError as e:
        print(f"kernel-lsp: bad setting: {e}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("kernel-lsp: interrupted", file=sys.stderr)
        return 130


def _eval_sources(ref: Path, cand: Path) -> tuple[str, str]:
    """The reference in the form the oracle takes (a Model with get_inputs / get_init_inputs: checked here, so a
    file that is not one is a usage error, not an oracle error), and the candidate's text."""
    from ..tasks import TaskError, task_from_source

    try:
        task = task_from_source(read_source(ref, "reference"), None, path=str(ref))
    except TaskError as e:
        raise UsageError(f"reference {e}") from None
    return task.reference_src, read_source(cand, "candidate")


def _run_optimize(task, settings: Settings, args: argparse.Namespace) -> int:
    from .optimize import run_optimize

    return run_optimize(task, settings, args)


def _run_eval(ref: Path, cand: Path, ref_src: str, cand_src: str, settings: Settings,
              args: argparse.Namespace) -> int:
    from ..oracle import eval_settings
    from .eval import EvalInputError, run_eval

    try:
        return run_eval(ref, cand, eval_settings(settings), as_json=args.json, profile=args.profile,
                        sources=(ref_src, cand_src))
    except EvalInputError as e:
        raise UsageError(str(e)) from None


def _run_bench(settings: Settings, args: argparse.Namespace) -> int:
    from ..bench import run_bench

    return run_bench(settings, args)


def _run_answers(args: argparse.Namespace) -> int:
    from .answers import AnswersError, run_answers
    from .optimize import workspace_of

    if not Path(args.path).exists():
        raise UsageError(f"{args.path}: no such file or folder")
    workspace = workspace_of(args.path)  # the same workspace `optimize` keeps the history of
    try:
        return run_answers(settings_from_args(args, workspace), workspace, args)
    except AnswersError as e:
        raise UsageError(str(e)) from None


def _run_export(args: argparse.Namespace) -> int:
    from .export import ExportError, run_export

    folder = Path(args.source)
    try:
        return run_export(settings_from_args(args, folder if folder.is_dir() else Path.cwd()), args)
    except ExportError as e:
        raise UsageError(str(e)) from None


def _run_reward(args: argparse.Namespace) -> int:
    from .reward import RewardError, run_reward

    if args.ray:
        try:
            import ray  # noqa: F401
        except ImportError:
            raise UsageError("--ray needs Ray, which is not installed: pip install 'kernel-lsp[ray]'") from None
    try:
        return run_reward(settings_from_args(args, Path.cwd()), args)
    except RewardError as e:
        raise UsageError(str(e)) from None


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
