"""Katib's Experiment as a sweep (issue 41): Katib's own examples (tests/katib/, kubeflow/katib
v1beta1 examples, unchanged) render their trials as Katib's controller would make them —
every placeholder replaced, every value in its feasible space, the same trials on every
render — or are refused naming what needs Katib's own services; the trials are created at
most `parallelTrialCount` at once, each later one after an earlier one has ended."""

from __future__ import annotations

import asyncio
import copy
import inspect
import itertools
import re
import sys
from dataclasses import replace
from decimal import Decimal
from pathlib import Path
from typing import Any

import pulumi
import pytest
import schemas
import yaml
from conftest import ROOT

from aichor_iac import cli, doors, engine, planning
from aichor_iac.components import experiments
from aichor_iac.experiment.state import State
from aichor_iac.k8s.awaits import ENDED, SKIP_AWAIT, WAIT_FOR
from aichor_iac.local.prepare import sweep_gates
from aichor_iac.problems import ManifestError
from aichor_iac.review import preview
from aichor_iac.settings import Settings

EXAMPLES = ROOT / "tests" / "katib"
# The examples whose trials are custom resources read here, and the parameter each passes
# on the command line (name in the trial, parameter of the search space).
RUNNABLE = {
    "random.yaml": {"lr": "--lr=", "momentum": "--momentum="},  # (batch/v1 Job trials)
    "grid.yaml": {"lr": "--lr=", "momentum": "--momentum="},
    "sobol.yaml": {"lr": "--lr=", "momentum": "--momentum="},
    "file-metrics-collector.yaml": {"lr": "--lr=", "momentum": "--momentum="},
    "file-metrics-collector-with-json-format.yaml": {"lr": "--lr=", "momentum": "--momentum="},
    "pytorchjob-mnist.yaml": {"lr": "--lr=", "momentum": "--momentum="},
    "tfjob-mnist-with-summaries.yaml": {
        "learning_rate": "--learning-rate=",
        "batch_size": "--batch-size=",
    },
    "xgboostjob-lightgbm.yaml": {"lr": "--learning_rate=", "num-leaves": "--num_leaves="},
    "trainjob-pytorch.yaml": {"lr": "--lr=", "momentum": "--momentum="},
}


def example(name: str, **spec: Any) -> dict[str, Any]:
    """An example as written, its spec's fields changed by `spec` (None: removed)."""
    data = yaml.safe_load((EXAMPLES / name).read_text())
    for key, value in spec.items():
        if value is None:
            data["spec"].pop(key, None)
        else:
            data["spec"][key] = value
    return data


def sweep(data: dict[str, Any]) -> tuple:
    return doors.parse_all(yaml.safe_dump(data, sort_keys=False), "katib.yaml")


def problems(data: dict[str, Any]) -> dict[str, str]:
    with pytest.raises(ManifestError) as caught:
        sweep(data)
    return {p.path: p.message for p in caught.value.problems}


@pytest.mark.parametrize("name", sorted(RUNNABLE))
def test_katibs_examples_render_their_trials(name: str) -> None:
    data = example(name)  # (as written: each fails at 3 failed trials)
    trials = sweep(data)
    spec = data["spec"]
    count = spec["maxTrialCount"]
    assert len(trials) == count and [t.trial.index for t in trials] == list(range(count))
    assert len({t.name for t in trials}) == count
    assert all(re.fullmatch(rf"{data['metadata']['name']}-[a-z0-9]{{8}}", t.name) for t in trials)
    spaces = {p["name"]: p["feasibleSpace"] for p in spec["parameters"]}
    objects = engine.render(list(trials))
    text = yaml.safe_dump_all(objects)
    assert "${trialParameters" not in text and "${trialSpec" not in text
    for trial in trials:
        values = dict(trial.trial.values)
        assert set(values) == set(spaces)
        for parameter, value in values.items():
            space = spaces[parameter]
            if "list" in space:
                assert value in space["list"]
            else:
                assert Decimal(space["min"]) <= Decimal(value) <= Decimal(space["max"])
            if spec["algorithm"]["algorithmName"] == "grid" and "step" in space:  # on the grid
                steps = (float(value) - float(space["min"])) / float(space["step"])  # (arange's
                assert abs(steps - round(steps)) < 1e-9  # floats, binary noise and all)
        commands = [
            " ".join(c.get("command", []) + c.get("args", []))
            for o in objects
            if o["kind"] == "Job" and o["metadata"]["name"].startswith(trial.name)
            for c in o["spec"]["template"]["spec"]["containers"]
        ]
        for parameter, flag in RUNNABLE[name].items():
            assert any(f"{flag}{values[parameter]}" in c for c in commands), (parameter, commands)
    for obj in objects:
        schemas.validate(obj)
    assert engine.render(list(sweep(data))) == objects  # the same trials on every render


