"""`aichor-iac validate|render|preview|run|convert|schema`: the Pulumi expansion, offline.

Exit status: 0 on success, 2 when the manifest, the stack config or the command line has
problems (one line each on stderr; with `--output json` a document on stdout), 1 on an
unexpected failure. Never a traceback unless AICHOR_IAC_DEBUG is set.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import re
import shutil
import sys
import textwrap
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import shtab
import yaml
from rich.console import Console
from rich.live import Live
from rich.markup import escape

from . import doors, output, planning
from .experiment.model import Experiment
from .problems import ManifestError, Problem, one_line
from .settings import Settings, load_stack_file

EXAMPLES = {
    "validate": """
  aichor-iac validate experiment.yaml
  aichor-iac validate --stack-config stacks/Pulumi.dev.yaml   # the stack's aichor:manifest
  cat experiment.yaml | aichor-iac validate -
  aichor-iac validate experiment.yaml --output json | jq '.problems[]'""",
    "render": """
  aichor-iac render experiment.yaml | kubectl apply --dry-run=server -f -
  aichor-iac render experiment.yaml -o out/        # one file per object, stale ones removed
  aichor-iac render experiment.yaml --output json | jq -r '.items[].metadata.name'""",
    "preview": """
  aichor-iac preview experiment.yaml --stack-config stacks/Pulumi.dev.yaml
  aichor-iac preview new.yaml --diff old.yaml      # what pulumi up would change, field by field
  aichor-iac render experiment.yaml -o out/ && aichor-iac preview experiment.yaml --diff out/""",
    "run": """
  aichor-iac run --local experiment.yaml
  aichor-iac run --local experiment.yaml --replicas 1 --timeout 600   # a smoke test
  aichor-iac run --local experiment.yaml --output json | jq -r 'select(.pod) | .line'""",
    "convert": """
  aichor-iac convert pytorchjob.yaml > experiment.yaml
  aichor-iac convert rayjob.yaml --output json | jq '.lost'""",
    "schema": """
  aichor-iac schema > aichor-manifest.schema.json""",
    "examples": """
  aichor-iac examples                         # the examples, one line each
  aichor-iac examples pytorch -o my-exp/      # pytorch.yaml and the train.py it runs
  aichor-iac examples pytorch | aichor-iac preview -""",
}

# The files `render -o DIR` writes (`output.file_name`): the ones a new render replaces.
RENDERED = re.compile(r"^\d{2,}-[a-z0-9]+-[a-z0-9.-]+\.(yaml|json)$")


def main(argv: list[str] | None = None) -> int:
    try:
        return _main(argv)
    except BrokenPipeError:  # the reader went away (`| head`): stop quietly, as Unix tools do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # (for the exit flush)
        return 128 + 13  # as a process SIGPIPE ends


def _main(argv: list[str] | None) -> int:
    args = parser().parse_args(argv)
    try:
        return args.handler(args)
    except ManifestError as error:
        _report(args, error.source, error.problems)
        return 2
    except BrokenPipeError:
        raise
    except Exception as error:  # a bug of ours: say so in one line
        if os.environ.get("AICHOR_IAC_DEBUG"):
            raise
        print(
            f"aichor-iac: internal error: {type(error).__name__}: {error} "
            "(set AICHOR_IAC_DEBUG=1 for a traceback)",
            file=sys.stderr,
        )
        return 1


def parser() -> argparse.ArgumentParser:
    """The command line; docs/cli.md shows its `--help` (a test compares them)."""
    main_parser = argparse.ArgumentParser(
        prog="aichor-iac",
        description="Expand an AIchor manifest into Kubernetes objects offline, exactly as the "
        "Pulumi program does (no Pulumi CLI, no cluster).",
        epilog="Run `aichor-iac COMMAND --help` for a command's options and examples.",
        formatter_class=_Formatter,
    )
    main_parser.add_argument("--version", action="version", version=f"aichor-iac {_version()}")
    main_parser.add_argument(
        "--print-completion",
        choices=("bash", "zsh", "tcsh"),
        action=_Completion,
        help="print a shell completion script (docs: The offline CLI)",
    )
    commands = main_parser.add_subparsers(required=True, metavar="COMMAND", title="commands")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--output",
        choices=("text", "json"),
        default="text",
        help="text for people (default), json for scripts and CI",
    )

    def command(name: str, handler: Any, help: str, manifest: str | None) -> Any:
        sub = commands.add_parser(
            name,
            help=help,
            description=help,
            parents=[common],
            epilog="examples:" + EXAMPLES[name],
            formatter_class=_Formatter,
        )
        if manifest:
            sub.add_argument(
                "manifest", metavar="MANIFEST", nargs="?", help=manifest
            ).complete = shtab.FILE
        sub.set_defaults(handler=handler)
        return sub

    for name, handler, help in (
        ("validate", _validate, "check a manifest; exit 2 with one line per problem"),
        ("render", _render, "print every Kubernetes object as multi-document YAML"),
        (
            "preview",
            _preview,
            "show what pulumi up would do, as pulumi preview does: the component, its objects "
            "in creation order, outputs and totals",
        ),
        (
            "run",
            _run,
            "run every replica as local processes (Linux: root or user namespaces), each line "
            "of output prefixed with its pod; exit with the experiment's result",
        ),
    ):
        sub = command(
            name,
            handler,
            help,
            "the AIchor manifest or custom resource (- for stdin; default: the stack's "
            "aichor:manifest)",
        )
        sub.add_argument(
            "--stack-config",
            metavar="FILE",
            help="a Pulumi.<stack>.yaml to take aichor:* settings and the stack name from",
        ).complete = shtab.FILE
        sub.add_argument(
            "--name",
            help="experiment name (default: stack config, manifest name, else the stack name)",
        )
        sub.add_argument("--namespace", help="namespace (default: stack config, else default)")
        if name == "render":
            sub.add_argument(
                "-o",
                "--output-dir",
                metavar="DIR",
                help="write one file per object into DIR instead (removing the files an "
                "earlier render wrote there)",
            ).complete = shtab.DIRECTORY
        if name == "preview":
            sub.add_argument(
                "--diff",
                metavar="OLD",
                help="compare with OLD (a manifest, or a directory render -o wrote): create, "
                "update, replace or delete, and each field that changes",
            ).complete = shtab.FILE
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
    command("schema", _schema, "print the manifest's JSON Schema (for editors)", None)
    examples = command(
        "examples",
        _examples,
        "list the example manifests, print one or copy it with its scripts",
        None,
    )
    examples.add_argument("example", metavar="NAME", nargs="?", help="e.g. pytorch")
    examples.add_argument(
        "-o", "--output-dir", metavar="DIR", help="copy the example and its scripts into DIR"
    ).complete = shtab.DIRECTORY
    command(
        "convert",
        _convert,
        "print a Kubeflow custom resource or a RayJob as an AIchor manifest, and what it cannot "
        "say",
        "the custom resource's file (- for stdin)",
    )
    return main_parser


class _Completion(argparse.Action):
    """`--print-completion SHELL`: shtab's script for this parser, then exit."""

    def __call__(
        self, parser: argparse.ArgumentParser, namespace: Any, shell: Any, *_: Any
    ) -> None:
        print(shtab.complete(parser, shell))
        parser.exit(0)


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


