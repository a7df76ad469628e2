"""`aichor-iac status`'s report from the API's JSON (aichor_iac/observe/status.py): what each pod's row
says for the states a user asks about first. The real reads are in tests/local/test_observe.py."""

from __future__ import annotations

import json
from datetime import datetime, timezone

import pytest
from rich.console import Console

from aichor_iac.observe.status import report, restart_attempt, table

NOW = datetime(2026, 11, 26, 12, 0, 0, tzinfo=timezone.utc)


def pod(name: str, phase: str, state: dict, **status) -> dict:
    container = {"name": "pytorch", "ready": "running" in state, "restartCount": 0, "state": state}
    container.update(status.pop("container", {}))
    return {
        "metadata": {"name": name, "labels": {"batch.kubernetes.io/job-name": "exp-worker"}},
        "spec": {"containers": [{"resources": {"limits": {"nvidia.com/gpu": "2"}}}]},
        "status": {"phase": phase, "containerStatuses": [container], **status},
    }


CASES = [
    (
        pod(
            "oom",
            "Failed",
            {
                "terminated": {
                    "exitCode": 137,
                    "reason": "OOMKilled",
                    "startedAt": "2026-11-26T11:50:00Z",
                    "finishedAt": "2026-11-26T11:55:00Z",
                }
            },
        ),
        {"state": "terminated", "reason": "OOMKilled", "exit_code": 137, "seconds": 300},
    ),
    (
        pod("pull", "Pending", {"waiting": {"reason": "ImagePullBackOff", "message": "not found"}}),
        {"reason": "ImagePullBackOff", "message": "not found", "exit_code": None},
    ),
    (
        pod(
            "loop",
            "Running",
            {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 20s"}},
            container={"restartCount": 2, "lastState": {"terminated": {"exitCode": 1}}},
        ),
        {"restarts": 2, "reason": "CrashLoopBackOff", "exit_code": 1},
    ),
    (
        {
            "metadata": {"name": "wait", "labels": {"batch.kubernetes.io/job-name": "exp-worker"}},
            "spec": {"containers": [{}]},
            "status": {
                "phase": "Pending",
                "conditions": [
                    {
                        "type": "PodScheduled",
                        "status": "False",
                        "reason": "Unschedulable",
                        "message": "0/4 nodes are available: 4 Insufficient nvidia.com/gpu.",
                    }
                ],
            },
        },
        {
            "reason": "Unschedulable",
            "message": "0/4 nodes are available: 4 Insufficient nvidia.com/gpu.",
        },
    ),
    (
        pod("run", "Running", {"running": {"startedAt": "2026-11-26T11:59:00Z"}}),
        {"state": "running", "ready": True, "gpus": 2, "seconds": 60},
    ),
]


@pytest.mark.parametrize(("obj", "expected"), CASES, ids=[c[0]["metadata"]["name"] for c in CASES])
def test_a_pod_s_row_says_its_state_and_why(obj, expected):
    job = {"metadata": {"name": "exp-worker"}, "status": {"active": 1}}
    found = report([job], [obj], NOW)
    row = found["groups"][0]["pods"][0]
    assert {k: row[k] for k in expected} == expected
    console = Console(width=200, record=True)
    console.print(table(found))
    shown = console.export_text()
    assert obj["metadata"]["name"] in shown and (row["reason"] or "") in shown


def ended(code: int, at: str, message: str = "") -> dict:
    found = {"exitCode": code, "finishedAt": f"2026-11-26T11:{at}Z"}
    return {"terminated": {**found, "message": message} if message else found}


def restarted(name: str, code: int, at: str, message: str = "") -> dict:
    """Running again after its container's failure, which its lastState keeps."""
    last = {"restartCount": 1, "lastState": ended(code, at, message)}
    return pod(name, "Running", {"running": {}}, container=last)


# (pods, the first failure's pod, exit code, signal, others): the earliest end that was not 0,
# now or before a restart; within the API's second, a signal's before a program's own exit
FIRST_FAILURES = [
    (
        [pod("a", "Failed", ended(1, "50:02")), pod("b", "Failed", ended(137, "50:01"))],
        "b",
        137,
        "SIGKILL",
        1,
    ),
    (
        [pod("a", "Failed", ended(1, "50:01")), pod("b", "Failed", ended(143, "50:01"))],
        "b",
        143,
        "SIGTERM",
        1,
    ),
    (
        [pod("a", "Failed", ended(2, "50:01")), pod("b", "Failed", ended(3, "50:01"))],
        "a",
        2,
        None,
        1,
    ),
    ([pod("a", "Failed", ended(1, "50:09")), restarted("b", 137, "50:05")], "b", 137, "SIGKILL", 1),
    (
        [pod("a", "Succeeded", ended(0, "50:00")), pod("b", "Failed", ended(255, "50:05"))],
        "b",
        255,
        None,
        0,
    ),
    ([pod("a", "Failed", ended(300, "50:00"))], "a", 300, None, 0),  # (no signal 172)
]


@pytest.mark.parametrize(("pods", "first", "code", "signal", "others"), FIRST_FAILURES)
def test_the_first_failure_is_the_earliest_a_signal_first_within_a_second(
    pods, first, code, signal, others
):
    found = report([{"metadata": {"name": "exp-worker"}}], pods, NOW)["failedFirst"]
    assert found is not None
    assert (found["pod"], found["exitCode"], found["signal"], found["others"]) == (
        first,
        code,
        signal,
        others,
    )


def test_the_first_failure_s_last_lines_show_under_the_pods_and_none_without_one():
    lines = "\n".join(f"line {n}" for n in range(1, 13))
    pods = [
        restarted("exp-worker-2", 137, "50:05", lines),
        pod("exp-worker-0", "Failed", ended(1, "50:06")),
    ]
    found = report([{"metadata": {"name": "exp-worker"}}], pods, NOW)
    assert found["failedFirst"]["lines"] == lines.splitlines()
    console = Console(width=200, record=True)
    console.print(table(found))
    shown = console.export_text()
    said = "failed first: exp-worker-2, exit 137 (SIGKILL) at 2026-11-26T11:50:05Z; the errors of 1"
    rows = [row.strip() for row in shown.splitlines()]
    assert said in shown and "line 3" in rows and "line 2" not in rows  # (the last 10)
    alive = report(
        [{"metadata": {"name": "exp-worker"}}], [pod("a", "Running", {"running": {}})], NOW
    )
    assert alive["failedFirst"] is None


def test_gpus_held_count_running_pods_and_the_attempt_is_the_lead_s_last():
    pods = [pod(n, p, {}) for n, p in (("a", "Running"), ("b", "Pending"), ("c", "Running"))]
    found = report([{"metadata": {"name": "exp-worker"}}], pods, NOW, attempt=2)
    assert found["gpus"] == 4 and found["phases"] == {"Pending": 1, "Running": 2}
    assert found["restart_attempt"] == 2
    lines = ["x", "aichor: restart attempt 1 (1 of 2 counted)", "aichor: restart attempt 2 (2 of 2"]
    assert restart_attempt(lines) == 2 and restart_attempt(["nothing"]) is None


def test_the_stack_s_kubernetes_config_is_read_as_the_provider_reads_it(tmp_path):
    from aichor_iac.observe import kubeapi

    kubeconfig = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": "https://k.example:6443"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "ml", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "ml",
    }
    import yaml

    stack = tmp_path / "Pulumi.dev.yaml"
    inline = {"kubernetes:kubeconfig": yaml.safe_dump(kubeconfig), "kubernetes:context": "ml"}
    stack.write_text(yaml.safe_dump({"config": inline}))
    found, context = kubeapi.stack_connection(str(stack))
    assert found == kubeconfig and context == "ml"
    assert kubeapi.config_of(found, context).cluster.server == "https://k.example:6443"
    kubeapi.connect(kubeconfig=found, context=context)  # (a client; it connects when asked)
    with pytest.raises(kubeapi.Unreachable, match="--kubeconfig"):
        kubeapi.connect(kubeconfig=str(tmp_path / "missing"))


