"""The dashboard's answers (aichor_iac/dashboard/app.py) over a cluster that answers in the API's
JSON (tests/fake_kube.py), read as `status` reads it: every string escaped, read-only, the
security headers, the token or the local host, and a cluster it cannot read said in `status`'s
words. The same pages in a real browser: test_dashboard_browser.py."""

from __future__ import annotations

import contextlib
import io
import sys
import time
from pathlib import Path

import pytest
from dashboard_cluster import (
    HOSTILE,
    STARTED,
    cluster_of,
    finish,
    kubeconfig_file,
    sweep_file,
)
from fake_kube import serving
from markupsafe import escape
from starlette.testclient import TestClient

from aichor_iac.cli import main
from aichor_iac.cli.observe import watch_of
from aichor_iac.cli.parser import parser
from aichor_iac.dashboard.app import CSP, application

LOCAL = "http://127.0.0.1:8155"


@contextlib.contextmanager
def read_once(path: Path, folder: Path):
    """The file's experiments on a cluster (`cluster_of`), read once by its dashboard: a client
    of the dashboard, its watch, and the cluster."""
    cluster = cluster_of(path)
    with serving(cluster) as url:
        config = kubeconfig_file(folder, url)
        args = parser().parse_args(["dashboard", str(path), "--kubeconfig", str(config)])
        watch, title = watch_of(args)
        watch.refresh()
        assert watch.snapshot.error is None, watch.snapshot.error
        client = TestClient(application(watch, title, None), base_url=LOCAL)
        yield client, watch, cluster


@pytest.fixture
def dashboard(tmp_path):
    """The hostile sweep, read once by its dashboard."""
    with read_once(sweep_file(tmp_path), tmp_path) as found:
        yield found


def names(watch) -> list[str]:
    return [s.name for s in watch.snapshot.sources]


def pages(watch) -> list[str]:
    trials = names(watch)
    return [
        "/",
        "/fragments/experiments",
        "/sweeps/hostile",
        "/fragments/sweeps/hostile",
        *(f"/experiments/{t}" for t in trials),
        *(f"/fragments/experiments/{t}" for t in trials),
    ]


def test_every_page_shows_hostile_strings_as_text(dashboard):
    """Parameter values (the manifest's), scheduler messages and events (the cluster's) reach
    each page escaped: none as markup, each as its text."""
    client, watch, _ = dashboard
    shown = ""
    for page in pages(watch):
        answer = client.get(page)
        assert answer.status_code == 200, page
        for text in HOSTILE:
            assert text not in answer.text, (page, text)
        assert "onerror=" not in answer.text.replace(str(escape("onerror=")), ""), page
        shown += answer.text
    for text in HOSTILE:
        assert str(escape(text)) in shown, text
    # (data is never a template: its text, never its value; the title's path may hold "49")
    assert "{{ 7 * 7 }}" in shown and ">49<" not in shown and " 49 " not in shown


def test_an_experiment_s_first_failure_is_named_with_its_last_lines(dashboard):
    """The pod whose main container failed first, its signal and when, and its last lines
    (its termination message) as text, under the pods."""
    client, watch, cluster = dashboard
    pod = cluster.served["v1/pods"][0]["metadata"]["name"]
    experiment = next(n for n in names(watch) if pod.startswith(f"{n}-"))
    page = client.get(f"/experiments/{experiment}").text
    said = page[page.index('<h3 id="failed-first">First failure</h3>') :]
    assert f"<p>failed first: {pod}, exit 137 (SIGKILL) at {STARTED}</p>" in said
    shown = said[said.index("<pre") : said.index("</pre>")]
    assert all(str(escape(text)) in shown for text in ("step 14", *HOSTILE, "step 15"))


def test_a_followed_log_is_served_as_text_lines(dashboard):
    client, _, cluster = dashboard
    pod = cluster.served["v1/pods"][0]["metadata"]
    trial, pod = pod["labels"]["app.kubernetes.io/instance"], pod["name"]
    found = {}
    for _ in range(50):
        found = client.get(f"/api/experiments/{trial}/logs/{pod}?after=0").json()
        if found["ended"]:
            break
        time.sleep(0.1)
    assert [text for _, _, text in found["lines"]] == [*HOSTILE, "loss=0.5"]
    assert [n for n, _, _ in found["lines"]] == [1, 2, 3, 4, 5]
    after = client.get(f"/api/experiments/{trial}/logs/{pod}?after=3").json()
    assert [n for n, _, _ in after["lines"]] == [4, 5]
    stranger = client.get(f"/api/experiments/{trial}/logs/someone-else").json()
    assert stranger["lines"] == [] and "no pod someone-else" in stranger["error"]


def test_a_state_change_is_in_the_next_fragment(dashboard):
    client, watch, cluster = dashboard
    assert "Succeeded" not in client.get("/fragments/experiments").text
    finish(cluster)
    watch.refresh()
    fragment = client.get("/fragments/experiments").text
    assert fragment.count('<td class="state">Succeeded</td>') == 3
    assert "3 Succeeded" in client.get("/fragments/sweeps/hostile").text