# --- what the options give -------------------------------------------------------------------


@dataclass(frozen=True)
class Inputs:
    manifest: Experiment
    settings: Settings
    name: str  # the experiment's
    stack: str
    stack_file: str | None


def _inputs(args: argparse.Namespace) -> Inputs:
    """The manifest (MANIFEST, else the stack's aichor:manifest), the settings, the
    experiment's name and the stack the options give."""
    settings, stack = Settings(), "dev"
    if args.stack_config:
        settings, stack = load_stack_file(args.stack_config)
    if args.namespace:
        settings = settings.updated("--namespace", namespace=args.namespace)
    path = args.manifest
    configured = _stack_manifest(args.stack_config, settings)
    if path is None:
        if configured is None:
            reason = "give MANIFEST, or --stack-config with an aichor:manifest"
            raise ManifestError("aichor-iac", [Problem("MANIFEST", f"missing: {reason}")])
        path = str(configured)
    elif configured is not None and (path == "-" or Path(path).resolve() != configured.resolve()):
        reason = (
            f"{path} is used, not the stack's {settings.manifest} (what pulumi up would use): "
            "leave MANIFEST out to check the stack's"
        )
        _print_problem(Problem("aichor:manifest", reason), args.stack_config, warning=True)
    manifest = doors.load(path)
    name = _name(args, settings, manifest, stack)
    return Inputs(manifest, settings, name, stack, args.stack_config)