def test_a_cluster_that_cannot_be_reached_is_a_problem_not_a_crash(tmp_path, capsys):
    import yaml

    from aichor_iac.cli import main

    kubeconfig = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": "http://127.0.0.1:9"}}],
        "users": [{"name": "u", "user": {}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }
    (tmp_path / "kubeconfig").write_text(yaml.safe_dump(kubeconfig))
    manifest = {"spec": {"operator": "pytorch", "image": "i", "command": "c", "types": {}}}
    manifest["spec"]["types"]["Master"] = {"resources": {"cpus": 1, "ramRatio": 1}}
    (tmp_path / "exp.yaml").write_text(yaml.safe_dump(manifest))
    for command in ("status", "events", "logs"):
        args = [command, str(tmp_path / "exp.yaml"), "--kubeconfig", str(tmp_path / "kubeconfig")]
        assert main(args) == 2
        assert "cannot reach the cluster" in capsys.readouterr().err


def test_status_piped_to_a_file_keeps_each_name_and_message_whole(tmp_path):
    # Not a terminal (a CI log, `| tee`): the table is as wide as its cells, so a scheduler's
    # long message and each pod's name are found whole (tests/fake_kube.py serves the API).
    from contextlib import redirect_stdout

    import yaml
    from conftest import ROOT
    from fake_kube import Cluster, kubeconfig, serving

    from aichor_iac import render
    from aichor_iac.cli import main

    manifest = ROOT / "examples" / "pytorch.yaml"
    stack = tmp_path / "Pulumi.dev.yaml"
    stack.write_text(yaml.safe_dump({"config": {"aichor:namespace": "team-a"}}))
    jobs = [o for o in render(manifest, namespace="team-a") if o["kind"] == "Job"]
    message = (
        "0/12 nodes are available: 12 Insufficient nvidia.com/gpu. preemption: 0/12 nodes are "
        "available: 12 No preemption victims found for incoming pod."
    )
    pods = [unschedulable(job, message) for job in jobs]
    cluster = Cluster(served={"batch/v1/jobs": jobs, "v1/pods": pods, "v1/events": []})
    log = tmp_path / "status.log"
    with serving(cluster) as url, log.open("w") as piped, redirect_stdout(piped):
        config = tmp_path / "kubeconfig"
        config.write_text(yaml.safe_dump(kubeconfig(url)))
        argv = ["status", str(manifest), "--stack-config", str(stack)]
        assert main([*argv, "--kubeconfig", str(config)]) == 0
    text = log.read_text()
    for whole in [message, *(pod["metadata"]["name"] for pod in pods)]:
        assert whole in text, whole


def unschedulable(job: dict, message: str) -> dict:
    """The pod of a Job that the scheduler cannot place, as the API serves it."""
    template = job["spec"]["template"]
    name = job["metadata"]["name"]
    labels = {**template["metadata"]["labels"], "batch.kubernetes.io/job-name": name}
    condition = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"{name}-0-x7k2p", "namespace": "team-a", "labels": labels},
        "spec": template["spec"],
        "status": {"phase": "Pending", "conditions": [{**condition, "message": message}]},
    }


