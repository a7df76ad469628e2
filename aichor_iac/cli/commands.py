"""The commands: validate, render, preview, run --local, convert, schema, examples. Each takes
the parsed options and returns the exit status; problems are raised as ManifestError."""

from __future__ import annotations

import argparse
import itertools
import json
import re
import shutil
import sys
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from .. import doors, planning
from ..problems import ManifestError, Problem, one_line
from ..review import output
from . import process
from .inputs import Inputs, expand, inputs_of, names_of, show_warnings
from .report import console, print_json

if TYPE_CHECKING:
    from rich.console import Console

    from ..experiment.state import TrainerStatus
    from ..local.parts import Outcome
    from ..records.model import Failure
    from ..sweeps.results import SweepReport
    from .running import Asked

# The files `render -o DIR` writes (`output.file_name`): the ones a new render replaces.
RENDERED = re.compile(r"^\d{2,}-[a-z0-9]+-[a-z0-9.-]+\.(yaml|json)$")


def validate(args: argparse.Namespace) -> int:
    """What `render` checks, without Pulumi's engine: the same `planning.blueprint` decides,
    and the same objects are held to the API server's rules."""
    # The objects from stand-ins of pulumi_kubernetes' types, which take half a second to
    # import: editors and hooks call `validate` on every save (k8s/kinds.py).
    from ..k8s import kinds, layout
    from ..k8s.context import Context

    inputs = inputs_of(args)
    blueprints, documents = [], []
    for manifest, name in inputs.each():
        blueprint = planning.blueprint(manifest, inputs.settings, name)
        with kinds.plain():
            layout.build(Context(blueprint), inputs.settings.create_namespace)
        origin = manifest.spec.origin
        what = f"{manifest.spec.operator} manifest" if origin is None else origin.source
        blueprints.append(blueprint)
        documents.append({"file": manifest.source, "valid": True, "kind": what})
    warnings = show_warnings(inputs, *blueprints)
    if args.output == "json":
        if len(documents) == 1:
            print_json({**documents[0], "problems": [], "warnings": warnings})
        else:
            experiments = [{"name": n, **d} for n, d in zip(inputs.names, documents, strict=True)]
            print_json(
                {"valid": True, "experiments": experiments, "problems": [], "warnings": warnings}
            )
        return 0
    for name, document in zip(inputs.names, documents, strict=True):
        named = f" ({name})" if len(documents) > 1 else ""
        print(f"{document['file']}: valid {document['kind']}{named}")
    return 0


def render(args: argparse.Namespace) -> int:
    """Every object on stdout (YAML documents, or a v1 List as `kubectl get -o json` gives
    several), or one file each in a directory: nothing else on stdout, warnings on stderr."""
    inputs = inputs_of(args)
    show_warnings(inputs)
    process.batch()
    objects = expand(inputs).objects
    as_json = args.output == "json"
    if not args.output_dir:
        if as_json:
            print_json({"apiVersion": "v1", "kind": "List", "items": objects})
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


def preview(args: argparse.Namespace) -> int:

    from ..review import preview

    inputs = inputs_of(args)
    warnings = show_warnings(inputs)
    process.batch()
    rendering = expand(inputs)
    old = _old(args, inputs) if args.diff else None
    steps = preview.steps(rendering, inputs.stack, old)
    later = preview.later_trials([m.trial for m in inputs.manifests if m.trial is not None])
    if args.output == "json":
        print_json(preview.as_json(steps, rendering, inputs.stack, warnings, later))
        return 0
    if args.output == "markdown":
        from ..review.markdown import markdown

        sys.stdout.write(markdown(steps, rendering, inputs.stack, warnings, later))
        return 0
    # Lines are never cut (a terminal wraps them; piped, grep sees each whole).
    out = console(soft_wrap=True)
    preview.show(out, steps, rendering, inputs.stack, diff=old is not None, later=later)
    return 0