def _name(args: argparse.Namespace, settings: Settings, manifest: Experiment, stack: str) -> str:
    """The experiment's name: --name, else the stack's, else the manifest's, else the stack."""
    return args.name or settings.experiment_name or manifest.name or stack


def _stack_manifest(stack_file: str | None, settings: Settings) -> Path | None:
    """The stack's aichor:manifest, relative to its Pulumi project (the directory holding
    Pulumi.yaml above the stack file, where `pulumi up` runs the program)."""
    if not stack_file or not settings.manifest:
        return None
    path = Path(settings.manifest)
    if path.is_absolute():
        return path
    for directory in Path(stack_file).resolve().parents:
        if (directory / "Pulumi.yaml").exists():
            found = directory / path
            nearby = Path(os.path.relpath(found))  # as the user would write it, if short
            return found if nearby.parts[:1] == ("..",) else nearby
    return path  # no project around it: as given, from here


def _expand(inputs: Inputs, manifest: Experiment | None = None, name: str | None = None):
    from .engine import expand  # imports Pulumi: keep `validate` fast

    manifest = manifest or inputs.manifest
    return expand(manifest, inputs.settings, inputs.stack, name or inputs.name)


# --- problems and warnings -------------------------------------------------------------------


def _problem_json(problem: Problem, source: str, severity: str) -> dict[str, Any]:
    return {
        "file": source,
        "line": problem.line,
        "path": problem.path,
        "message": problem.message,
        "severity": severity,
    }


def _report(args: argparse.Namespace, source: str, problems: list[Problem]) -> None:
    """Problems that end the command: a document on stdout under `--output json`, else one
    line each on stderr."""
    if getattr(args, "output", "text") == "json":
        _print_json(
            {"valid": False, "problems": [_problem_json(p, source, "error") for p in problems]}
        )
        return
    for problem in problems:
        _print_problem(problem, source)


def _print_problem(problem: Problem, source: str, warning: bool = False) -> None:
    """`FILE:LINE: PATH: MESSAGE` on stderr (a warning: `FILE:LINE: warning: PATH: MESSAGE`),
    whatever the output format: stdout stays the command's. Coloured on a terminal."""
    where, _, rest = problem.format(source).partition(": ")
    text = f"[yellow bold]warning:[/] {escape(rest)}" if warning else f"[red]{escape(rest)}[/]"
    Console(stderr=True, highlight=False, soft_wrap=True).print(f"[bold]{escape(where)}:[/] {text}")


def _show_warnings(
    inputs: Inputs, blueprint: planning.Blueprint | None = None
) -> list[dict[str, Any]]:
    """The experiment's warnings on stderr, each with the file it is about (the stack file
    for an `aichor:` key); as JSON for the commands whose document holds them."""
    blueprint = blueprint or planning.blueprint(inputs.manifest, inputs.settings, inputs.name)
    found = []
    for warning in planning.warnings(blueprint):
        source = planning.about(warning, inputs.manifest.source, inputs.stack_file)
        _print_problem(warning, source, warning=True)
        found.append(_problem_json(warning, source, "warning"))
    return found


def _print_json(document: Any) -> None:
    print(json.dumps(document, indent=2, ensure_ascii=False))


# --- the commands ----------------------------------------------------------------------------


def _validate(args: argparse.Namespace) -> int:
    """What `render` checks, without Pulumi's engine: the same `planning.blueprint` decides,
    and the same objects are held to the API server's rules."""
    # The objects from stand-ins of pulumi_kubernetes' types, which take half a second to
    # import: editors and hooks call `validate` on every save (k8s/kinds.py).
    from .k8s import kinds, layout
    from .k8s.context import Context

    inputs = _inputs(args)
    blueprint = planning.blueprint(inputs.manifest, inputs.settings, inputs.name)
    with kinds.plain():
        layout.checked(Context(blueprint), inputs.settings.create_namespace)
    origin = inputs.manifest.spec.origin
    what = f"{inputs.manifest.spec.operator} manifest" if origin is None else origin.source
    warnings = _show_warnings(inputs, blueprint)
    if args.output == "json":
        document = {"file": inputs.manifest.source, "valid": True, "kind": what}
        _print_json({**document, "problems": [], "warnings": warnings})
        return 0
    print(f"{inputs.manifest.source}: valid {what}")
    return 0