def test_more_trials_keep_the_earlier_ones() -> None:
    data = example("pytorchjob-mnist.yaml", maxFailedTrialCount=None)
    twelve = sweep(data)
    more = sweep(example("pytorchjob-mnist.yaml", maxFailedTrialCount=None, maxTrialCount=20))
    assert [(t.name, t.trial.values) for t in more[:12]] == [
        (t.name, t.trial.values) for t in twelve
    ]


@pytest.mark.parametrize(
    ("name", "path", "message"),
    [
        ("hyperband.yaml", "spec.algorithm.algorithmName", "hyperband runs brackets of"),
        ("simple-pbt.yaml", "spec.algorithm.algorithmName", "pbt is population-based training"),
        # (a search's spec has no parameters: refused as what it is, not for the parameters)
        ("enas-cpu.yaml", "spec.nasConfig", "neural architecture search (ENAS, DARTS)"),
        ("darts-cpu.yaml", "spec.nasConfig", "neural architecture search (ENAS, DARTS)"),
    ],
)
def test_what_needs_katibs_own_services_is_refused_by_name(name, path, message) -> None:
    found = problems(example(name))
    assert message in found.get(path, ""), found


def test_the_trials_are_created_at_most_parallel_at_once_each_after_an_earlier_one_ended() -> None:
    data = example("pytorchjob-mnist.yaml", maxFailedTrialCount=None, parallelTrialCount=3)
    trials = sweep(data)
    for wait in ("none", "ready", "complete"):
        rendering = engine.expand(list(trials), Settings(wait=wait), "dev")
        by_name = {
            r.inputs["metadata"]["name"]: r
            for r in rendering.resources
            if r.is_kubernetes and r.kind == "Job"
        }
        for trial in trials:
            master = by_name[f"{trial.name}-master"]
            annotations = master.inputs["metadata"].get("annotations", {})
            worker = by_name[f"{trial.name}-worker"]
            if trial.trial.gates or wait == "complete":
                assert annotations.get(WAIT_FOR) == ENDED, (wait, trial.trial)
                # The master, awaited until it ends, comes after its worker, which it needs
                # to end: nothing of the trial waits for it (the worker waiting for it was a
                # deadlock under `wait: none`)
                assert worker.urn in master.dependencies, (wait, trial.trial)
                assert master.urn not in worker.dependencies, (wait, trial.trial)
            else:
                assert annotations.get(WAIT_FOR) != ENDED
            own = [
                r
                for r in rendering.resources
                if r.is_kubernetes and r.inputs["metadata"]["name"].startswith(trial.name)
            ]
            earlier = trial.trial.waits_for
            gate = None if earlier is None else by_name[f"{trials[earlier].name}-master"].urn
            for r in own:
                assert (gate in r.dependencies) == (gate is not None), (r.name, gate)
    assert [t.trial.waits_for for t in trials] == [None, None, None, *range(9)]


def test_a_long_sweep_one_trial_at_a_time_registers_without_deep_recursion() -> None:
    """Pulumi's SDK walks, recursively, every resource a new one depends on and all theirs
    (`resource_cycle_breaker`): a trial made to wait on the last one's Job directly made that
    walk as deep as the sweep was long (a RecursionError from 700 trials). It waits on the
    Job's URN alone: 150 trials register within 120 frames more than the test's own."""
    data = example("random.yaml", maxFailedTrialCount=None, maxTrialCount=150)
    data["spec"]["parallelTrialCount"] = 1
    trials = sweep(data)
    previous = sys.getrecursionlimit()
    sys.setrecursionlimit(len(inspect.stack(0)) + 120)
    try:
        rendering = engine.expand(list(trials), Settings(progress=False), "dev")
    finally:
        sys.setrecursionlimit(previous)
    jobs = [r for r in rendering.resources if r.kind == "Job"]
    assert len(jobs) == 150
    for earlier, later in itertools.pairwise(jobs):  # (still each after the last)
        assert earlier.urn in later.dependencies


