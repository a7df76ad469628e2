"""`pulumi up` of a Katib sweep against real pods (issue 41): four 3-second trials with
`parallelTrialCount: 2` under the await model of tests/pulumi_up.py (each object created once
its dependencies' awaits hold) on the local cluster — never more than two trials run at once, a
failed trial does not stop the others, and `up` returns when `aichor:wait` says."""

from __future__ import annotations

import contextlib
import copy
import functools
import io
import json
import re
import sys
import time
from contextlib import redirect_stdout

import pytest
import yaml
from kube import NEEDS_CLUSTER, LocalCluster, pod_env
from pulumi_up import Deadlock, Failed, Live, unarranged, up
from waiting import until

from aichor_iac import doors, engine, planning
from aichor_iac.cli import main
from aichor_iac.local.api import LocalApi, announce
from aichor_iac.local.prepare import sweep_gates
from aichor_iac.planning import blueprints
from aichor_iac.settings import Settings

pytestmark = NEEDS_CLUSTER
ENV = pod_env(AICHOR_FOLLOW_INTERVAL="0.2")
# Each trial: its seed, 3 s, then exit 1 for seed 3 (a failed trial)
COMMAND = (
    'echo "start $(date +%s.%N) seed ${trialParameters.seed}"; sleep 3; '
    'echo "end $(date +%s.%N)"; [ "${trialParameters.seed}" != 3 ]'
)
SWEEP = {
    "apiVersion": "kubeflow.org/v1beta1",
    "kind": "Experiment",
    "metadata": {"name": "seeds"},
    "spec": {
        "objective": {"type": "minimize", "objectiveMetricName": "loss"},
        "algorithm": {"algorithmName": "grid"},
        "parallelTrialCount": 2,
        "maxTrialCount": 4,
        "parameters": [
            {
                "name": "seed",
                "parameterType": "categorical",
                "feasibleSpace": {"list": ["1", "2", "3", "4"]},
            }
        ],
        "trialTemplate": {
            "primaryContainerName": "pytorch",
            "trialParameters": [{"name": "seed", "reference": "seed"}],
            "trialSpec": {
                "apiVersion": "kubeflow.org/v1",
                "kind": "PyTorchJob",
                "spec": {
                    "pytorchReplicaSpecs": {
                        "Master": {
                            "replicas": 1,
                            "restartPolicy": "Never",
                            "template": {
                                "spec": {
                                    "containers": [
                                        {
                                            "name": "pytorch",
                                            "image": "img",
                                            "command": ["sh", "-c", COMMAND],
                                        }
                                    ]
                                }
                            },
                        }
                    }
                },
            },
        },
    },
}


@pytest.mark.parametrize("wait", ["none", "ready", "complete"])
def test_a_sweep_runs_at_most_parallel_trials_at_once_and_a_failure_does_not_stop_it(wait):
    trials = doors.parse_all(yaml.safe_dump(SWEEP), "seeds.yaml")
    rendering = engine.expand(list(trials), Settings(wait=wait), "dev")
    with LocalCluster(rendering.objects, ENV) as local:
        started = time.monotonic()
        order = up(rendering, Live(local, stall=60))
        returned = time.monotonic() - started
        deadline = time.monotonic() + 120
        for thread in (t for threads in local.started.values() for t in threads):
            thread.join(max(0.0, deadline - time.monotonic()))
        results = dict(local.results)
    masters = [f"{t.name}-master" for t in trials]
    assert sorted(o for o in order if o.startswith("Job/")) == sorted(f"Job/{m}" for m in masters)
    spans, codes = {}, {}
    for trial, master in zip(trials, masters, strict=True):
        result = results[f"{master}-0"]
        start = re.search(r"^start (\S+) seed", result.stdout, re.M)
        end = re.search(r"^end (\S+)", result.stdout, re.M)
        assert start and end, result.stdout + result.stderr
        spans[trial.trial.index] = (float(start[1]), float(end[1]))
        codes[dict(trial.trial.values)["seed"]] = result.returncode
    assert codes == {"1": 0, "2": 0, "3": 1, "4": 0}  # the failed one did not stop the rest
    for moment in sorted(t for span in spans.values() for t in span):
        running = sum(start <= moment < end for start, end in spans.values())
        assert running <= 2, spans
    # Trial k + 2 starts once trial k has ended: two rounds of 3 s
    assert spans[2][0] >= spans[0][1] and spans[3][0] >= spans[1][1]
    if wait == "complete":  # every trial awaited to its end
        assert returned >= max(end for _, end in spans.values()) - min(s for s, _ in spans.values())