def _render(args: argparse.Namespace) -> int:
    """Every object on stdout (YAML documents, or a v1 List as `kubectl get -o json` gives
    several), or one file each in a directory: nothing else on stdout, warnings on stderr."""
    inputs = _inputs(args)
    _show_warnings(inputs)
    objects = _expand(inputs).objects
    as_json = args.output == "json"
    if not args.output_dir:
        if as_json:
            _print_json({"apiVersion": "v1", "kind": "List", "items": objects})
        else:
            sys.stdout.write(output.to_yaml(objects))
        return 0
    directory = Path(args.output_dir)
    if directory.exists() and not directory.is_dir():
        reason = "not a directory: give a directory for one file per object, or leave -o out"
        raise ManifestError(str(directory), [Problem("", reason + " and redirect stdout")])
    directory.mkdir(parents=True, exist_ok=True)
    written = set()
    for index, obj in enumerate(objects, 1):
        path = directory / output.file_name(index, obj, "json" if as_json else "yaml")
        text = json.dumps(obj, indent=2) + "\n" if as_json else output.to_yaml([obj])
        path.write_text(text, encoding="utf-8")
        written.add(path.name)
    for stale in directory.iterdir():  # an earlier render's objects, gone from this one
        if RENDERED.match(stale.name) and stale.name not in written and stale.is_file():
            stale.unlink()
    return 0


def _preview(args: argparse.Namespace) -> int:
    from . import preview

    inputs = _inputs(args)
    warnings = _show_warnings(inputs)
    rendering = _expand(inputs)
    old = _old(args, inputs) if args.diff else None
    steps = preview.steps(rendering, inputs.stack, old)
    if args.output == "json":
        _print_json(preview.as_json(steps, rendering, inputs.stack, warnings))
        return 0
    # Lines are never cut (a terminal wraps them; piped, grep sees each whole).
    console = Console(highlight=False, soft_wrap=True)
    preview.show(console, steps, rendering, inputs.stack, diff=old is not None)
    return 0


def _old(args: argparse.Namespace, inputs: Inputs):
    """The experiment `--diff` compares with: another manifest expanded with the same stack
    config and options (named as MANIFEST would be), or the objects a `render -o` directory
    holds."""
    from . import preview
    from .engine import Rendering, Resource

    path = args.diff
    if not Path(path).is_dir():
        manifest = doors.load(path)
        return _expand(inputs, manifest, _name(args, inputs.settings, manifest, inputs.stack))
    resources = []
    for file in sorted(Path(path).iterdir()):
        if not RENDERED.match(file.name):
            continue
        try:
            text = file.read_text(encoding="utf-8")
            loaded = (
                [json.loads(text)] if file.suffix == ".json" else list(yaml.safe_load_all(text))
            )
        except (OSError, UnicodeDecodeError, ValueError, yaml.YAMLError) as error:
            reason = f"not an object render -o wrote: {' '.join(str(error).split())}"
            raise ManifestError(str(file), [Problem("", reason)]) from None
        for obj in loaded:
            name = (obj.get("metadata") or {}).get("name") if isinstance(obj, dict) else None
            if not name or not obj.get("kind"):
                reason = "not a Kubernetes object (kind and metadata.name)"
                raise ManifestError(str(file), [Problem("", reason)])
            resources.append(Resource(preview.type_token(obj), name, "", "", [], True, obj))
    if not resources:
        reason = "holds no rendered objects (the NN-kind-name.yaml files render -o writes)"
        raise ManifestError(path, [Problem("", reason)])
    return Rendering(resources, {})


