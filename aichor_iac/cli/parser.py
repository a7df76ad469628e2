"""The command line: its commands, options, help texts and examples (docs/cli.md shows the
`--help` of each; tests/cli/test_cli.py compares them), and shell completion."""

from __future__ import annotations

import argparse
import importlib
import shutil
import textwrap
from typing import Any

from .images import entrypoint_options
from .usage import EXAMPLES

# What an argument completes to (shtab's FILE or DIRECTORY, looked up when a completion script
# is asked for: shtab and the logging it imports cost every command 7 ms)
FILE, DIRECTORY = "FILE", "DIRECTORY"


class _Handler:
    """A command's function, imported when the command runs: `validate` need not import what
    `status` and `dashboard` read with (rich's tables, the run records), which cost every
    command 20 ms."""

    def __init__(self, module: str, name: str) -> None:
        self.module, self.__name__ = module, name

    def __call__(self, args: argparse.Namespace) -> int:
        module = importlib.import_module(f"{__package__}.{self.module}")
        return int(getattr(module, self.__name__)(args))


def parser() -> argparse.ArgumentParser:
    """The command line; docs/cli.md shows its `--help` (a test compares them)."""
    main_parser = argparse.ArgumentParser(
        prog="aichor-iac",
        description="Expand an AIchor manifest into Kubernetes objects offline, exactly as the "
        "Pulumi program does (no Pulumi CLI, no cluster).",
        epilog="Run `aichor-iac COMMAND --help` for a command's options and examples.",
        formatter_class=_Formatter,
    )
    main_parser.add_argument("--version", action=_Version)
    main_parser.add_argument(
        "--print-completion",
        choices=("bash", "zsh", "tcsh"),
        action=_Completion,
        help="print a shell completion script (docs: The offline CLI)",
    )
    add = _Commands(main_parser.add_subparsers(required=True, metavar="COMMAND", title="commands"))
    for name, handler, help in EXPERIMENT_COMMANDS:
        sub = add(name, handler, help, EXPERIMENT)
        _stack_options(sub)
        OPTIONS.get(name, lambda _: None)(sub)
    _up_options(
        add(
            "up",
            "observe.up",
            "pulumi up of the stack (the Pulumi CLI, through the Automation API); "
            "--until-done: again as its sweeps' results allow more trials, until every trial "
            "has ended",
            None,
        )
    )
    _history_options(
        add(
            "history",
            "history.history",
            "list the runs this machine has kept (run --local keeps each), newest first; show "
            "one from its record: what ran, how it ended, its pods or trials and metrics",
            None,
        )
    )
    add("schema", "commands.schema", "print the manifest's JSON Schema (for editors)", None)
    _examples_options(
        add(
            "examples",
            "commands.examples",
            "list the example manifests, print one or copy it with its scripts",
            None,
        )
    )
    add(
        "convert",
        "commands.convert",
        "print a Kubeflow custom resource or a RayJob as an AIchor manifest, and what it cannot "
        "say",
        "the custom resource's file (- for stdin)",
    )
    return main_parser


# The commands that take an experiment (MANIFEST, else the stack's), in --help's order.
EXPERIMENT_COMMANDS = (
    ("validate", "commands.validate", "check a manifest; exit 2 with one line per problem"),
    (
        "entrypoints",
        "images.entrypoints",
        "print what the images run whose containers give no command, read from their "
        "registries (no image is pulled), as the stack config's aichor:entrypoints",
    ),
    ("render", "commands.render", "print every Kubernetes object as multi-document YAML"),
    (
        "preview",
        "commands.preview",
        "show what pulumi up would do, as pulumi preview does: the component, its objects "
        "in creation order, outputs and totals",
    ),
    (
        "run",
        "commands.run",
        "run every replica as local processes (Linux: root or user namespaces), each line "
        "of output prefixed with its pod; exit with the experiment's result",
    ),
    (
        "status",
        "observe.status",
        "show what the experiment is doing: per Job and pod, its phase, restarts, state and "
        "why (CrashLoopBackOff, Unschedulable, OOMKilled), exit code, GPUs and time",
    ),
    (
        "logs",
        "observe.logs",
        "print every pod's lines, each after its pod's name, in the order they were printed",
    ),
    ("events", "observe.events", "print the experiment's Kubernetes events, oldest first"),
    (
        "dashboard",
        "observe.dashboard",
        "serve a local web page of the experiments, read as status reads them: their pods, "
        "logs, metrics and sweeps, updated as they change (the dashboard extra)",
    ),
    (
        "check",
        "observe.check",
        "check the experiment against the stack's cluster before pulumi up, read only: "
        "namespace, permissions, quotas, LimitRanges, Pod Security, nodes, gang scheduler, "
        "Kueue, Pulumi; exit 1 when something blocks",
    ),
)
EXPERIMENT = (
    "the AIchor manifest or custom resource (- for stdin; default: the stack's aichor:manifest)"
)