REPORT = {
    "trainerStatus": {
        "progressPercentage": 50,
        "estimatedRemainingSeconds": 90,
        "metrics": [{"name": "loss", "value": "0.5"}],
        "lastUpdatedTime": "2026-11-26T11:59:00+00:00",
    }
}


@pytest.mark.parametrize(
    ("received", "phase", "stale"),
    [
        ("2026-11-26T11:59:48.123456789Z", "Running", False),  # 11 s ago
        ("2026-11-26T11:50:00.000000001Z", "Running", True),  # 10 min ago, pods still running
        ("2026-11-26T11:50:00Z", "Succeeded", False),  # the last report of an ended run
    ],
)
def test_the_last_progress_report_shows_with_its_age_stale_while_pods_run(received, phase, stale):
    from aichor_iac.observe.progress import last_report

    lines = [("2026-11-26T11:40:00Z", "aichor: progress receiver on port 28443")]
    lines.append((received, "aichor-progress: " + json.dumps(REPORT)))
    found = report([], [pod("a", phase, {})], NOW, reported=last_report(lines))
    assert found["trainerStatus"] == REPORT["trainerStatus"]
    assert found["progress"]["stale"] is stale
    shown = Console(width=200, record=True)
    shown.print(table(found))
    text = shown.export_text()
    assert "progress  50% · 1m 30s left · loss 0.5 (" in text
    assert ("stale)" in text) is stale
    assert report([], [], NOW)["trainerStatus"] is None


def test_status_reads_the_receivers_last_report_from_the_cluster(tmp_path, capsys):
    """The entry pod's `progress` container's log, through the API as kubectl reads it: JSON
    with Trainer's `trainerStatus`, and a line of the table."""
    import yaml
    from conftest import ROOT
    from fake_kube import Cluster, kubeconfig, serving

    from aichor_iac import render
    from aichor_iac.cli import main

    manifest = ROOT / "examples" / "pytorch.yaml"
    stack = tmp_path / "Pulumi.dev.yaml"
    settings = {"aichor:namespace": "team-a", "aichor:progress": True}
    stack.write_text(yaml.safe_dump({"config": settings}))
    from aichor_iac.settings import Settings

    rendered = render(manifest, settings=Settings(namespace="team-a", progress=True))
    jobs = [o for o in rendered if o["kind"] == "Job"]
    pods = [unschedulable(job, "waits") | {"status": {"phase": "Running"}} for job in jobs]
    for each in pods:
        each["metadata"]["annotations"] = {"batch.kubernetes.io/job-completion-index": "0"}
    receiving = next(p for p in pods if p["spec"].get("initContainers"))
    lines = [
        f"2026-11-26T11:59:{second:02}.000000000Z aichor-progress: "
        + json.dumps({"trainerStatus": {**REPORT["trainerStatus"], "progressPercentage": p}})
        for second, p in ((10, 25), (40, 50))
    ]
    cluster = Cluster(
        served={"batch/v1/jobs": jobs, "v1/pods": pods, "v1/events": []},
        logs={(receiving["metadata"]["name"], "progress"): lines},
    )
    with serving(cluster) as url:
        config = tmp_path / "kubeconfig"
        config.write_text(yaml.safe_dump(kubeconfig(url)))
        argv = ["status", str(manifest), "--stack-config", str(stack), "--kubeconfig", str(config)]
        assert main([*argv, "--output", "json"]) == 0
        found = json.loads(capsys.readouterr().out)
        assert found["trainerStatus"]["progressPercentage"] == 50
        assert found["progress"]["receivedAt"] == "2026-11-26T11:59:40.000000000Z"
        assert main(argv) == 0
        assert "progress  50% · 1m 30s left · loss 0.5 (" in capsys.readouterr().out