def test_status_of_a_sweep_names_each_trials_values_state_and_objective_and_the_best(tmp_path):
    sweep = copy.deepcopy(SWEEP)
    spec = sweep["spec"]
    spec["objective"]["additionalMetricNames"] = ["accuracy"]
    container = spec["trialTemplate"]["trialSpec"]["spec"]["pytorchReplicaSpecs"]["Master"]
    container["template"]["spec"]["containers"][0]["command"][2] = (
        'echo "epoch 1 loss=0.9 accuracy=0.5"; '
        'echo "epoch 2 loss=0.${trialParameters.seed} accuracy=0.${trialParameters.seed}"; '
        '[ "${trialParameters.seed}" != 3 ]'
    )
    path = tmp_path / "seeds.yaml"
    path.write_text(yaml.safe_dump(sweep))
    trials = doors.load_all(path)
    rendering = engine.expand(list(trials), Settings(wait="complete"), "dev")
    with LocalCluster(rendering.objects, ENV) as local, LocalApi(local, "default") as api:
        up(rendering, Live(local, stall=60))
        with contextlib.ExitStack() as stack:
            for trial in trials:
                stack.enter_context(announce(trial.name, api.url, api.namespace))
            out = io.StringIO()
            with redirect_stdout(out):
                assert main(["status", "--local", str(path), "--output", "json"]) == 0
            found = json.loads(out.getvalue())["sweeps"]["seeds"]
            text = io.StringIO()
            with redirect_stdout(text):
                picture = tmp_path / "seeds.svg"
                assert main(["status", "--local", str(path), "--plot", str(picture)]) == 0
    rows = {r["parameters"]["seed"]: r for r in found["trials"]}
    assert {s: r["state"] for s, r in rows.items()} == {
        "1": "Succeeded",
        "2": "Succeeded",
        "3": "Failed",
        "4": "Succeeded",
    }
    # min of each trial's losses (minimize: Katib's default strategy), and of its accuracies
    assert {s: r["objective"] for s, r in rows.items()} == {"1": 0.1, "2": 0.2, "3": 0.3, "4": 0.4}
    assert rows["4"]["metrics"] == {"accuracy": 0.4}
    assert found["best"] == rows["1"]["trial"] and found["direction"] == "minimize"
    assert f"best trial {rows['1']['trial']} (*)" in " ".join(text.getvalue().split())
    assert "<!-- seeds: loss (minimize) -->" in picture.read_text()  # (its picture: drawn)


def test_a_sweep_that_fails_at_2_failed_trials_creates_no_trial_after_its_second_failure():
    # Trials 0 and 1 (run together) fail, after 1 s and 3 s. Trial 2 waits for trial 0 alone
    # (one ended trial cannot reach 2 failures): created at 1 s. Trial 3 counts trials 0 and
    # 1, both failed at 3 s: `up` fails before it.
    sweep = copy.deepcopy(SWEEP)
    sweep["spec"]["maxFailedTrialCount"] = 2
    order = [dict(t.trial.values)["seed"] for t in doors.parse_all(yaml.safe_dump(sweep), "s")]
    master = sweep["spec"]["trialTemplate"]["trialSpec"]["spec"]["pytorchReplicaSpecs"]["Master"]
    first = "${trialParameters.seed}"  # (the grid's order: that of the seed of "seeds")
    command = COMMAND.replace("sleep 3", f"sleep $(( {first} == {order[0]} ? 1 : 3 ))").replace(
        "!= 3 ]", f'!= {order[0]} ] && [ "${{trialParameters.seed}}" != {order[1]} ]'
    )
    master["template"]["spec"]["containers"][0]["command"][2] = command
    text = yaml.safe_dump(sweep)
    trials = doors.parse_all(text, "seeds.yaml")
    settings = Settings()
    rendering = engine.expand(list(trials), settings, "dev")
    gates = sweep_gates([planning.blueprint(t, settings, t.name) for t in trials])
    assert gates == {trials[3].name: (2, [f"{trials[0].name}-master", f"{trials[1].name}-master"])}
    with LocalCluster(rendering.objects, ENV) as local:
        with pytest.raises(Failed) as caught:
            up(rendering, Live(local, stall=60), gates)
        created = set(local.started)
        for thread in (t for threads in local.started.values() for t in threads):
            thread.join(60)
        results = dict(local.results)
    failed = f"{trials[0].name}-master, {trials[1].name}-master"
    first = f"Service/{trials[3].name}"  # (its first object)
    assert str(caught.value) == f"sweep failed ({failed}): {first} is not created"
    assert created == {f"{t.name}-master" for t in trials[:3]}
    codes = {
        dict(t.trial.values)["seed"]: results[f"{t.name}-master-0"].returncode for t in trials[:3]
    }
    assert codes == {order[0]: 1, order[1]: 1, order[2]: 0}