def test_a_sweep_that_stops_at_its_first_failure_awaits_each_trial_to_succeed() -> None:
    data = example("pytorchjob-mnist.yaml", maxFailedTrialCount=0)
    trials = sweep(data)
    rendering = engine.expand(list(trials), Settings(), "dev")
    masters = {
        r.inputs["metadata"]["name"]: r
        for r in rendering.resources
        if r.is_kubernetes and r.kind == "Job" and r.inputs["metadata"]["name"].endswith("-master")
    }
    for trial in trials:
        annotations = masters[f"{trial.name}-master"].inputs["metadata"].get("annotations", {})
        if trial.trial.gates:  # the provider's Job await: Complete, and a Failed fails `up`
            assert WAIT_FOR not in annotations and SKIP_AWAIT not in annotations
        else:
            assert annotations.get(SKIP_AWAIT) == "true"


@pytest.mark.parametrize("limit", [0, 1])
def test_a_sweep_fails_at_its_first_failed_trial_when_its_limit_is_0_or_1(limit) -> None:
    # Katib: the experiment fails once `failed != 0 && failed >= maxFailedTrialCount`
    trials = sweep(example("pytorchjob-mnist.yaml", maxFailedTrialCount=limit))
    assert all(t.trial.stops_sweep and not t.trial.counted for t in trials)


def test_a_sweep_that_fails_at_some_failed_trials_creates_a_trial_after_those_it_counts() -> None:
    # As written: 12 trials, 3 at once, failing at 3 failed trials. Trial k is created after
    # every trial up to the one it waits for (k - 3) has ended, from the first whose earlier
    # trials can reach 3 (k = 5): the engine is told of trial k - 3 (its dependency); the
    # program holds the trial's registration until the others have ended too (its gate,
    # `prepare.sweep_gates` for the models of `pulumi up`).
    trials = sweep(example("pytorchjob-mnist.yaml"))
    assert [list(t.trial.counted) for t in trials] == [[]] * 5 + [
        list(range(k - 2)) for k in range(5, 12)
    ]
    settings = Settings()
    rendering = engine.expand(list(trials), settings, "dev")
    masters = {
        r.inputs["metadata"]["name"]: r.urn
        for r in rendering.resources
        if r.is_kubernetes and r.kind == "Job"
    }
    gates = sweep_gates([planning.blueprint(t, settings, t.name) for t in trials])
    for trial in trials:
        counted = [f"{trials[i].name}-master" for i in trial.trial.counted]
        assert gates.get(trial.name, (None, []))[1] == counted
        if trial.trial.waits_for is None:
            continue
        waited = masters[f"{trials[trial.trial.waits_for].name}-master"]
        for r in rendering.resources:
            if r.is_kubernetes and r.inputs["metadata"]["name"].startswith(trial.name):
                assert waited in r.dependencies, (trial.trial.index, r.name)
    # one trial's failures count once: the gates grow with the trials, not their square
    dependencies = sum(len(r.dependencies) for r in rendering.resources)
    assert dependencies < 12 * 20


class _Ended(pulumi.runtime.Mocks):
    """Every Job ended as soon as it is created: failed if named in `failed`."""

    def __init__(self, failed: set[str]) -> None:
        self.failed, self.jobs = failed, list[str]()

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str, dict]:
        state = {**args.inputs, **engine.GENERATED.get(args.typ, {})}
        if args.typ == "kubernetes:batch/v1:Job":
            self.jobs.append(name := args.inputs["metadata"]["name"])
            ended = {"type": "Failed" if name in self.failed else "Complete", "status": "True"}
            state["status"] = {"conditions": [ended]}
        return f"{args.name}-id", state

    def call(self, args: pulumi.runtime.MockCallArgs) -> dict:
        return {}


