"""A `batch/v1` Job as a Katib trial (doors/job.py): one group of its `completions` pods, at
most `parallelism` at once, the Job controller's fields kept on the one Job, each problem at
the user's own field."""

from __future__ import annotations

from typing import Any

import pytest
import schemas
import yaml
from test_katib import example

from aichor_iac import doors, engine
from aichor_iac.problems import ManifestError

AT = "spec.trialTemplate.trialSpec.spec"


def job_sweep(metadata: dict[str, Any] | None = None, **job: Any) -> dict[str, Any]:
    """Katib's random example (one trial), its Job's spec fields changed by `job` (None:
    removed; `template__x`: the pod spec's field x)."""
    data = example("random.yaml", maxFailedTrialCount=None, maxTrialCount=1, parallelTrialCount=1)
    if metadata is not None:
        data["spec"]["trialTemplate"]["trialSpec"]["metadata"] = metadata
    spec = data["spec"]["trialTemplate"]["trialSpec"]["spec"]
    for key, value in job.items():
        target, key = (
            (spec["template"]["spec"], key[10:]) if key.startswith("template__") else (spec, key)
        )
        if value is None:
            target.pop(key, None)
        else:
            target[key] = value
    return data


def render(data: dict[str, Any]) -> dict[str, Any]:
    (trial,) = doors.parse_all(yaml.safe_dump(data), "katib.yaml")
    objects = engine.render([trial])
    for obj in objects:
        schemas.validate(obj)
    (job,) = [o for o in objects if o["kind"] == "Job"]
    return job


def test_a_job_trial_is_one_indexed_job_of_its_pods_with_its_controllers_fields() -> None:
    job = render(
        job_sweep(
            {"labels": {"team": "ml"}, "annotations": {"owner": "me"}},
            completions=4,
            parallelism=2,
            backoffLimit=1,
            activeDeadlineSeconds=600,
            ttlSecondsAfterFinished=3600,
        )
    )
    spec = job["spec"]
    assert job["metadata"]["name"].endswith("-worker")
    assert job["metadata"]["labels"]["team"] == "ml"  # (its own, on the Job)
    assert job["metadata"]["annotations"]["owner"] == "me"
    assert (spec["completions"], spec["parallelism"], spec["completionMode"]) == (4, 2, "Indexed")
    assert (spec["backoffLimit"], spec["activeDeadlineSeconds"]) == (1, 600)
    assert spec["ttlSecondsAfterFinished"] == 3600
    (container,) = spec["template"]["spec"]["containers"]
    assert container["name"] == "training-container"
    assert container["resources"]["limits"] == {"cpu": "0.5", "memory": "1Gi"}
    assert any(a.startswith("--lr=0.0") for a in container["command"])


def test_a_job_trial_defaults_as_kubernetes_does() -> None:
    spec = render(job_sweep())["spec"]
    assert (spec["completions"], spec["parallelism"], spec["backoffLimit"]) == (1, 1, 6)


@pytest.mark.parametrize(
    ("change", "path", "message"),
    [
        (
            {"template__restartPolicy": "Always"},
            f"{AT}.template.spec.restartPolicy",
            "OnFailure or Never",
        ),
        (
            {"selector": {"matchLabels": {"a": "b"}}},
            f"{AT}.selector",
            "selected by aichor-iac's labels",
        ),
        ({"managedBy": "kueue.x-k8s.io/multikueue"}, f"{AT}.managedBy", "another controller"),
        ({"parallelism": 3}, f"{AT}.completions", "a work queue"),
        ({"completions": 0}, f"{AT}.completions", "a whole number from 1"),
        ({"backoffLimit": "many"}, f"{AT}.backoffLimit", "not a valid Job"),
        ({"template__containers": []}, f"{AT}.template.spec.containers", ""),
        (
            {"metadata": {"labels": {"team": "ml team"}}},
            "spec.trialTemplate.trialSpec.metadata.labels.team",
            "a label value",
        ),
        (
            {"metadata": {"annotations": {"not a key": "x"}}},
            "spec.trialTemplate.trialSpec.metadata.annotations.not a key",
            "a label key",
        ),
    ],
)
def test_a_job_trials_problems_name_its_field(change, path, message) -> None:
    with pytest.raises(ManifestError) as caught:
        doors.parse_all(yaml.safe_dump(job_sweep(**change)), "katib.yaml")
    found = {p.path: p.message for p in caught.value.problems}
    assert path in found and message in found[path], found