def _old(args: argparse.Namespace, inputs: Inputs):
    """The experiment `--diff` compares with: another manifest expanded with the same stack
    config and options (named as MANIFEST would be), or the objects a `render -o` directory
    holds."""
    from ..engine import Rendering, Resource
    from ..review import preview

    path = args.diff
    # (a directory of experiments, unless `render -o` wrote it)
    files = [f.name for f in Path(path).iterdir()] if Path(path).is_dir() else []
    experiments = not any(RENDERED.match(f) for f in files) and any(
        f.endswith((".yaml", ".yml")) for f in files
    )
    if not Path(path).is_dir() or experiments:
        manifests = doors.load_all(path)
        names = names_of(args, inputs.settings, manifests, inputs.stack)
        if len(manifests) == 1:
            return expand(replace(inputs, manifests=manifests, names=names))
        return expand(inputs, manifests)
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


def run(args: argparse.Namespace) -> int:
    """The experiment's replicas as local processes (`aichor_iac.local`), their output as it
    comes, one colour per pod on a terminal; `--output json`, one JSON line per output line
    and one for the result. Several experiments (a sweep's trials) run together, in the order
    `pulumi up` creates them, each with its result, and each sweep's table at the end."""
    from ..local import LocalUnavailable
    from .keeping import kept
    from .running import Asked, RunOutput

    inputs = inputs_of(args)
    if args.replicas is not None and args.replicas < 1:
        raise ManifestError("--replicas", [Problem("", "give 1 or more")])
    if args.plot and not any(m.trial for m in inputs.manifests):
        raise ManifestError("--plot", [Problem("", "the manifest holds no sweep to plot")])
    show_warnings(inputs)
    as_json = args.output == "json"
    out = console()
    shown = RunOutput(out, as_json, {}, {})
    asked = None
    if any(m.trial and m.trial.learns for m in inputs.manifests):
        asked = Asked(inputs.grown({}), shown, _entry_pods)
        inputs = asked.inputs
    trials = {name for manifest, name in inputs.each() if manifest.trial is not None}
    shown.follow(_entry_pods(inputs), trials)
    keeping = None
    try:
        with kept(args, inputs) as keeping, shown.showing():
            moved = shown.moved if shown.shown else None
            outcomes = _run_locally(args, inputs, shown.line, moved, asked, keeping.folder)
            keeping.decided(
                {name: (pod, code) for name, (code, pod) in outcomes.items() if code and pod}
            )
    except LocalUnavailable as error:
        raise ManifestError("aichor-iac run --local", [Problem("", str(error))]) from None
    except KeyboardInterrupt:  # (Ctrl-C: the pods are stopped, the run kept as Interrupted)
        return interrupted(keeping.folder if keeping else None, as_json)
    inputs = asked.inputs if asked else inputs  # (every trial the sweep asked)
    runs = (run for record in keeping.records for run in record.runs())
    failures = {run.name: run.failed_first for run in runs if run.failed_first}
    ended = (outcomes, shown.reports, failures)
    return _results(inputs, ended, shown.trial_lines(), out if not as_json else None, args.plot)


def interrupted(folder: Path | None, as_json: bool) -> int:
    """What a run stopped by Ctrl-C had done (each experiment's or trial's state, as its
    record keeps it), and how to read it again; the exit status of a process Ctrl-C ends."""
    from ..records import store

    records = store.read_records(folder) if folder else []
    for run in (run for record in records for run in record.runs()):
        if as_json:
            print(json.dumps({"experiment": run.name, "result": run.state.value.lower()}))
        else:
            print(f"aichor-iac: {run.name} {run.state.value.lower()}", flush=True)
    kept = f"; kept: aichor-iac history {folder.name}" if folder else ""
    print(f"aichor-iac: interrupted{kept}", file=sys.stderr, flush=True)
    return 130