def run_to_failure(program) -> None:
    """Run the mocked program; the registrations its failure left waiting ended, as its
    exit ends them."""
    try:
        program()
    finally:
        loop = asyncio.get_event_loop()
        left = asyncio.all_tasks(loop)
        for task in left:
            task.cancel()
        loop.run_until_complete(asyncio.gather(*left, return_exceptions=True))


@pytest.mark.parametrize("failed", [2, 3])
@pytest.mark.parametrize("before", [False, True])
def test_pulumi_up_fails_once_as_many_trials_failed_as_the_limit_and_creates_no_later_trial(
    failed: int, before: bool
) -> None:
    """The first `failed` trials fail; `before`: they failed before a `pulumi destroy`
    (`Trial.kept`: read back from aichor:history), are not created again, and count as their
    failed Jobs would."""
    trials = sweep(example("pytorchjob-mnist.yaml"))  # (failing at 3 failed trials)
    mocks = _Ended({f"{t.name}-master" for t in trials[:failed]} if not before else set())
    if before:
        kept = [t.as_trial(replace(t.trial, kept=State.FAILED)) for t in trials[:failed]]
        trials = [*kept, *trials[failed:]]
    pulumi.runtime.reset_options(project=engine.PROJECT, stack="dev")
    pulumi.runtime.set_mocks(mocks, project=engine.PROJECT, stack="dev", preview=False)
    program = pulumi.runtime.test(lambda: experiments(list(trials)) and None)

    def created() -> set[int]:
        return {t.trial.index for t in trials if f"{t.name}-master" in mocks.jobs}

    first = failed if before else 0  # (the first trial created)
    if failed < 3:
        program()
        assert created() == set(range(first, 12))
        return
    with pytest.raises(pulumi.RunError) as caught:
        run_to_failure(program)
    names = ", ".join(t.name for t in trials[:3])
    assert str(caught.value) == (
        f"sweep pytorchjob-mnist failed: 3 of its trials failed ({names}), and its "
        "maxFailedTrialCount is 3: trial 5 and those after it are not created"
    )
    assert created() <= set(range(first, 5))  # (3 and 4 wait for 0 and 1 alone, or none)


def test_a_limit_above_the_trial_count_is_refused() -> None:
    found = problems(example("random.yaml", maxFailedTrialCount=13))  # (12 trials)
    assert found == {
        "spec.maxFailedTrialCount": "13 is above maxTrialCount 12: at most maxTrialCount "
        "trials fail"
    }


def test_settings_katibs_services_refuse_are_refused_at_their_line_in_katibs_words() -> None:
    data = example("grid.yaml")
    data["spec"]["algorithm"]["algorithmSettings"] = [
        {"name": "random_state", "value": "10"},
        {"name": "seed", "value": "3"},
    ]
    assert problems(data) == {
        "spec.algorithm.algorithmSettings.1": "unknown setting seed for algorithm grid"
    }
    text = yaml.safe_dump(data, sort_keys=False)
    with pytest.raises(ManifestError) as caught:
        doors.parse_all(text, "katib.yaml")
    line = text.splitlines().index("    - name: seed") + 1
    assert f"katib.yaml:{line}: spec.algorithm.algorithmSettings.1:" in str(caught.value)


def test_random_state_orders_the_grid_and_more_trials_than_it_holds_give_it_whole() -> None:
    def trials(random_state: str) -> list:
        data = example("grid.yaml")
        data["spec"]["algorithm"]["algorithmSettings"] = [
            {"name": "random_state", "value": random_state}
        ]
        return [t.trial.values for t in sweep(data)]

    assert trials("10") == trials("10") != trials("11")  # (Katib's grid reads random_state)
    # more trials than the grid holds: the whole grid (Katib's service refuses the experiment)
    assert len(sweep(example("grid.yaml", maxTrialCount=1000))) == 45