def _run(args: argparse.Namespace) -> int:
    """The experiment's replicas as local processes (`aichor_iac.local`), their output as it
    comes, one colour per pod on a terminal; `--output json`, one JSON line per output line
    and one for the result."""
    from .local import LocalUnavailable, run_experiment
    from .local.progress import progress

    inputs = _inputs(args)
    if args.replicas is not None and args.replicas < 1:
        raise ManifestError("--replicas", [Problem("", "give 1 or more")])
    _show_warnings(inputs)
    as_json = args.output == "json"
    console = Console(highlight=False)
    colours = ["cyan", "magenta", "green", "yellow", "blue", "red"]
    seen: dict[str, str] = {}
    lock = threading.Lock()

    def line(pod: str, text: str) -> None:
        if as_json:  # (pods print from threads of their own: one whole line at a time)
            with lock:
                print(json.dumps({"pod": pod, "line": text}, ensure_ascii=False), flush=True)
            return
        colour = seen.setdefault(pod, colours[len(seen) % len(colours)])
        console.print(f"[{colour}]{escape(pod)}[/] {escape(text)}", soft_wrap=True)

    # On a terminal, a live table of each Job's pods by state stays below the output; piped,
    # the output is the pods' lines alone.
    live = Live(progress({}), console=console, transient=True, auto_refresh=False)
    shown = console.is_terminal and not as_json
    try:
        with live if shown else contextlib.nullcontext():
            status = run_experiment(
                inputs.manifest,
                inputs.settings,
                name=inputs.name,
                replicas=args.replicas,
                timeout=args.timeout,
                on_line=line,
                on_progress=(lambda states: live.update(progress(states), refresh=True))
                if shown
                else None,
            )
    except LocalUnavailable as error:
        raise ManifestError("aichor-iac run --local", [Problem("", str(error))]) from None
    result = "succeeded" if status == 0 else "failed"
    if as_json:
        print(json.dumps({"experiment": inputs.name, "result": result, "status": status}))
    else:
        print(f"aichor-iac: {inputs.name} {result if status == 0 else f'failed ({status})'}")
    return status


def _convert(args: argparse.Namespace) -> int:
    """The AIchor manifest of a custom resource (checked as any manifest is), with what it
    does not carry over as comments above it."""
    from .convert import convert

    if args.manifest is None:
        raise ManifestError("aichor-iac convert", [Problem("", "give the custom resource's file")])
    resource = doors.load(args.manifest)
    conversion = convert(resource)
    doors.validate(conversion.manifest, f"{resource.source} (converted)")
    lost = [one_line(item) for item in conversion.lost]
    if args.output == "json":
        _print_json({"source": resource.source, "manifest": conversion.manifest, "lost": lost})
        return 0
    origin = resource.spec.origin
    lines = [f"# {resource.source}: {origin.source if origin else ''}, converted by aichor-iac."]
    if lost:
        lines.append("# Not carried over (an AIchor manifest cannot say it):")
        lines += [f"#   - {item}" for item in lost]
    sys.stdout.write("\n".join(lines) + "\n" + output.to_yaml([conversion.manifest]))
    return 0


def shipped(name: str) -> Path:
    """A directory of data the package ships (`examples`, `schema`): in the installed wheel
    (aichor_iac/examples, aichor_iac/schema), else in the checkout (an editable install)."""
    inside = Path(__file__).parent / name
    return inside if inside.is_dir() else Path(__file__).parent.parent / name


def _examples(args: argparse.Namespace) -> int:
    """The examples the docs refer to, from the installed package."""
    directory = shipped("examples")
    available = {p.stem: p for p in sorted(directory.glob("*.yaml"))}
    if args.example is None:
        described = {n: _description(p) for n, p in available.items()}
        if args.output == "json":
            _print_json([{"name": n, "description": d} for n, d in described.items()])
        else:
            width = max(map(len, described))
            for name, description in described.items():
                print(f"{name.ljust(width)}  {description}")
        return 0
    if args.example not in available:
        reason = f"no such example; the examples are {', '.join(available)}"
        raise ManifestError("aichor-iac examples", [Problem(args.example, reason)])
    path = available[args.example]
    text = path.read_text(encoding="utf-8")
    if not args.output_dir:
        sys.stdout.write(text)
        return 0
    target = Path(args.output_dir)
    target.mkdir(parents=True, exist_ok=True)
    scripts = sorted({m for m in re.findall(r"[\w-]+\.py", text) if (directory / m).is_file()})
    for name in [path.name, *scripts]:
        shutil.copyfile(directory / name, target / name)
    return 0


def _description(path: Path) -> str:
    """An example's first sentence, from the comment above its manifest."""
    lines = path.read_text(encoding="utf-8").splitlines()
    comment = " ".join(
        line.lstrip("# ").strip()
        for line in itertools.takewhile(lambda line: line.startswith("#"), lines)
        if "yaml-language-server" not in line
    )
    return comment.split(". ")[0].removesuffix(".")


def _schema(args: argparse.Namespace) -> int:
    """JSON whatever `--output` says: a JSON Schema is JSON."""
    from .doors.aichor import json_schema

    print(json.dumps(json_schema(), indent=2, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