def test_status_of_a_sweep_that_learns_reads_the_trials_its_results_allow(tmp_path, capsys):
    """A sweep that learns, on the cluster: its first two trials created, the first ended with
    its loss in its log. `status` reads it, asks the trial that result allows (a third,
    Waiting: not created yet), and says how many are still to be asked."""
    import yaml
    from fake_kube import Cluster, kubeconfig, serving
    from learning_sweep import ended, sweep_file

    from aichor_iac import doors, engine
    from aichor_iac.cli import main

    path = sweep_file(tmp_path, "tpe", 1, 6)
    first, second = doors.load_all(path)
    objects = engine.render([first, second], namespace="team-a")
    jobs = [o for o in objects if o["kind"] == "Job"]
    pods = [unschedulable(job, "") | {"status": {"phase": "Running"}} for job in jobs]
    done = next(i for i, j in enumerate(jobs) if j["metadata"]["name"].startswith(first.name))
    jobs[done] = {**jobs[done], "status": {"succeeded": 1, "conditions": [COMPLETE]}}
    pods[done] = {**pods[done], "status": {"phase": "Succeeded"}}
    log = {(pods[done]["metadata"]["name"], ""): ["2026-11-26T11:59:00Z loss=0.25"]}
    cluster = Cluster(served={"batch/v1/jobs": jobs, "v1/pods": pods, "v1/events": []}, logs=log)
    stack = tmp_path / "Pulumi.dev.yaml"
    stack.write_text(yaml.safe_dump({"config": {"aichor:namespace": "team-a"}}))
    with serving(cluster) as url:
        config = tmp_path / "kubeconfig"
        config.write_text(yaml.safe_dump(kubeconfig(url)))
        argv = ["status", str(path), "--stack-config", str(stack), "--kubeconfig", str(config)]
        assert main([*argv, "--output", "json"]) == 0
        found = json.loads(capsys.readouterr().out)["sweeps"][first.trial.sweep]
        assert main(argv) == 0
        table = " ".join(capsys.readouterr().out.split())
    third = doors.load_all(path, ended({first.name: 0.25}))[2]
    assert [(r["trial"], r["state"], r["objective"]) for r in found["trials"]] == [
        (first.name, "Succeeded", 0.25),
        (second.name, "Running", None),
        (third.name, "Waiting", None),
    ]
    assert found["trials"][2]["parameters"] == dict(third.trial.values)
    assert found["count"] == 6 and found["best"] == first.name
    assert "3 more trials to be asked from the results" in table


COMPLETE = {"type": "Complete", "status": "True"}


def with_a_log_shipper(main: dict, annotated: str | None = None) -> dict:
    """`main` with a sidecar listed after it in the spec, whose status the kubelet lists first
    (by name), still running (KubeRay's fluentbit sample: ray-head, then fluentbit)."""
    shipper = {"name": "fluentbit", "ready": True, "restartCount": 0, "state": {"running": {}}}
    main["spec"]["containers"] = [{"name": "pytorch"}, {"name": "fluentbit"}]
    main["status"]["containerStatuses"].insert(0, shipper)
    if annotated:
        main["metadata"]["annotations"] = {"kubectl.kubernetes.io/default-container": annotated}
    return main


@pytest.mark.parametrize(
    ("annotated", "state", "first"),
    [
        (None, "terminated", "exp-worker-0"),
        ("pytorch", "terminated", "exp-worker-0"),
        ("fluentbit", "running", None),
    ],
)
def test_a_pods_main_container_is_its_first_in_the_spec_or_the_one_its_annotation_names(
    annotated, state, first
):
    failed = with_a_log_shipper(pod("exp-worker-0", "Running", ended(3, "50:01")), annotated)
    found = report([{"metadata": {"name": "exp-worker"}}], [failed], NOW)
    assert found["groups"][0]["pods"][0]["state"] == state
    assert (found["failedFirst"] or {}).get("pod") == first
