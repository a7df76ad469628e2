"""Manifest validation: every operator's shape validates, and each bad input gets a path, a
sentence and a line number, all problems at once, from the CLI with exit 2 and no traceback."""

from __future__ import annotations

import pytest
import yaml
from conftest import EXAMPLES, pytorch_manifest

from aichor_iac import cli, doors
from aichor_iac.experiment.groups import OPERATORS
from aichor_iac.problems import ManifestError

R = {"cpus": 2, "ramRatio": 2}

VALID = {
    "pytorch": {"Master": {"resources": R}, "Worker": {"count": 3, "resources": R}},
    "pytorch 0.2.3 worker": {"worker": {"count": 2, "resources": R}},
    "xgboost": {"Master": {"resources": R}, "Worker": {"count": 2, "resources": R}},
    "jax": {"Worker": {"count": 4, "resources": R}},
    "paddle": {"Worker": {"count": 3, "resources": R}},
    "paddle ps": {"Master": {"count": 2, "resources": R}, "Worker": {"count": 2, "resources": R}},
    "tf": {
        "Chief": {"resources": R},
        "PS": {"count": 2, "resources": R},
        "Worker": {"count": 3, "resources": R},
        "Evaluator": {"resources": R},
    },
    "ray": {
        "Head": {"resources": R},
        "Job": {"resources": R},
        "Workers": [
            {
                "name": "small-cpu-workers",
                "count": 10,
                "resources": R,
                "rayStartParams": {"num-cpus": 8},
            },
            {"name": "big", "count": 2, "resources": R},
        ],
    },
    "kuberay": {
        "head": {"resources": R},
        "workers": [{"name": "pool", "count": 1, "resources": R}],
    },
    "mpi": {"Launcher": {"resources": R}, "Worker": {"count": 2, "resources": R}},
    "jobset": {
        "master": {"resources": R},
        "worker-heavy": {"count": 2, "completions": 3, "parallelisms": 2, "resources": R},
    },
    "batchjob": {"Worker": {"count": 3, "resources": R}},
}


def doc(operator: str, types: dict, **spec) -> str:
    data = {
        "kind": "AIchorManifest",
        "apiVersion": "0.2.2",
        "spec": {"operator": operator, "image": "img", "command": "run", "types": types, **spec},
    }
    return yaml.safe_dump(data, sort_keys=False)


@pytest.mark.parametrize("case", sorted(VALID))
def test_every_operator_shape_validates(case):
    operator = case.split()[0]
    parsed = doors.parse(doc(operator, VALID[case]))
    assert parsed.spec.operator == operator


def test_types_are_case_insensitive_and_defaults_apply():
    parsed = doors.parse(
        doc("pytorch", {"master": {"resources": {"memory": 8}}, "WORKER": {"resources": R}})
    )
    types = parsed.spec.types
    assert types.Master.count == 1 and types.Worker.count == 1
    resources = types.Master.resources
    assert (resources.cpus, resources.memory_gib, resources.cpu_limit_ratio) == (1, 8, 2)
    assert resources.shm_size_gb == 0 and resources.gpus == 0