def test_every_answer_carries_the_security_headers(dashboard):
    client, _, _ = dashboard
    for path in ("/", "/static/dashboard.js", "/api/sweeps/hostile", "/nowhere"):
        answer = client.get(path)
        assert answer.headers["content-security-policy"] == CSP
        assert "script-src 'self';" in CSP and "unsafe-inline" not in CSP
        assert answer.headers["x-content-type-options"] == "nosniff"
        assert answer.headers["referrer-policy"] == "no-referrer"
    assert client.get("/").headers["cache-control"] == "no-store"


@pytest.mark.parametrize("method", ["POST", "PUT", "PATCH", "DELETE"])
def test_it_is_read_only(dashboard, method):
    client, watch, _ = dashboard
    answer = client.request(method, f"/experiments/{names(watch)[0]}")
    assert answer.status_code == 405 and answer.headers["allow"] == "GET, HEAD"


def test_without_a_token_only_a_local_host_name_is_answered(dashboard):
    """A page of another site whose name resolves here (DNS rebinding) is refused."""
    client, _, _ = dashboard
    assert client.get("/", headers={"host": "localhost:8155"}).status_code == 200
    assert client.get("/", headers={"host": "evil.example:8155"}).status_code == 421


def test_on_another_host_the_token_is_needed_then_kept_in_a_cookie(dashboard):
    _, watch, _ = dashboard
    app = application(watch, "t", "s3cret-token")
    client = TestClient(app, base_url="http://build-host:8155")
    refused = client.get("/")
    assert refused.status_code == 403 and "needs its token" in refused.text
    assert client.get("/?token=wrong").status_code == 403
    first = client.get("/?token=s3cret-token")
    assert first.status_code == 200
    cookie = first.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
    assert client.get("/sweeps/hostile").status_code == 200  # (the cookie, kept)


def test_what_is_not_there_is_a_page_that_says_so(dashboard):
    client, _, _ = dashboard
    answer = client.get("/experiments/nothing-here")
    assert answer.status_code == 404 and "No experiment nothing-here" in answer.text
    assert client.get("/sweeps/nothing").status_code == 404


def test_a_cluster_it_cannot_read_is_said_in_status_s_words(tmp_path):
    path = sweep_file(tmp_path)
    config = kubeconfig_file(tmp_path, "http://127.0.0.1:9")  # (nothing listens)
    args = parser().parse_args(["dashboard", str(path), "--kubeconfig", str(config)])
    watch, title = watch_of(args)
    said = watch.refresh().error
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        assert main(["status", str(path), "--kubeconfig", str(config)]) == 2
    assert said.split(": ", 1)[1] in err.getvalue()
    page = TestClient(application(watch, title, None), base_url=LOCAL).get("/")
    assert page.status_code == 200 and "cannot reach the cluster" in page.text
    assert "Traceback" not in page.text


def test_an_experiment_s_objects_are_render_s_with_secrets_as_references(tmp_path):
    """Ray's password, from a Secret: its variable names the Secret, its value is not shown."""
    from conftest import ROOT

    path = ROOT / "examples" / "ray.yaml"
    with read_once(path, tmp_path) as (client, watch, _):
        name = names(watch)[0]
        shown = client.get(f"/experiments/{name}/objects.yaml").text
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["render", str(path)]) == 0
    rendered = out.getvalue().split("---\n")
    assert shown.split("---\n") == [d for d in rendered if f"instance: {name}\n" in d]
    assert "secretKeyRef" in shown


def test_without_its_extra_the_command_says_how_to_add_it(tmp_path, monkeypatch, capsys):
    for module in ("aichor_iac.dashboard.server", "aichor_iac.dashboard.app"):
        monkeypatch.delitem(sys.modules, module, raising=False)
    for module in [m for m in sys.modules if m.split(".")[0] == "starlette"] + ["starlette"]:
        monkeypatch.setitem(sys.modules, module, None)  # (as if it were not installed)
    assert main(["dashboard", str(sweep_file(tmp_path))]) == 2
    said = capsys.readouterr().err
    assert "starlette is missing" in said and "pip install 'aichor-iac[dashboard]'" in said


def test_a_port_in_use_is_refused_naming_the_option():
    from aichor_iac.dashboard.server import listening
    from aichor_iac.problems import ManifestError

    taken = listening("127.0.0.1", 0)
    with pytest.raises(ManifestError) as refused:
        listening("127.0.0.1", taken.getsockname()[1])
    taken.close()
    assert "--port: cannot listen on 127.0.0.1:" in str(refused.value)
    assert "give another --port" in str(refused.value)


def test_a_page_asked_as_the_dashboard_starts_waits_for_the_first_read(tmp_path):
    """A browser that opens a trial's page at once gets the trial, not "no experiment": the
    page waits for the dashboard's first read of the file (it once said missing for good)."""
    path = sweep_file(tmp_path)
    with serving(cluster_of(path)) as url:
        config = kubeconfig_file(tmp_path, url)
        args = parser().parse_args(["dashboard", str(path), "--kubeconfig", str(config)])
        watch, title = watch_of(args)
        read = watch._read

        def slow(*given):  # (a first read that takes a while, as under load)
            time.sleep(1.5)
            return read(*given)

        watch._read = slow
        trial = None
        with TestClient(application(watch.start(), title, None), base_url=LOCAL) as client:
            started = time.monotonic()
            page = client.get("/")  # (asked before the first read has ended)
            assert time.monotonic() - started >= 1
            trial = names(watch)[1]
            assert client.get(f"/experiments/{trial}").status_code == 200
        assert page.status_code == 200 and escape(trial) in page.text