# A master that waits for its worker to say hello (as a rendezvous does: the probes of the
# worker's wait for its port say nothing), and the worker
MASTER = (
    "import os, socket\n"
    "server = socket.create_server(('', int(os.environ['MASTER_PORT'])))\n"
    "while server.accept()[0].recv(2) != b'hi':\n"
    "    pass\n"
    "print('master: met the worker')\n"
)
WORKER = (
    "import os, socket\n"
    "address = (os.environ['MASTER_ADDR'], int(os.environ['MASTER_PORT']))\n"
    "socket.create_connection(address).sendall(b'hi')\n"
    "print('worker: said hello')\n"
)


def master_and_worker_sweep() -> dict:
    """The sweep of four trials, two at a time, each a master and a worker that meet."""
    sweep = copy.deepcopy(SWEEP)
    replicas = sweep["spec"]["trialTemplate"]["trialSpec"]["spec"]["pytorchReplicaSpecs"]
    replicas["Worker"] = copy.deepcopy(replicas["Master"])
    for role, program in (("Master", MASTER), ("Worker", WORKER)):
        replicas[role]["template"]["spec"]["containers"][0]["command"] = [
            sys.executable,
            "-c",
            program,
        ]
    return sweep


@pytest.mark.parametrize("wait", ["none", "ready", "complete"])
def test_a_sweep_of_masters_and_workers_runs_under_each_wait(wait):
    # The master of a trial a later one waits for is awaited until it ends: created after its
    # worker, else `up` would wait for a master waiting for a worker it has not created
    trials = doors.parse_all(yaml.safe_dump(master_and_worker_sweep()), "seeds.yaml")
    rendering = engine.expand(list(trials), Settings(wait=wait), "dev")
    with LocalCluster(rendering.objects, ENV) as local:
        order = up(rendering, Live(local, stall=60))
        local.settle(timeout=60)
        results = dict(local.results)
    assert len([o for o in order if o.startswith("Job/")]) == 8
    for trial in trials:
        assert "master: met the worker" in results[f"{trial.name}-master-0"].stdout
        assert "worker: said hello" in results[f"{trial.name}-worker-0"].stdout


def test_the_old_order_of_a_master_and_worker_trial_deadlocks(monkeypatch):
    monkeypatch.setattr(blueprints, "arrange", unarranged)
    trials = doors.parse_all(yaml.safe_dump(master_and_worker_sweep()), "seeds.yaml")
    rendering = engine.expand(list(trials), Settings(wait="none"), "dev")
    with LocalCluster(rendering.objects, ENV) as local, pytest.raises(Deadlock) as caught:
        up(rendering, Live(local, stall=10))
    assert f"Job/{trials[2].name}-worker waits for Job/{trials[0].name}-master" in str(caught.value)


class Loop:
    """`aichor-iac up --until-done` of a sweep that learns, over the local cluster: each `up`
    runs the program as __main__.py does (`trials.asked` reads the trials' results from the
    cluster), then creates what it adds under the engine's awaits. Its one state is the
    stack's (`created`: each resource's URN and inputs), which Pulumi keeps: a loop killed
    and started again is a new Loop on the same stack."""

    def __init__(self, path, settings, local, url, created=None):
        from aichor_iac.observe import kubeapi

        self.load_all = functools.partial(doors.load_all, path)
        self.settings, self.local = settings, local
        self.client = kubeapi.connect(url=url)
        self.created: dict[str, dict] = created if created is not None else {}
        self.ups = self.idle = 0
        self.asked: list = []

    def run(self, until=lambda loop: False) -> None:
        """`up` again as results allow, until every trial has ended (or `until` the loop)."""
        from aichor_iac.observe import trials

        while not until(self):
            self.asked = trials.asked(self.load_all, self.settings, "dev", self.client)
            rendering = engine.expand(list(self.asked), self.settings, "dev")
            objects = {r.urn: r.inputs for r in rendering.resources if r.is_kubernetes}
            created = self.created
            assert {u: objects.get(u) for u in created} == created  # (nothing made changes)
            new = [i for u, i in objects.items() if u not in created]
            jobs = [i["metadata"]["name"] for i in objects.values() if i["kind"] == "Job"]
            kept = sum(t.trial.kept is not None for t in self.asked)  # (ended before a destroy)
            every = not new and len(jobs) + kept == self.asked[0].trial.count
            if every and all(self.local.job_status(j).get("conditions") for j in jobs):
                return
            if not new:  # (an `up` that changes nothing: nothing new has ended)
                self.idle += 1
                time.sleep(0.5)
                continue
            if created:
                self.local.add(new)
            up(rendering, Live(self.local, stall=60), before=set(created))
            created |= {u: i for u, i in objects.items() if u not in created}
            self.ups += 1