@pytest.mark.parametrize(
    ("spec_types", "extra", "expected"),
    [
        (
            {"Master": {"resources": {"cpus": 2}}, "Worker": {"resources": R}},
            {},
            "spec.types.Master.resources: give exactly one of ramRatio or memory",
        ),
        (
            {"Master": {"resources": {"cpus": 2, "ramRatio": 1, "memory": 4}}},
            {},
            "spec.types.Master.resources: give exactly one of ramRatio or memory",
        ),
        ({"Master": {"count": 2, "resources": R}}, {}, "spec.types.Master.count: must be 1, not 2"),
        (
            {"Master": {"resources": {"cpus": 2, "ramratio": 2}}},
            {},
            "spec.types.Master.resources.ramratio: unknown key 'ramratio'; did you mean 'ramRatio'?",
        ),
        (
            {"Wroker": {"resources": R}},
            {},
            "spec.types.Wroker: unknown key 'Wroker'; did you mean 'Worker'?",
        ),
        (
            {"Worker": {"count": 0, "resources": R}},
            {},
            "spec.types: give Master (count 1) and Worker, or a Worker with count ≥ 1",
        ),
        (
            {"Chief": {"resources": R}},
            {},
            "spec.types.Chief: operator 'pytorch' has no Chief; its types are Master, Worker",
        ),
        (
            {"Worker": {"count": -1, "resources": R}},
            {},
            "spec.types.Worker.count: Input should be greater than or equal to 0",
        ),
        (
            {"Worker": {"resources": R}},
            {"timeout": "4x"},
            'spec.timeout: \'4x\' is not a duration such as "30m", "6h" or "1d2h"',
        ),
        (
            {"Worker": {"resources": {**R, "accelerators": {"gpu": {"count": 1, "type": "mig"}}}}},
            {},
            "spec.types.Worker.resources.accelerators.gpu.type: 'mig' is neither 'gpu' nor a MIG "
            "profile such as 'mig-1g.10gb'",
        ),
        (
            {"Worker": {"resources": R}},
            {"imagePullPolicy": "Always"},
            "spec.imagePullPolicy: unknown key 'imagePullPolicy'; allowed keys: operator, image, "
            "command, types, tensorboard, timeout, activeDeadlineSeconds, restartPolicy, rayVersion, "
            "storage, securityContext, slotsPerWorker, mpiImplementation, env, debug, engineName",
        ),
    ],
)
def test_bad_pytorch_manifest_errors(spec_types, extra, expected):
    with pytest.raises(ManifestError) as caught:
        doors.parse(doc("pytorch", spec_types, **extra), source="m.yaml")
    assert expected in [f"{p.path}: {p.message}" for p in caught.value.problems]


@pytest.mark.parametrize(
    ("operator", "spec_types", "expected"),
    [
        (
            "tf",
            {"Chief": {"count": 2, "resources": R}},
            "spec.types.Chief.count: at most one Chief",
        ),
        (
            "tf",
            {"PS": {"count": 2, "resources": R}},
            "spec.types: TF needs a Chief or at least one Worker",
        ),
        (
            "jax",
            {"Worker": {"count": 0, "resources": R}},
            "spec.types.Worker.count: JAX needs at least one Worker",
        ),
        (
            "xgboost",
            {"Master": {"count": 2, "resources": R}},
            "spec.types.Master.count: must be 1, not 2",
        ),
        (
            "ray",
            {"Head": {"resources": R}, "Job": {"resources": R}},
            "spec.types.Workers: give at least one worker pool",
        ),
        (
            "ray",
            {
                "Head": {"resources": R},
                "Job": {"resources": R},
                "Workers": [{"name": "a", "resources": R}, {"name": "a", "resources": R}],
            },
            "spec.types.Workers.1.name: duplicate pool name 'a'",
        ),
        (
            "ray",
            {
                "Head": {"resources": R},
                "Job": {"resources": R},
                "Workers": [{"name": "Big_Pool", "resources": R}],
            },
            "spec.types.Workers.0.name: 'Big_Pool' must be a DNS label: lowercase letters, digits and "
            "'-', starting with a letter, at most 40 characters",
        ),
        (
            "kuberay",
            {
                "Head": {"resources": R},
                "Job": {"resources": R},
                "Workers": [{"name": "a", "resources": R}],
            },
            "spec.types.Job: operator 'kuberay' has no Job; its types are Head, Workers",
        ),
        (
            "mpi",
            {"Launcher": {"count": 2, "resources": R}, "Worker": {"resources": R}},
            "spec.types.Launcher.count: must be 1, not 2",
        ),
        (
            "mpi",
            {"Launcher": {"resources": R}},
            "spec.types.Worker.count: MPI needs at least one Worker",
        ),
        (
            "mxnet",
            {"Worker": {"resources": R}},
            "spec.operator: must be 'ray', 'kuberay', 'tf', 'pytorch', 'xgboost', 'jax', 'paddle', "
            "'mpi', 'jobset' or 'batchjob'",
        ),
    ],
)
def test_bad_manifests_of_other_operators(operator, spec_types, expected):
    with pytest.raises(ManifestError) as caught:
        doors.parse(doc(operator, spec_types), source="m.yaml")
    assert expected in [f"{p.path}: {p.message}" for p in caught.value.problems]


