"""A trainer's time to checkpoint (issue 69): the terminationGracePeriodSeconds a custom
resource's pod templates give (a Trainer TrainJob's through its runtime patches, or the pod
overrides of the releases before them) reaches every pod rendered from them, so the kubelet (and
a local run: tests/local/test_cluster.py) waits that long between TERM and KILL."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import ROOT, expand, runnable

from aichor_iac.problems import ManifestError

GRACE = 45
FILES = [
    "tests/kubeflow/pytorch-simple.yaml",
    "tests/kubeflow/pytorch-elastic-echo-echo.yaml",
    "tests/kubeflow/mpi-pi.yaml",
    "tests/kubeflow/tensorflow-simple.yaml",
    "tests/kubeflow/xgboost-xgboostjob.yaml",
    "tests/kubeflow/paddlepaddle-simple-cpu.yaml",
    "tests/kubeflow/jax-cpu-demo-demo.yaml",
    "tests/jobset/simple.paralleljobs.yaml",
    "tests/kuberay/ray-cluster.complete.yaml",
    "tests/kuberay/ray-job.sample.yaml",
    "tests/kuberay/ray-job.light-weight-submitter.yaml",
    "tests/trainer_shapes/v2.1.kubeflow-podtemplate-overrides.twin.yaml",  # (runtimePatches)
]
# Trainer v2.0's podSpecOverrides and v2.1's podTemplateOverrides have no such field
OLDER = {
    "tests/trainer_shapes/v2.0.podspec-overrides-labels.yaml": "spec.podSpecOverrides.0",
    "tests/trainer_shapes/v2.1.kubeflow-podtemplate-overrides.yaml": "spec.podTemplateOverrides.0.spec",
}


def with_grace(node: Any) -> None:
    """Every pod spec of the input (a mapping with `containers`) given GRACE."""
    if isinstance(node, dict):
        if "containers" in node:
            node["terminationGracePeriodSeconds"] = GRACE
        for value in node.values():
            with_grace(value)
    elif isinstance(node, list):
        for value in node:
            with_grace(value)


def given_grace(path: Path, into: Path) -> Path:
    """The file with GRACE in each pod spec (every document: a RayJob's ConfigMap beside it)."""
    if "kubeflow" in path.parts:  # (the documented fixes of the public examples applied)
        documents = [copy.deepcopy(runnable(path)[0])]
    else:
        documents = list(yaml.safe_load_all(path.read_text()))
    with_grace(documents)
    saved = into / path.name
    saved.write_text(yaml.safe_dump_all(documents, sort_keys=False))
    return saved


# Pods rendered from no template of the input: KubeRay's default submitter (a RayJob without
# a submitterPodTemplate), which has the kubelet's default as under KubeRay
OWN = {"tests/kuberay/ray-job.sample.yaml": {"exp-submitter"}}


@pytest.mark.parametrize("file", FILES)
def test_every_pod_rendered_from_a_template_keeps_its_grace_period(file, tmp_path):
    objects = expand(given_grace(ROOT / file, tmp_path)).objects
    workloads = [
        o
        for o in objects
        if o["kind"] in ("Job", "Deployment") and o["metadata"]["name"] not in OWN.get(file, ())
    ]
    assert workloads
    graces = {
        o["metadata"]["name"]: o["spec"]["template"]["spec"].get("terminationGracePeriodSeconds")
        for o in workloads
    }
    assert set(graces.values()) == {GRACE}, graces


@pytest.mark.parametrize(("file", "where"), OLDER.items())
def test_the_trainer_overrides_before_runtime_patches_refuse_it_by_name(file, where, tmp_path):
    """Their schemas know no terminationGracePeriodSeconds: refused at the field, not dropped."""
    with pytest.raises(ManifestError, match=re.escape(f"{where}.terminationGracePeriodSeconds")):
        expand(given_grace(ROOT / file, tmp_path))
