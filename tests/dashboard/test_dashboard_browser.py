"""`aichor-iac dashboard` in a real browser (Debian's Chromium, driven by Playwright): hostile
strings of a manifest, a cluster and a log shown as text with no dialog and no stray request; a
state change and a followed log line arriving without a reload; every link reached by the
keyboard and every table's headers named; a local run of a sweep watched as it runs. Each page's
screenshot is taken; with AICHOR_IAC_SCREENSHOTS=DIR they are written there (docs/images holds
the ones docs/dashboard.md shows)."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from browser import dashboard, launched, watched
from dashboard_cluster import HOSTILE, cluster_of, finish, kubeconfig_file, sweep_file
from fake_kube import serving
from kube import LocalCluster
from waiting import until

pytestmark = pytest.mark.slow  # (a real browser (Debian's chromium))

SHOTS = os.environ.get("AICHOR_IAC_SCREENSHOTS")


@pytest.fixture(scope="module")
def browser():
    with launched() as found:
        yield found


def shot(page, path: Path, name: str) -> None:
    """The page's screenshot (a PNG), kept where AICHOR_IAC_SCREENSHOTS says."""
    file = path / f"dashboard-{name}.png"
    page.screenshot(path=str(file), full_page=True)
    assert file.read_bytes().startswith(b"\x89PNG")
    if SHOTS:
        shutil.copy(file, Path(SHOTS) / file.name)


@contextlib.contextmanager
def hostile(folder: Path):
    """The hostile sweep on a cluster (tests/fake_kube.py), and its dashboard: its URL."""
    path = sweep_file(folder)
    cluster = cluster_of(path)
    with serving(cluster) as api:
        config = kubeconfig_file(folder, api)
        with dashboard(str(path), "--kubeconfig", str(config)) as url:
            yield url, cluster


def test_hostile_strings_show_as_text_run_nothing_and_ask_for_nothing(tmp_path, browser):
    with hostile(tmp_path) as (url, _):
        seen = watched(browser, url)
        page = seen.page
        page.goto(f"{url}/")
        until(lambda: page.locator("tbody.sweep tr").count() == 4)  # (after the first read)
        trials = page.locator("tbody.sweep th[scope=row] a").all_inner_texts()
        page.goto(f"{url}/sweeps/hostile")
        for text in HOSTILE[:3]:  # (each parameter's value, as the table's text)
            assert page.get_by_role("cell", name=text, exact=True).count() == 1, text
        for trial in trials:
            page.goto(f"{url}/experiments/{trial}")
            log = page.locator("#log")
            until(lambda log=log: "loss=0.5" in log.inner_text())
            chart = page.locator("#metrics-chart")  # (no progress: its printed objective)
            until(lambda chart=chart: chart.get_attribute("data-points") == "1")
            assert page.locator("#metrics-none").is_hidden()
            assert log.inner_text().splitlines() == [*HOSTILE, "loss=0.5"]
        page.get_by_text("As aichor-iac render prints them").click()
        until(lambda: "kind: Job" in page.locator("#objects-text").inner_text())
        assert page.evaluate("window.pwned") is None
    assert seen.dialogs == [] and seen.strays() == [] and seen.errors == []


def test_a_state_change_arrives_without_a_reload(tmp_path, browser):
    with hostile(tmp_path) as (url, cluster):
        page = watched(browser, url).page
        page.goto(f"{url}/")
        until(lambda: page.locator("td.state", has_text="Running").count() == 1)
        page.evaluate("window.loaded = 'once'")
        finish(cluster)
        until(lambda: page.locator("td.state", has_text="Succeeded").count() == 3)
        assert page.evaluate("window.loaded") == "once"


def test_every_link_is_reached_by_the_keyboard_and_tables_name_their_headers(tmp_path, browser):
    with hostile(tmp_path) as (url, _):
        page = watched(browser, url).page
        page.goto(f"{url}/")
        until(lambda: page.locator("tbody.sweep tr").count() == 4)  # (after the first read)
        page.goto(f"{url}/sweeps/hostile")
        targets = page.locator("a[href], button").count()
        reached = set()
        for _ in range(targets + 2):
            page.keyboard.press("Tab")
            reached.add(page.evaluate("document.activeElement.outerHTML"))
        every = set(
            page.locator("a[href], button").evaluate_all("els => els.map(e => e.outerHTML)")
        )
        assert every <= reached
        table = page.get_by_role("table", name="The trials; a column's button sorts by it")
        assert table.get_by_role("columnheader", name="State").count() == 1
        assert table.get_by_role("columnheader", name="choice").count() == 1
        assert table.get_by_role("rowheader").count() == 3
        table.get_by_role("button", name="choice").press("Enter")  # (sorted by the keyboard)
        header = table.get_by_role("columnheader", name="choice")
        assert header.get_attribute("aria-sort") == "ascending"
        values = table.locator("tbody td:nth-child(3)").all_inner_texts()
        assert values == sorted(values)