def test_problems_are_reported_together_with_line_numbers():
    text = doc(
        "pytorch",
        {
            "Master": {"resources": {"cpus": 2}},
            "Worker": {"resources": {"cpus": 2, "ramRatio": 1, "gpus": 1}},
        },
    )
    with pytest.raises(ManifestError) as caught:
        doors.parse(text, source="exp.yaml")
    lines = str(caught.value).splitlines()
    assert len(lines) == 2
    text_lines = text.splitlines()
    for line in lines:
        source, number, rest = line.split(":", 2)
        assert source == "exp.yaml"
        key = rest.split(":")[0].strip().split(".")[-1]
        assert key in text_lines[int(number) - 1]


@pytest.mark.parametrize("before", ["", "---\n", "---\n---\n", "# a comment\n---\n---\n"])
def test_an_empty_document_before_the_manifest_does_not_shift_its_lines(before):
    text = before + doc("pytorch", {"Worker": {"count": 1, "resources": {"cpus": 1}}})
    line = next(i for i, t in enumerate(text.splitlines(), 1) if "resources:" in t)
    with pytest.raises(ManifestError) as caught:
        doors.parse(text, source="exp.yaml")
    assert str(caught.value).startswith(f"exp.yaml:{line}: spec.types.Worker.resources:")


def test_invalid_yaml_and_non_mapping():
    with pytest.raises(ManifestError, match=r"^m.yaml:3: invalid YAML"):
        doors.parse("spec:\n  a: 1\n b: [", source="m.yaml")
    with pytest.raises(ManifestError, match="a manifest is a YAML mapping"):
        doors.parse("- 1", source="m.yaml")


@pytest.mark.parametrize("command", ["validate", "render", "preview"])
def test_cli_reports_errors_with_exit_2_one_line_each(tmp_path, capsys, command):
    path = tmp_path / "bad.yaml"
    path.write_text(doc("pytorch", {"Master": {"count": 2, "resources": {"cpus": 1}}}))
    assert cli.main([command, str(path)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert lines == [
        f"{path}:10: spec.types.Master.resources: give exactly one of ramRatio or memory"
    ]
    assert "Traceback" not in captured.err


def test_cli_missing_file(capsys):
    assert cli.main(["validate", "does-not-exist.yaml"]) == 2
    assert capsys.readouterr().err.startswith("does-not-exist.yaml: cannot read")


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_examples_validate(path, capsys):
    assert cli.main(["validate", str(path)]) == 0
    assert "valid" in capsys.readouterr().out


@pytest.mark.parametrize("operator", OPERATORS)
def test_every_operator_has_a_component_and_renders(operator, tmp_path, capsys):
    from aichor_iac.components import COMPONENTS

    assert operator in COMPONENTS
    path = tmp_path / f"{operator}.yaml"
    path.write_text(doc(operator, VALID[operator]))
    assert cli.main(["render", str(path)]) == 0
    assert "kind: Job" in capsys.readouterr().out


def test_pytorch_builder_is_accepted_and_ignored():
    data = pytorch_manifest(1, 1)
    without = doors.validate(data)
    data["builder"] = {"image": "x", "dockerfile": "./Dockerfile", "context": "."}
    assert doors.validate(data) == without  # the image is built elsewhere