class _Commands:
    """Adds a command: its handler (`module.function` of this package), help, examples,
    `--output` and (if `manifest` says what it is) its MANIFEST argument."""

    def __init__(self, subparsers: Any) -> None:
        self.subparsers = subparsers

    def __call__(self, name: str, handler: str, help: str, manifest: str | None) -> Any:
        sub = self.subparsers.add_parser(
            name,
            help=help,
            description=help,
            epilog="examples:" + EXAMPLES[name],
            formatter_class=_Formatter,
        )
        markdown = name == "preview"
        sub.add_argument(
            "--output",
            choices=("text", "json", "markdown") if markdown else ("text", "json"),
            default="text",
            help="text for people (default), json for scripts and CI"
            + (", markdown for a pull request's comment" if markdown else ""),
        )
        if manifest:
            _completes(
                sub.add_argument("manifest", metavar="MANIFEST", nargs="?", help=manifest), FILE
            )
        sub.set_defaults(handler=_Handler(*handler.split(".")))
        return sub


def _stack_options(sub: argparse.ArgumentParser) -> None:
    _completes(
        sub.add_argument(
            "--stack-config",
            metavar="FILE",
            help="a Pulumi.<stack>.yaml to take aichor:* settings and the stack name from",
        ),
        FILE,
    )
    sub.add_argument(
        "--name",
        help="experiment name (default: stack config, manifest name, else the stack name)",
    )
    sub.add_argument("--namespace", help="namespace (default: stack config, else default)")


def _render_options(sub: argparse.ArgumentParser) -> None:
    _completes(
        sub.add_argument(
            "-o",
            "--output-dir",
            metavar="DIR",
            help="write one file per object into DIR instead (removing the files an "
            "earlier render wrote there)",
        ),
        DIRECTORY,
    )


def _preview_options(sub: argparse.ArgumentParser) -> None:
    _completes(
        sub.add_argument(
            "--diff",
            metavar="OLD",
            help="compare with OLD (a manifest, or a directory render -o wrote): create, "
            "update, replace or delete, and each field that changes",
        ),
        FILE,
    )


def _run_options(sub: argparse.ArgumentParser) -> None:
    sub.add_argument(
        "--local",
        action="store_true",
        required=True,
        help="on this machine (the only place `run` runs, for now)",
    )
    sub.add_argument(
        "--replicas",
        type=int,
        metavar="N",
        help="at most N replicas per group, GPUs masked off: a smoke test",
    )
    sub.add_argument("--timeout", type=float, default=3600, metavar="SECONDS", help="default 3600")
    sub.add_argument(
        "--entrypoint",
        action="append",
        default=[],
        metavar="IMAGE=COMMAND",
        help="what IMAGE runs where a container gives no command (its Entrypoint, then its Cmd "
        "unless the container has args), after the stack's aichor:entrypoints: no image is "
        "pulled here",
    )
    _plot_option(sub)


def _plot_option(sub: argparse.ArgumentParser) -> None:
    _completes(
        sub.add_argument(
            "--plot",
            metavar="FILE",
            type=_plot_file,
            help="a sweep's objective against each parameter, as a picture (.png, .svg, .pdf; "
            "needs the plot extra: matplotlib)",
        ),
        FILE,
    )


def _plot_file(path: str) -> str:
    """--plot's FILE, checked before the command does anything (exit 2, the way to fix it)."""
    from ..sweeps.plot import plot_file

    try:
        return plot_file(path)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _observe_options(sub: argparse.ArgumentParser) -> None:
    sub.add_argument(
        "--local",
        action="store_true",
        help="a run --local of this machine (as root) rather than the stack's cluster",
    )
    _cluster_options(sub)


def _cluster_options(sub: argparse.ArgumentParser) -> None:
    _completes(
        sub.add_argument(
            "--kubeconfig",
            metavar="FILE",
            help="the cluster's kubeconfig (default: the stack's kubernetes:kubeconfig, else "
            "KUBECONFIG, else ~/.kube/config)",
        ),
        FILE,
    )
    sub.add_argument(
        "--context", help="its context (default: the stack's kubernetes:context, else current)"
    )


def _status_options(sub: argparse.ArgumentParser) -> None:
    _observe_options(sub)
    sub.add_argument("--watch", action="store_true", help="show it again every 2 seconds")
    _plot_option(sub)