def _run_locally(
    args: argparse.Namespace,
    inputs: Inputs,
    line: Callable[[str, str], None],
    on_progress: Callable[[Mapping[str, str]], None] | None,
    asked: Asked | None = None,
    record: Path | None = None,
) -> dict[str, Outcome]:
    """Each experiment's outcome (exit status, deciding pod) from the local run (one that
    grows as its sweeps that learn ask, `asked`), kept in `record`."""
    from ..local import LocalRunFailed, run_experiment, run_experiments

    options = {
        "replicas": args.replicas,
        "timeout": args.timeout,
        "entrypoints": inputs.settings.entrypoint_argvs(),
        "on_line": line,
        "on_progress": on_progress,
        "record": record,
        "source": inputs.absolute,
    }
    if len(inputs.manifests) > 1 or asked is not None:
        return run_experiments(
            inputs.manifests, inputs.settings, stack=inputs.stack, grow=asked, **options
        )
    try:
        run_experiment(inputs.manifest, inputs.settings, name=inputs.name, **options)
    except LocalRunFailed as failed:  # (its lines were printed as they came)
        return {inputs.name: (failed.status, failed.pod)}
    return {inputs.name: (0, None)}


def _results(
    inputs: Inputs,
    ended: tuple[dict[str, Outcome], dict[str, TrainerStatus], dict[str, Failure]],
    lines: dict[str, list[str]],
    console: Console | None,
    plotted: str | None,
) -> int:
    """Each experiment's result (a line each, JSON without `console`) with its last progress
    report, each sweep's table (and picture, to `plotted`); the exit status: the first
    failure's, else 0."""
    outcomes, reports, failures = ended
    from ..experiment.trial import EARLY_STOPPED as EARLY
    from ..local.parts import first_failure
    from ..observe.progress import summary
    from ..sweeps.plot import plot
    from ..sweeps.results import view

    sweeps = _sweeps(inputs, outcomes, lines, reports)
    stopped = {r["trial"] for f in sweeps.values() for r in f["trials"] if r["state"] == EARLY}
    for _, name in inputs.each():
        status = outcomes[name][0]
        result = "succeeded" if status == 0 else "failed"
        result = "stopped early" if name in stopped else result  # (by its sweep's rule)
        pod = outcomes[name][1]
        last = {"trainerStatus": reports[name]} if name in reports else {}
        first = {"failedFirst": pod} if status and pod else {}
        if console is None:
            told = {"experiment": name, "result": result, "status": status, **first, **last}
            print(json.dumps(told))
        else:
            why = _why(outcomes[name], failures.get(name)) if status else ""
            said = result if status == 0 else f"failed ({status}){why}"
            said += f" ({summary(reports[name])})" if name in reports else ""
            print(f"aichor-iac: {name} {said}", flush=True)
    for sweep, found in sweeps.items():
        if console is None:
            print(json.dumps({"sweep": sweep, **found}))
        else:
            console.print(view(found))
    if plotted:
        plot(sweeps, plotted)
    return first_failure(outcomes)[0] or _sweeps_failed(sweeps)


def _why(outcome: Outcome, failure: Failure | None) -> str:
    """What follows a failed experiment's `failed (N)`: what decided it. A pod's failure is
    named, with its signal; and, where its record (`failure`) counts other pods that failed
    after it (a peer's "Connection closed by peer"), that their errors followed from it."""
    from ..local.parts import HELD_BACK, TIMED_OUT, failed_first

    if outcome == HELD_BACK:
        return ": not created, pulumi up failed first"
    if outcome == TIMED_OUT:
        return ": timed out"
    if outcome[1] is None:
        return ""
    return f": {failed_first(outcome)}{failure.followed if failure else ''}"


def _sweeps_failed(sweeps: dict[str, SweepReport]) -> int:
    """1 if a sweep failed (Katib's count, its MetricsUnavailable trials among the failed) or
    no trial of it gave its objective, each trial without it said with what it printed
    instead; else 0."""
    from ..experiment.state import State
    from ..experiment.trial import FAILED, METRICS_UNAVAILABLE
    from ..sweeps.results import unavailable

    status = 0
    for sweep, found in sweeps.items():
        missing = [r for r in found["trials"] if r["state"] == METRICS_UNAVAILABLE]
        for row in missing[:3]:
            print(f"aichor-iac: {unavailable(row, found['objective'])}", file=sys.stderr)
        if len(missing) > 3:
            print(f"aichor-iac: and {len(missing) - 3} more trials alike", file=sys.stderr)
        ended = [r for r in found["trials"] if State(r["state"]).ended]
        if found["failed"] or (ended and found["best"] is None):
            failed = sum(r["state"] in (FAILED, METRICS_UNAVAILABLE) for r in found["trials"])
            why = (
                f"it failed: {failed} of its trials failed or gave no {found['objective']}"
                if found["failed"]
                else f"no trial gave its objective {found['objective']}"
            )
            print(f"aichor-iac: sweep {sweep}: {why}", file=sys.stderr, flush=True)
            status = 1
    return status