@pytest.mark.parametrize("wait", ["none", "ready", "complete"])
def test_pulumi_up_again_and_again_runs_a_sweep_that_learns_to_its_end(tmp_path, wait):
    """`pulumi up` of a sweep that learns, run again until it ends (issue 54): an `up` while
    nothing new has ended changes nothing. The sweep ends with the trials the door asks from
    the losses its trials printed, whatever each `up` found running."""
    from learning_sweep import ended, loss, sweep_file

    path = sweep_file(tmp_path, "tpe", 5, 5)
    settings = Settings(wait=wait)
    first = engine.expand(list(doors.load_all(path)), settings, "dev")
    with LocalCluster(first.objects, ENV) as local, LocalApi(local, "default") as api:
        loop = Loop(path, settings, local, api.url)
        loop.run()
    asked = loop.asked
    losses = {t.name: loss(dict(t.trial.values)) for t in asked}
    assert [(t.name, t.trial.values) for t in asked] == [
        (t.name, t.trial.values) for t in doors.load_all(path, ended(losses))
    ]
    assert len(asked) == 5 and loop.ups >= 2


def test_the_loop_killed_after_5_trials_and_started_again_ends_with_an_unbroken_runs_trials(
    tmp_path,
):
    """Killed once 5 of its 8 trials exist (some running), and started again on the same
    stack: the new loop reads the results from the cluster and goes on. Its trials are those
    of a run never killed: the door's, asked from each trial's loss in turn."""
    from learning_sweep import ended, loss, sweep_file

    path = sweep_file(tmp_path, "tpe", 6, 8)
    settings = Settings(wait="none")
    first = engine.expand(list(doors.load_all(path)), settings, "dev")
    with LocalCluster(first.objects, ENV) as local, LocalApi(local, "default") as api:
        killed = Loop(path, settings, local, api.url)
        killed.run(until=lambda loop: sum(i["kind"] == "Job" for i in loop.created.values()) >= 5)
        again = Loop(path, settings, local, api.url, created=killed.created)
        again.run()
    unbroken: dict[str, float] = {}  # (a run never killed: each trial asked, then ended)
    for k in range(8):
        trials = doors.load_all(path, ended(unbroken))
        unbroken.setdefault(trials[k].name, loss(dict(trials[k].trial.values)))
    expected = [(t.name, t.trial.values) for t in doors.load_all(path, ended(unbroken))]
    assert [(t.name, t.trial.values) for t in again.asked] == expected
    assert len(expected) == 8 and killed.ups >= 2 and again.ups >= 1