def _dashboard_options(sub: argparse.ArgumentParser) -> None:
    _observe_options(sub)
    sub.add_argument(
        "--port", type=int, default=8155, help="the port to serve on (default: 8155; 0: any free)"
    )
    sub.add_argument(
        "--host",
        default="127.0.0.1",
        help="the address to serve on (default: 127.0.0.1; any other needs the token the "
        "printed URL carries)",
    )


def _logs_options(sub: argparse.ArgumentParser) -> None:
    _observe_options(sub)
    sub.add_argument("-f", "--follow", action="store_true", help="and the next lines as they come")


def _history_options(sub: argparse.ArgumentParser) -> None:
    sub.add_argument(
        "name",
        metavar="NAME",
        nargs="?",
        help="an experiment's or a sweep's name (its newest run), or a run's id",
    )
    sub.add_argument(
        "--logs", action="store_true", help="print the run's kept logs, as logs prints them"
    )
    sub.add_argument(
        "--stack-config",
        metavar="FILE",
        help="also the runs the stack's pods kept in its aichor:history (read from there)",
    )
    sub.set_defaults(local=True, manifest=None, namespace=None)


def _examples_options(sub: argparse.ArgumentParser) -> None:
    sub.add_argument("example", metavar="NAME", nargs="?", help="e.g. pytorch")
    _completes(
        sub.add_argument(
            "-o", "--output-dir", metavar="DIR", help="copy the example and its scripts into DIR"
        ),
        DIRECTORY,
    )


def _up_options(sub: argparse.ArgumentParser) -> None:
    _completes(
        sub.add_argument(
            "--stack-config",
            metavar="FILE",
            required=True,
            help="the stack's Pulumi.<stack>.yaml, in its Pulumi project (its aichor:manifest)",
        ),
        FILE,
    )
    _cluster_options(sub)
    sub.add_argument(
        "--until-done",
        action="store_true",
        help="read the sweeps' results from the cluster, pulumi up again each time they allow "
        "more trials, until every trial has ended (stopped, it goes on when run again)",
    )
    sub.add_argument(
        "--poll",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="how often the cluster is read while trials run (default: 30)",
    )
    sub.set_defaults(local=False, manifest=None, name=None, namespace=None)


OPTIONS = {
    "entrypoints": entrypoint_options,
    "render": _render_options,
    "preview": _preview_options,
    "run": _run_options,
    "status": _status_options,
    "logs": _logs_options,
    "dashboard": _dashboard_options,
    "events": _observe_options,
    "check": _cluster_options,
}


class _Version(argparse._VersionAction):
    """`--version`: the installed distribution's, looked up only when asked for."""

    def __call__(self, parser: argparse.ArgumentParser, *args: Any) -> None:
        self.version = f"aichor-iac {_version()}"
        super().__call__(parser, *args)


class _Completion(argparse.Action):
    """`--print-completion SHELL`: shtab's script for this parser, then exit."""

    def __call__(
        self, parser: argparse.ArgumentParser, namespace: Any, shell: Any, *_: Any
    ) -> None:
        import shtab

        for action in _every_action(parser):
            kind = vars(action).get("complete")
            if kind in (FILE, DIRECTORY):
                _completes(action, getattr(shtab, kind))
        print(shtab.complete(parser, shell))
        parser.exit(0)


def _completes(action: argparse.Action, kind: str) -> None:
    """Mark what `action`'s argument completes to (FILE or DIRECTORY, for shtab)."""
    vars(action)["complete"] = kind  # the attribute shtab reads


def _every_action(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    """The actions of `parser` and of its commands' parsers."""
    found = []
    for action in parser._actions:
        found.append(action)
        if isinstance(action, argparse._SubParsersAction):
            for command in dict.fromkeys(action.choices.values()):  # (aliases: once)
                found += _every_action(command)
    return found


class _Formatter(argparse.HelpFormatter):
    """Paragraphs wrapped, indented lines (the examples) kept as written; at most 100
    columns, so that `--help` reads the same in the docs as on a terminal."""

    def __init__(self, prog: str) -> None:
        super().__init__(prog, width=min(shutil.get_terminal_size().columns, 100))

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        lines = []
        for line in text.splitlines():
            if line.startswith("  ") or not line:
                lines.append(indent + line)
            else:
                lines += textwrap.wrap(line, width, initial_indent=indent, subsequent_indent=indent)
        return "\n".join(lines)


def _version() -> str:
    """The installed distribution's version (pyproject.toml's)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("aichor-iac")
    except PackageNotFoundError:  # (run from a checkout that was never installed)
        return "unknown"
