"""`aichor-iac validate|render|preview MANIFEST`: the Pulumi expansion, offline.

Exit status: 0 on success, 2 when the manifest or stack config has problems (one line each on
stderr), 1 on an unexpected failure. Never a traceback unless AICHOR_IAC_DEBUG is set.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from collections import Counter
from pathlib import Path

from rich.console import Console
from rich.live import Live
from rich.markup import escape
from rich.table import Table
from rich.tree import Tree

from . import manifest as manifest_module
from . import output, planning
from .manifest import Manifest, ManifestError
from .settings import Settings, load_stack_file


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return args.handler(args)
    except ManifestError as error:
        print(error, file=sys.stderr)
        return 2
    except Exception as error:  # a bug of ours: say so in one line
        if os.environ.get("AICHOR_IAC_DEBUG"):
            raise
        print(
            f"aichor-iac: internal error: {type(error).__name__}: {error} "
            "(set AICHOR_IAC_DEBUG=1 for a traceback)",
            file=sys.stderr,
        )
        return 1


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="aichor-iac",
        description="Expand an AIchor manifest into Kubernetes objects offline, exactly as the "
        "Pulumi program does (no Pulumi CLI, no cluster).",
    )
    parser.add_argument("--version", action="version", version=f"aichor-iac {_version()}")
    commands = parser.add_subparsers(required=True, metavar="COMMAND")

    def command(name: str, handler, help: str) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=help, description=help)
        sub.add_argument(
            "manifest", metavar="MANIFEST", help="path to the AIchor manifest (- for stdin)"
        )
        sub.set_defaults(handler=handler)
        return sub

    schema = commands.add_parser("schema", help="print the manifest's JSON Schema (for editors)")
    schema.set_defaults(handler=_schema)
    command(
        "convert",
        _convert,
        "print a Kubeflow custom resource or a RayJob as an AIchor manifest, and what it cannot "
        "say",
    )
    for name, handler, help in (
        ("validate", _validate, "check a manifest; exit 2 with one line per problem"),
        ("render", _render, "print every Kubernetes object as multi-document YAML"),
        ("preview", _preview, "show the component, its objects in creation order and totals"),
        (
            "run",
            _run,
            "run every replica as local processes (Linux: root or user namespaces), each line "
            "of output prefixed with its pod; exit with the experiment's result",
        ),
    ):
        sub = command(name, handler, help)
        sub.add_argument(
            "--name",
            help="experiment name (default: stack config, manifest name, else the stack name)",
        )
        sub.add_argument("--namespace", help="namespace (default: stack config, else default)")
        sub.add_argument(
            "--stack-config",
            metavar="FILE",
            help="a Pulumi.<stack>.yaml to take aichor:* settings and the stack name from",
        )
        if name == "run":
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
            sub.add_argument(
                "--timeout", type=float, default=3600, metavar="SECONDS", help="default 3600"
            )
        if name == "render":
            sub.add_argument(
                "-o",
                "--output-dir",
                metavar="DIR",
                help="write one file per object into DIR instead",
            )
    return parser


def _version() -> str:
    """The installed distribution's version (pyproject.toml's)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("aichor-iac")
    except PackageNotFoundError:  # (run from a checkout that was never installed)
        return "unknown"


def _validate(args: argparse.Namespace) -> int:
    """What `render` checks, without Pulumi's engine: the same `planning.blueprint` decides,
    and the same objects are held to the API server's rules."""
    # (pulumi_kubernetes' types: imported only by the commands that need them)
    from .k8s import layout
    from .k8s.context import Context

    manifest, settings, name, _ = _inputs(args)
    layout.checked(Context(planning.blueprint(manifest, settings, name)), settings.create_namespace)
    origin = manifest.spec.origin
    what = f"{manifest.spec.operator} manifest" if origin is None else origin.source
    print(f"{manifest._source}: valid {what}")
    return 0


def _run(args: argparse.Namespace) -> int:
    """The experiment's replicas as local processes (`aichor_iac.local`), their output as it
    comes, one colour per pod on a terminal."""
    from .local import LocalUnavailable, run_experiment

    manifest, settings, name, _ = _inputs(args)
    if args.replicas is not None and args.replicas < 1:
        print("aichor-iac: --replicas: give 1 or more", file=sys.stderr)
        return 2
    console = Console(highlight=False)
    colours = ["cyan", "magenta", "green", "yellow", "blue", "red"]
    seen: dict[str, str] = {}

    def line(pod: str, text: str) -> None:
        colour = seen.setdefault(pod, colours[len(seen) % len(colours)])
        console.print(f"[{colour}]{escape(pod)}[/] {escape(text)}", soft_wrap=True)

    # On a terminal, a live table of each Job's pods by state stays below the output; piped,
    # the output is the pods' lines alone.
    live = Live(progress({}), console=console, transient=True, auto_refresh=False)
    shown = console.is_terminal
    try:
        with live if shown else contextlib.nullcontext():
            status = run_experiment(
                manifest,
                settings,
                name=name,
                replicas=args.replicas,
                timeout=args.timeout,
                on_line=line,
                on_progress=(lambda states: live.update(progress(states), refresh=True))
                if shown
                else None,
            )
    except LocalUnavailable as error:
        print(f"aichor-iac: {error}", file=sys.stderr)
        return 2
    print(f"aichor-iac: {name} {'succeeded' if status == 0 else f'failed ({status})'}")
    return status