# An OptimizationJob of 4 trials, 2 at a time, each reporting its progress and a loss per epoch
# to Trainer's URL (tests/learning_sweep.py's REPORTING, with progress) and printing each epoch
EPOCHS = 6
REPORTING = f"""\
import json, os, ssl, time, urllib.request
from datetime import datetime, timezone
x = float(os.environ['KUBEFLOW_TRAINER_OPT_X'])
y = float(os.environ['KUBEFLOW_TRAINER_OPT_Y'])
environ = os.environ
token = open(environ['KUBEFLOW_TRAINER_SERVER_TOKEN']).read().strip()
context = ssl.create_default_context(cafile=environ['KUBEFLOW_TRAINER_SERVER_CA_CERT'])
for epoch in range(1, {EPOCHS + 1}):
    loss = (x - 0.3) ** 2 + (y + 0.2) ** 2 + 1 / epoch
    metrics = [{{'name': 'loss', 'value': str(loss)}}, {{'name': 'epoch', 'value': str(epoch)}}]
    now = datetime.now(timezone.utc).isoformat()
    status = {{'lastUpdatedTime': now, 'metrics': metrics,
              'progressPercentage': epoch * 100 // {EPOCHS},
              'estimatedRemainingSeconds': {EPOCHS} - epoch}}
    headers = {{'Authorization': f'Bearer {{token}}', 'Content-Type': 'application/json'}}
    body = json.dumps({{'trainerStatus': status}}).encode()
    request = urllib.request.Request(environ['KUBEFLOW_TRAINER_SERVER_URL'], body, headers)
    for attempt in range(50):  # (the receiver beside it may still be starting)
        try:
            urllib.request.urlopen(request, context=context).read()
            break
        except OSError:
            time.sleep(0.2)
    print(f'epoch {{epoch}} loss={{loss:.4f}}', flush=True)
    time.sleep(1)
"""


def optimization_file(folder: Path) -> Path:
    space = {"uniform": {"min": "-1", "max": "1"}}
    job = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "OptimizationJob",
        "metadata": {"name": "watched"},
        "spec": {
            "objectives": [{"metric": "loss"}],
            "searchAlgorithm": {"random": {"seed": 7}},
            "parameters": [{"name": n, "searchSpace": space} for n in ("x", "y")],
            "numTrials": 4,
            "parallelTrials": 2,
            "trainJobTemplate": {
                "spec": {
                    "runtimeRef": {"name": "torch-distributed"},
                    "trainer": {"image": "python:3.12", "command": ["python3", "-c", REPORTING]},
                }
            },
        },
    }
    path = folder / "watched.yaml"
    path.write_text(yaml.safe_dump(job, sort_keys=False))
    return path


LOCAL_RUNS = pytest.mark.skipif(
    not LocalCluster.available(), reason="needs `ip netns` (root) for run --local"
)