def test_trial_metadata_is_substituted_as_katib_does() -> None:
    data = example("pytorchjob-mnist.yaml", maxFailedTrialCount=None, maxTrialCount=2)
    data["metadata"]["namespace"] = "team-a"
    template = data["spec"]["trialTemplate"]
    template["trialParameters"] += [
        {"name": "trialName", "reference": "${trialSpec.Name}"},
        {"name": "trialNamespace", "reference": "${trialSpec.Namespace}"},
        {"name": "trialKind", "reference": "${trialSpec.Kind}"},
        {"name": "trialAPIVersion", "reference": "${trialSpec.APIVersion}"},
        {"name": "custom", "reference": "${trialSpec.Labels[custom-key]}"},
    ]
    template["trialSpec"]["metadata"] = {"labels": {"custom-key": "custom-label"}}
    master = template["trialSpec"]["spec"]["pytorchReplicaSpecs"]["Master"]
    container = master["template"]["spec"]["containers"][0]
    container["env"] = [
        {"name": key.upper(), "value": f"${{trialParameters.{key}}}"}
        for key in ("trialName", "trialNamespace", "trialKind", "trialAPIVersion", "custom")
    ]
    (first, _) = sweep(data)
    (job,) = [
        o
        for o in engine.render([first])
        if o["kind"] == "Job" and o["metadata"]["name"].endswith("-master")
    ]
    env = {
        e["name"]: e.get("value") for e in job["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    assert env["TRIALNAME"] == first.name and env["TRIALNAMESPACE"] == "team-a"
    assert env["TRIALKIND"] == "PyTorchJob" and env["TRIALAPIVERSION"] == "kubeflow.org/v1"
    assert env["CUSTOM"] == "custom-label"
    template["trialParameters"].append({"name": "bad", "reference": "${trialSpec.Labels[none]}"})
    found = problems(data)
    assert (
        "illegal reference of trial metadata: ${trialSpec.Labels[none]}"
        in found["spec.trialTemplate.trialParameters.7.reference"]
    )


@pytest.mark.parametrize(
    ("change", "path", "message"),
    [
        (
            lambda d: d["spec"]["trialTemplate"]["trialParameters"][0].update(reference="nope"),
            "spec.trialTemplate.trialParameters.0.reference",
            "'nope' is no parameter",
        ),
        (
            lambda d: d["spec"]["trialTemplate"]["trialParameters"].pop(0),
            "spec.trialTemplate.trialSpec",
            "${trialParameters.learningRate} is used and not declared",
        ),
        (
            lambda d: d["spec"]["trialTemplate"]["trialSpec"].update(metadata={"name": "x"}),
            "spec.trialTemplate.trialSpec.metadata",
            "must be omitted",
        ),
        (
            lambda d: d["spec"].update(parallelTrialCount=0),
            "spec.parallelTrialCount",
            "greater than 0",
        ),
        (
            lambda d: d["spec"]["trialTemplate"].update(goTemplate={"rawTemplate": "kind: Job"}),
            "spec.trialTemplate.goTemplate",
            "Katib v1alpha3's Go template is not read",
        ),
        (
            lambda d: d["spec"].pop("maxTrialCount"),
            "spec.maxTrialCount",
            "random search has no end",
        ),
        (
            lambda d: d["spec"]["objective"].update(additionalMetricNames=["loss"]),
            "spec.objective",
            "should not contain objectiveMetricName",
        ),
        (
            lambda d: d["spec"].update(
                metricsCollectorSpec={"source": {"filter": {"metricsFormat": ["loss=(.*)"]}}}
            ),
            "spec.metricsCollectorSpec.source.filter",
            "two top subexpressions are required",
        ),
        (  # (the fuzzer's: a template that is not a mapping, read before its check)
            lambda d: d["spec"].update(trialTemplate="0.0.0.0/0"),
            "spec.trialTemplate",
            "must be a mapping, not '0.0.0.0/0' (text)",
        ),
        (  # (its trials take it, and every object of a trial carries it as a label)
            lambda d: d["metadata"].update(name="m" * 41),
            "metadata.name",
            "may not be longer than 40 characters, as Katib's webhook requires",
        ),
        (
            lambda d: d["spec"]["parameters"][0]["feasibleSpace"].update(min="0.09"),
            "spec.parameters.0",
            "above max",
        ),
        (
            lambda d: d["spec"]["trialTemplate"]["trialSpec"]["spec"]["pytorchReplicaSpecs"][
                "Master"
            ].update(replicas=-1),
            "spec.trialTemplate.trialSpec.spec.pytorchReplicaSpecs.Master.replicas",
            "",
        ),
    ],
)
def test_a_sweeps_problems_name_its_field(change, path, message) -> None:
    data = example("pytorchjob-mnist.yaml", maxFailedTrialCount=None)
    change(data)
    found = problems(data)
    assert path in found and message in found[path], found


def test_a_sweep_is_read_with_load_all_and_renders_beside_another_experiment(
    tmp_path: Path,
) -> None:
    data = example("pytorchjob-mnist.yaml", maxFailedTrialCount=None, maxTrialCount=2)
    control = copy.deepcopy(data["spec"]["trialTemplate"]["trialSpec"])
    control = yaml.safe_load(
        yaml.safe_dump(control)
        .replace("${trialParameters.learningRate}", "0.01")
        .replace("${trialParameters.momentum}", "0.5")
    )
    control["metadata"] = {"name": "control"}
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump_all([data, control], sort_keys=False))
    assert [e.name for e in doors.load_all(path)][-1] == "control"
    assert len(doors.load_all(path)) == 3
    with pytest.raises(ManifestError, match="holds 3 experiments"):
        doors.load(path)
    with pytest.raises(ManifestError, match="a Katib Experiment is a sweep of several trials"):
        doors.validate(data)


def test_convert_says_an_aichor_manifest_cannot_say_a_sweep(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "sweep.yaml"
    data = example("pytorchjob-mnist.yaml", maxFailedTrialCount=None)
    path.write_text(yaml.safe_dump(data))
    assert cli.main(["convert", str(path)]) == 2
    assert "a sweep (pytorchjob-mnist: 12 trials, at most 3 at once): an AIchor manifest " in (
        capsys.readouterr().err
    )


@pytest.mark.parametrize("limit", [None, 2])  # (2: trials 4 and 5 count the earlier ones)
def test_a_second_up_changes_nothing_and_more_trials_only_add(limit: int | None) -> None:
    data = example("pytorchjob-mnist.yaml", maxFailedTrialCount=limit, maxTrialCount=4)
    first = engine.expand(list(sweep(data)), Settings(), "dev")
    again = engine.expand(list(sweep(data)), Settings(), "dev")
    assert {s.op for s in preview.steps(again, "dev", first)} == {"same"}
    data["spec"]["maxTrialCount"] = 6
    more = engine.expand(list(sweep(data)), Settings(), "dev")
    steps = [s for s in preview.steps(more, "dev", first) if s.op != "same"]
    # the two new trials' objects are created; trials 1 and 2, now followed by trials 4 and 5
    # (3 at once), are awaited to their end (their masters' annotation): updated in place
    created = {s.name for s in steps if s.op == "create"}
    names = [t.name for t in sweep(data)]
    objects = ("", "-master", "-worker")  # (the progress receiver's Secret and NetworkPolicy
    # are the sweep's, made with its first trial)
    assert created == {f"{n}{suffix}" for n in names[4:] for suffix in objects}
    changed = {(s.op, s.name) for s in steps if s.op != "create"}
    assert changed == {("update", f"{names[1]}-master"), ("update", f"{names[2]}-master")}


def test_a_template_in_a_configmap_beside_the_experiment_is_read_as_one_inline() -> None:
    inline = example("pytorchjob-mnist.yaml", maxFailedTrialCount=None, maxTrialCount=3)
    data = copy.deepcopy(inline)
    template = data["spec"]["trialTemplate"]
    spec = template.pop("trialSpec")
    template["configMap"] = {
        "configMapName": "trial-templates",
        "configMapNamespace": "kubeflow",
        "templatePath": "pytorchJobTemplate.yaml",
    }
    config_map = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "trial-templates"},
        "data": {"pytorchJobTemplate.yaml": yaml.safe_dump(spec)},
    }
    read = doors.parse_all(yaml.safe_dump_all([data, config_map]), "katib.yaml")
    assert engine.render(list(read)) == engine.render(list(sweep(inline)))
    config_map["data"] = {"other.yaml": "{}"}
    with pytest.raises(ManifestError, match="give the ConfigMap trial-templates beside the"):
        doors.parse_all(yaml.safe_dump_all([data, config_map]), "katib.yaml")
    template["trialSpec"] = spec
    with pytest.raises(ManifestError, match=re.escape("only one of spec.trialTemplate.trialSpec")):
        doors.parse_all(yaml.safe_dump_all([data, config_map]), "katib.yaml")