def test_a_sweep_that_learns_resumes_from_its_store_after_pulumi_destroy(
    tmp_path, s3_store, monkeypatch
):
    """`pulumi destroy` once 4 of its 6 trials have ended, with aichor:history on an
    S3-compatible server (issue 67); `pulumi up` again, on a cluster that has none of its
    objects: the program reads those trials' results from the bucket, creates none of them
    again, and asks the others as a run never destroyed would (the door's, asked from each
    trial's loss in turn)."""
    from learning_sweep import ended, loss, sweep_file
    from stores import KEYS, s3_client

    from aichor_iac.observe import kubeapi, stored, trials

    bucket = "resumed"
    s3_client(s3_store.url).create_bucket(Bucket=bucket)
    for key, value in KEYS.items():  # (the pods' optional Secret keys: the shell's)
        monkeypatch.setenv(key, value)
    path = sweep_file(tmp_path, "tpe", 7, 6)
    settings = Settings(
        wait="none",
        history=f"s3://{bucket}/runs",
        history_secret="store-keys",
        history_endpoint=s3_store.url,
    )
    first = engine.expand(list(doors.load_all(path)), settings, "dev")
    with LocalCluster(first.objects, ENV) as local, LocalApi(local, "default") as api:
        before = Loop(path, settings, local, api.url)
        before.run(until=lambda loop: sum(i["kind"] == "Job" for i in loop.created.values()) >= 4)
        jobs = [i["metadata"]["name"] for i in before.created.values() if i["kind"] == "Job"]
        until(lambda: all(local.job_status(j).get("conditions") for j in jobs), 120)

        def ended_in_store() -> set[str]:
            _, kept = stored.read_parts(settings, "test")
            return {p.about["experiment"] for p in kept if p.about.get("exits")}

        until(lambda: len(ended_in_store()) == 4, 60)  # (each pod's keeper: its last round)
    destroyed = sorted(ended_in_store())
    with LocalCluster([], ENV) as empty, LocalApi(empty, "default") as api:
        resumed = trials.asked(before.load_all, settings, "dev", kubeapi.connect(url=api.url))
    assert sorted(t.name for t in resumed if t.trial.kept) == destroyed
    rendering = engine.expand(list(resumed), settings, "dev")
    made = {o["metadata"]["name"] for o in rendering.objects if o["kind"] == "Job"}
    assert not made & {f"{name}-worker" for name in destroyed}  # (none made again)
    with LocalCluster(rendering.objects, ENV) as local, LocalApi(local, "default") as api:
        after = Loop(path, settings, local, api.url)
        after.run()
    unbroken: dict[str, float] = {}
    for k in range(6):
        now = doors.load_all(path, ended(unbroken))
        unbroken.setdefault(now[k].name, loss(dict(now[k].trial.values)))
    expected = [(t.name, t.trial.values) for t in doors.load_all(path, ended(unbroken))]
    assert [(t.name, t.trial.values) for t in after.asked] == expected
    assert {t.name for t in after.asked if t.trial.kept} == set(destroyed)
    created = [i["metadata"]["name"] for i in after.created.values() if i["kind"] == "Job"]
    assert len(created) == 2 and not set(created) & set(destroyed)


def test_on_a_cluster_early_stopping_ends_a_trials_pods_and_status_says_earlystopped(tmp_path):
    """Katib's medianstop through `pulumi up` again and again: a trial whose rule stops it
    ends its own command in its pod at its start_step-th loss (Katib's collector's check,
    `pods.stopping.main`), before its last epochs; `status` reads it as EarlyStopped."""
    from learning_sweep import median_stop_file

    from aichor_iac.sweeps.collect import STOP

    path = median_stop_file(tmp_path)
    sweep = yaml.safe_load(path.read_text())
    stack = Settings(wait="none")
    first = engine.expand(list(doors.load_all(path)), stack, "dev")
    with LocalCluster(first.objects, ENV) as local, LocalApi(local, "default") as api:
        loop = Loop(path, stack, local, api.url)
        loop.run()
        local.settle(timeout=60)
        results = dict(local.results)
        with contextlib.ExitStack() as announced:
            for trial in loop.asked:
                announced.enter_context(announce(trial.name, api.url, api.namespace))
            out = io.StringIO()
            with redirect_stdout(out):
                assert main(["status", "--local", str(path), "--output", "json"]) == 0
    rows = json.loads(out.getvalue())["sweeps"][sweep["metadata"]["name"]]["trials"]
    stopped = [r for r in rows if r["state"] == "EarlyStopped"]
    assert (
        len(rows) == 6 and stopped and {r["state"] for r in rows} <= {"Succeeded", "EarlyStopped"}
    )
    jobs = {i["metadata"]["name"]: i for i in loop.created.values() if i["kind"] == "Job"}
    for trial in loop.asked:
        job = jobs[f"{trial.name}-worker"]
        command = job["spec"]["template"]["spec"]["containers"][0]["command"]
        output = results[f"{trial.name}-worker-0"].stdout
        if trial.name in {r["trial"] for r in stopped}:
            assert command[:3] == ["/bin/sh", "-c", STOP]  # (its rule, checked in its pod)
            assert "aichor: early stopped at value 2 of loss" in output
            assert "epoch 4" not in output  # (its command ended before its last epochs)
        else:
            assert "epoch 4" in output
    assert results[f"{stopped[0]['trial']}-worker-0"].returncode == 0  # (not a failure)