def cli(*args: str, cwd: Path) -> subprocess.Popen:
    command = [sys.executable, "-m", "aichor_iac.cli", *args]
    return subprocess.Popen(
        command, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


@LOCAL_RUNS
def test_the_readme_s_sweep_is_watched_from_a_second_terminal(tmp_path, browser):
    """The README's commands: the sweep example run locally in one process, its dashboard in
    another; the page lists the sweep and its 6 trials, shows a trial's log, and names the
    best trial once they have ended (the one the run names)."""
    assert cli("examples", "sweep", "-o", "my-experiment/", cwd=tmp_path).wait() == 0
    with dashboard("--local", "my-experiment/sweep.yaml", cwd=tmp_path) as url:
        seen = watched(browser, url)
        page = seen.page
        page.goto(f"{url}/")
        run = cli("run", "--local", "my-experiment/sweep.yaml", cwd=tmp_path)
        try:
            until(lambda: page.locator("tbody.sweep tr").count() == 7, 60)
            first = page.locator("tbody.sweep th[scope=row] a").first.inner_text()
            page.goto(f"{url}/experiments/{first}")
            until(lambda: "loss=" in page.locator("#log").inner_text())
            page.goto(f"{url}/")
            head = page.locator("tr.sweep-head")
            until(lambda: "(6 Succeeded)" in head.inner_text(), 120)
            best = head.locator("a.best").inner_text()
            out = run.communicate(timeout=120)[0]
        finally:
            run.kill()
            run.wait()
    assert run.returncode == 0, out
    assert f"best trial {best} (*)" in out
    assert seen.dialogs == [] and seen.strays() == [] and seen.errors == []


@LOCAL_RUNS
def test_a_local_sweep_is_watched_as_it_runs(tmp_path, browser):
    """The acceptance of issue 55: `run --local` of a sweep in one process, `dashboard --local`
    of the same file in another; the page lists the sweep and its trials as they run, follows
    a trial's log and draws its metrics, and names the best trial when they end."""
    path = optimization_file(tmp_path)  # (named as a user names it, in its folder)
    with dashboard("--local", path.name, cwd=tmp_path) as url:
        seen = watched(browser, url)
        page = seen.page
        page.goto(f"{url}/")
        said = page.locator(".problem").inner_text()  # (the file and the sweep, nothing else)
        assert "no local run of sweep watched (watched.yaml) is running here" in said
        run = cli("run", "--local", path.name, "--timeout", "300", cwd=tmp_path)
        try:
            until(lambda: page.locator("td.state", has_text="Running").count(), 60)
            assert page.locator("tbody.sweep tr").count() == 5  # (the sweep, its 4 trials)
            shot(page, tmp_path, "experiments")
            trial = page.locator("tr.state-running th a").first.inner_text()
            page.goto(f"{url}/experiments/{trial}")
            log = page.locator("#log span")
            first = until(lambda: log.count(), 30)
            until(lambda: log.count() > first, 30)  # (a line followed, without a reload)
            until(
                lambda: (
                    page.locator("#metrics-chart").get_attribute("data-points") not in (None, "0")
                ),
                30,
            )
            assert page.locator("#metrics-none").is_hidden()  # (drawn: no more "none reported")
            shot(page, tmp_path, "experiment")
            page.goto(f"{url}/sweeps/watched")
            best = page.locator("dd a.best")
            until(lambda: page.locator("tr.state-succeeded").count() == 4, 120)
            # (read while the dashboard runs: a call after it shows the page's failed polls)
            chosen = best.inner_text()
            assert chosen.startswith("watched-trial-")
            shot(page, tmp_path, "sweep")
            out = run.communicate(timeout=120)[0]
        finally:
            run.kill()
            run.wait()
    assert run.returncode == 0, out
    assert f"best trial {chosen}" in out or chosen in out
    assert seen.dialogs == [] and seen.strays() == [] and seen.errors == []


TOKEN = """python3 -u -c 'import uuid, time; print("token", uuid.uuid4()); time.sleep(4)'"""


def token_file(folder: Path) -> Path:
    """An experiment that prints a token of its own each run, then runs 4 seconds."""
    worker = {"count": 1, "resources": {"cpus": 1, "ramRatio": 1}}
    spec = {"operator": "batchjob", "image": "python:3.12", "command": TOKEN}
    manifest = {"kind": "AIchorManifest", "apiVersion": "0.2.2", "name": "again"}
    path = folder / "again.yaml"
    document = {**manifest, "spec": {**spec, "types": {"worker": worker}}}
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


@LOCAL_RUNS
def test_a_destroyed_stacks_sweep_is_shown_from_its_store(tmp_path, browser, s3_store, monkeypatch):
    """Issue 67: the README's sweep run with aichor:history on an S3-compatible server; then
    its cluster has none of its objects (destroyed) and this machine's store is empty. The
    stack's dashboard shows the sweep from the bucket: its 6 trials, the best, a trial's log."""
    from fake_kube import Cluster
    from stores import KEYS, s3_client

    s3_client(s3_store.url).create_bucket(Bucket="shown")
    for key, value in KEYS.items():  # (the pods' optional Secret keys, and boto3's: the shell's)
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("AICHOR_IAC_HISTORY", str(tmp_path / "here"))
    assert cli("examples", "sweep", "-o", "my-experiment/", cwd=tmp_path).wait() == 0
    stack = tmp_path / "Pulumi.dev.yaml"
    config = {
        "aichor:manifest": "my-experiment/sweep.yaml",
        "aichor:history": "s3://shown/runs",
        "aichor:historySecret": "store-keys",
        "aichor:historyEndpoint": s3_store.url,
    }
    stack.write_text(yaml.safe_dump({"config": config}))
    run = cli(
        "run", "--local", "my-experiment/sweep.yaml", "--stack-config", str(stack), cwd=tmp_path
    )
    assert run.wait() == 0, run.stdout.read()
    monkeypatch.setenv("AICHOR_IAC_HISTORY", str(tmp_path / "elsewhere"))
    empty = Cluster(
        namespace="default", served={"batch/v1/jobs": [], "v1/pods": [], "v1/events": []}
    )
    with serving(empty) as api:
        config["kubernetes:kubeconfig"] = str(kubeconfig_file(tmp_path, api))
        stack.write_text(yaml.safe_dump({"config": config}))
        with dashboard("--stack-config", str(stack), cwd=tmp_path) as url:
            seen = watched(browser, url)
            page = seen.page
            page.goto(f"{url}/")
            head = page.locator("tr.sweep-head")
            until(lambda: "(6 Succeeded)" in head.inner_text(), 60)
            assert page.locator("tbody.sweep tr").count() == 7
            best = head.locator("a.best").inner_text()
            page.goto(f"{url}/experiments/{best}")
            until(lambda: "epoch=2 loss=" in page.locator("#log").inner_text())
            shot(page, tmp_path, "from-the-store")
    assert seen.dialogs == [] and seen.strays() == [] and seen.errors == []


@LOCAL_RUNS
def test_a_finished_run_is_read_from_its_record_and_a_run_again_followed(tmp_path, browser):
    """Issue 66: the dashboard started after the README's sweep has ended shows it from its
    record (its trials, a trial's log, pods and events); an experiment's page kept open
    across a run of the same file again follows the new run's log."""
    assert cli("examples", "sweep", "-o", "my-experiment/", cwd=tmp_path).wait() == 0
    assert cli("run", "--local", "my-experiment/sweep.yaml", cwd=tmp_path).wait() == 0
    path = token_file(tmp_path)
    assert cli("run", "--local", path.name, cwd=tmp_path).wait() == 0
    with dashboard("--local", "my-experiment/sweep.yaml", cwd=tmp_path) as url:
        seen = watched(browser, url)
        page = seen.page
        page.goto(f"{url}/")
        head = page.locator("tr.sweep-head")
        until(lambda: "(6 Succeeded)" in head.inner_text(), 30)
        best = head.locator("a.best").inner_text()
        page.goto(f"{url}/experiments/{best}")
        until(lambda: "epoch=2 loss=" in page.locator("#log").inner_text())
        facts = page.locator("dl.facts").inner_text()
        assert "Succeeded" in facts and "lr = " in facts and "momentum = " in facts
        chart = page.locator("#metrics-chart")  # (its printed loss, by step: 3 epochs)
        until(lambda: chart.get_attribute("data-points") == "3")
        page.reload()  # (a reload keeps them: the whole run's)
        until(lambda: chart.get_attribute("data-points") == "3")
        until(lambda: "Completed" in page.locator("main").inner_text())  # (its events)
        shot(page, tmp_path, "recorded")
        page.goto(f"{url}/")  # (its kept runs listed, each opened from its record)
        runs = page.locator("table.runs tbody tr")
        until(lambda: runs.count() == 1)
        assert "Succeeded" in runs.first.inner_text()
        runs.first.locator("a").click()
        until(lambda: page.locator("table.trials tbody tr").count() == 6)
        assert f"{best} *" in page.locator("tr.best").inner_text()
        shot(page, tmp_path, "kept-run")
    assert seen.dialogs == [] and seen.strays() == [] and seen.errors == []
    with dashboard("--local", path.name, cwd=tmp_path) as url:
        seen = watched(browser, url)
        page = seen.page
        page.goto(f"{url}/experiments/again")
        log = page.locator("#log")
        first = until(lambda: [w for w in log.inner_text().split() if len(w) == 36], 30)
        run = cli("run", "--local", path.name, cwd=tmp_path)
        try:
            tokens = lambda: [w for w in log.inner_text().split() if len(w) == 36]  # noqa: E731
            until(lambda: tokens() and tokens() != first, 60)  # (the new run's, followed)
            assert run.wait(60) == 0
        finally:
            run.kill()
            run.wait()
    assert seen.dialogs == [] and seen.strays() == [] and seen.errors == []