def test_objects_beside_a_sweep_other_than_its_templates_configmap_are_refused() -> None:
    data = example("pytorchjob-mnist.yaml", maxFailedTrialCount=None)
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "pytorchjob-mnist"}}
    with pytest.raises(ManifestError, match="uses Secret pytorchjob-mnist: objects beside a"):
        doors.parse_all(yaml.safe_dump_all([data, secret]), "katib.yaml")


def file_collector(**source: Any) -> dict[str, Any]:
    """Katib's File collector example (TEXT), one trial, its source changed by `source`."""
    data = example("file-metrics-collector.yaml", maxFailedTrialCount=None, maxTrialCount=1)
    data["spec"]["metricsCollectorSpec"]["source"].update(source)
    return data


def test_the_file_collector_prints_the_metrics_file_after_the_primary_container() -> None:
    (trial,) = sweep(file_collector())
    objects = engine.render([trial])
    (job,) = [o for o in objects if o["kind"] == "Job"]
    pod = job["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["command"][:2] == ["/bin/sh", "-c"]
    assert container["command"][3:6] == ["aichor-metrics", "/katib/mnist.log", "python3"]
    assert {"name": "metrics-volume", "mountPath": "/katib"} in container["volumeMounts"]
    assert {"name": "metrics-volume", "emptyDir": {}} in pod["volumes"]
    assert trial.trial.objective.file == "/katib/mnist.log" and not trial.trial.objective.json
    for obj in objects:
        schemas.validate(obj)


@pytest.mark.parametrize(
    ("source", "path", "message"),
    [
        (
            {"fileSystemPath": {"path": "katib/m.log", "kind": "File"}},
            "fileSystemPath.path",
            "absolute",
        ),
        (
            {"fileSystemPath": {"path": "/m.log", "format": "CSV"}},
            "fileSystemPath.format",
            "TEXT or JSON",
        ),
        ({"fileSystemPath": {"path": "/m.log", "format": "JSON"}}, "filter", "filter must be nil"),
        ({"fileSystemPath": {"path": "/m.log"}}, "fileSystemPath.path", "a directory of its own"),
    ],
)
def test_a_file_collectors_problems_name_its_field(source, path, message) -> None:
    found = problems(file_collector(**source))
    where = f"spec.metricsCollectorSpec.source.{path}"
    assert message in found.get(where, ""), found


def test_the_file_collector_needs_the_primary_containers_command() -> None:
    data = file_collector()
    container = data["spec"]["trialTemplate"]["trialSpec"]["spec"]["template"]["spec"][
        "containers"
    ][0]
    del container["command"]
    found = problems(data)
    assert "give the container its command" in found["spec.trialTemplate.primaryContainerName"]
    other = file_collector()
    other["spec"]["trialTemplate"]["primaryContainerName"] = "other"
    found = problems(other)
    where = "spec.trialTemplate.primaryContainerName"
    assert "no pod template of the trial has a container named other" in found[where]


def test_a_file_collectors_directory_mounted_already_is_refused_at_its_path() -> None:
    data = file_collector()
    pod = data["spec"]["trialTemplate"]["trialSpec"]["spec"]["template"]["spec"]
    pod["volumes"] = [{"name": "data", "emptyDir": {}}]
    pod["containers"][0]["volumeMounts"] = [{"name": "data", "mountPath": "/katib"}]
    found = problems(data)
    where = "spec.metricsCollectorSpec.source.fileSystemPath.path"
    assert "training-container mounts a volume at /katib" in found[where], found


@pytest.mark.parametrize("name", ["enas-cpu.yaml", "darts-cpu.yaml"])
def test_an_architecture_search_is_refused_as_one_not_for_the_parameters_it_has_none_of(name):
    """Katib's ENAS and DARTS examples describe `nasConfig`, not `parameters`: the one
    problem named is the search (issue 54: `spec.parameters: required` was wrong advice)."""
    assert list(problems(example(name))) == ["spec.nasConfig"]