STATES = ("pending", "init", "running", "succeeded", "failed")


def progress(states: dict[str, str]) -> Table:
    """A local run's pods by Job and state (`kubectl get jobs` with the pods' phases)."""
    from .local import job_of

    table = Table(box=None, header_style="bold", pad_edge=False)
    for column in ("job", *STATES):
        table.add_column(column, justify="left" if column == "job" else "right")
    jobs: dict[str, Counter[str]] = {}
    for pod, state in states.items():
        jobs.setdefault(job_of(pod), Counter())[state] += 1
    for job, counts in jobs.items():
        table.add_row(job, *(str(counts[state]) if counts[state] else "·" for state in STATES))
    return table


def _convert(args: argparse.Namespace) -> int:
    """The AIchor manifest of a custom resource (checked as any manifest is), with what it
    does not carry over as comments above it."""
    from .convert import convert

    resource = manifest_module.load(args.manifest)
    conversion = convert(resource)
    manifest_module.validate(conversion.manifest, f"{args.manifest} (converted)")
    origin = resource.spec.origin
    lines = [f"# {args.manifest}: {origin.source if origin else ''}, converted by aichor-iac."]
    if conversion.lost:
        lines.append("# Not carried over (an AIchor manifest cannot say it):")
        lines += [f"#   - {manifest_module.one_line(item)}" for item in conversion.lost]
    sys.stdout.write("\n".join(lines) + "\n" + output.to_yaml([conversion.manifest]))
    return 0


def _schema(args: argparse.Namespace) -> int:
    print(json.dumps(manifest_module.json_schema(), indent=2, sort_keys=True))
    return 0


def _inputs(args: argparse.Namespace) -> tuple[Manifest, Settings, str, str]:
    """The manifest, the settings, the experiment name and the stack the options give."""
    manifest = manifest_module.load(args.manifest)
    settings, stack = Settings(), "dev"
    if args.stack_config:
        settings, stack = load_stack_file(args.stack_config)
    if args.namespace:
        settings = settings.updated("--namespace", namespace=args.namespace)
    return (
        manifest,
        settings,
        args.name or settings.experiment_name or manifest.name or stack,
        stack,
    )


def _expand(args: argparse.Namespace):
    from .engine import expand  # imports Pulumi: keep `validate` fast

    manifest, settings, name, stack = _inputs(args)
    return expand(manifest, settings, stack, name)


def _render(args: argparse.Namespace) -> int:
    objects = _expand(args).objects
    if not args.output_dir:
        sys.stdout.write(output.to_yaml(objects))
        return 0
    directory = Path(args.output_dir)
    directory.mkdir(parents=True, exist_ok=True)
    for index, obj in enumerate(objects, 1):
        path = directory / output.file_name(index, obj)
        path.write_text(output.to_yaml([obj]), encoding="utf-8")
        print(path)
    return 0


def _preview(args: argparse.Namespace) -> int:
    rendering = _expand(args)
    names = {
        r.urn: f"{r.kind}/{r.inputs.get('metadata', {}).get('name', r.name)}"
        for r in rendering.resources
    }
    components = [r for r in rendering.resources if not r.custom and r.parent]
    console = Console(highlight=False, width=None if sys.stdout.isatty() else 1000)
    for component in components:
        tree = Tree(f"[bold]{component.type}[/] {component.name}")
        children = [r for r in rendering.resources if r.parent == component.urn]
        for step, child in enumerate(children, 1):
            kind, _, object_name = names[child.urn].partition("/")
            line = f"{step}. [bold]{kind}[/] {object_name}"
            if details := output.summary(child.inputs):
                line += f": {details}"
            after = [names[r.urn] for r in rendering.resources if r.urn in child.dependencies]
            if after:
                line += f" [dim](after {', '.join(after)})[/]"
            tree.add(line)
        console.print(tree)
    outputs = rendering.outputs
    gpus = ", ".join(f"{n} × {k}" for k, n in outputs.get("gpus", {}).items()) or "none"
    console.print(
        f"[bold]Totals:[/] {outputs.get('pods')} pods, GPUs: {gpus}, "
        f"{outputs.get('cpus')} CPUs, {outputs.get('memoryGiB')} GiB memory"
    )
    console.print("[bold]Outputs:[/]")
    for key, value in outputs.items():
        console.print(f"  {key}: {escape(str(value))}")  # values are text, not markup
    return 0


if __name__ == "__main__":
    sys.exit(main())