def _entry_pods(inputs: Inputs) -> dict[str, str]:
    """Each experiment's entry-point pod (its entry Job's first: the Job's own pod, or an
    Indexed Job's pod 0) -> the experiment, whose metrics its lines hold (a trial's) and whose
    progress receiver it carries."""
    from ..k8s.context import Context

    found = {}
    for manifest, name in inputs.each():
        entry = Context(planning.blueprint(manifest, inputs.settings, name)).entry_job()
        found.update({entry: name, f"{entry}-0": name})
    return found


def _sweeps(
    inputs: Inputs,
    outcomes: dict[str, Outcome],
    lines: dict[str, list[str]],
    reports: dict[str, TrainerStatus],
) -> dict[str, SweepReport]:
    """Each sweep's results (`sweeps.report`) from the run: each trial's state from its
    outcome, its metrics from its last progress report, else its entry pod's `lines`."""
    from ..local.parts import trial_state
    from ..sweeps import results as sweeps

    trials: dict[str, list[sweeps.TrialRun]] = {}
    for manifest, name in inputs.each():
        if manifest.trial is None:
            continue
        state = trial_state(outcomes[name], bool(lines[name]))
        place = sweeps.TrialRun(name, manifest.trial, state, lines[name], reports.get(name))
        trials.setdefault(manifest.trial.sweep, []).append(place)
    return {sweep: sweeps.report(each) for sweep, each in trials.items()}


def convert(args: argparse.Namespace) -> int:
    """The AIchor manifest of a custom resource (checked as any manifest is), with what it
    does not carry over as comments above it."""
    from ..convert import convert as converted

    if args.manifest is None:
        raise ManifestError("aichor-iac convert", [Problem("", "give the custom resource's file")])
    found = doors.load_all(args.manifest)
    if (trial := found[0].trial) is not None:
        reason = (
            f"a sweep ({trial.sweep}: {trial.count} trials, at most {trial.parallel} at once): an "
            "AIchor manifest cannot say a sweep, only one of its trials; keep the Katib "
            "Experiment (aichor-iac runs it as it is), or convert one trial's resource"
        )
        raise ManifestError(found[0].source, [Problem("kind", reason)])
    if len(found) > 1:
        names = ", ".join(e.name or "(no name)" for e in found)
        reason = f"holds {len(found)} experiments ({names}): convert takes one; give its own file"
        raise ManifestError(found[0].source, [Problem("", reason)])
    resource = found[0]
    conversion = converted(resource)
    doors.validate(conversion.manifest, f"{resource.source} (converted)")
    lost = [one_line(item) for item in conversion.lost]
    if args.output == "json":
        print_json({"source": resource.source, "manifest": conversion.manifest, "lost": lost})
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
    package = Path(__file__).parent.parent
    inside = package / name
    return inside if inside.is_dir() else package.parent / name


def examples(args: argparse.Namespace) -> int:
    """The examples the docs refer to, from the installed package."""
    directory = shipped("examples")
    available = {p.stem: p for p in sorted(directory.glob("*.yaml"))}
    if args.example is None:
        described = {n: _description(p) for n, p in available.items()}
        if args.output == "json":
            print_json([{"name": n, "description": d} for n, d in described.items()])
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


def schema(args: argparse.Namespace) -> int:
    """JSON whatever `--output` says: a JSON Schema is JSON."""
    from ..doors.aichor import json_schema

    print(json.dumps(json_schema(), indent=2, sort_keys=True))
    return 0
