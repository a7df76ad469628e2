"""The CLI as a shell user meets it (issue 17): argv and standard input → exit status and
what stdout and stderr say, one row per behaviour, run through the installed entry point;
then what a row cannot hold: a directory `render -o` rewrites, the preview's layout (golden
files, plain and coloured), shell completion, and the docs' CLI page against `--help`.

UPDATE_GOLDEN=1 rewrites the golden files and docs/cli.md's `--help` blocks from the CLI.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest
from kube import LocalCluster

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "golden"
CLI = str(Path(sys.executable).parent / "aichor-iac")
PYTORCH = (ROOT / "examples" / "pytorch.yaml").read_text()
PYTORCH_STACK = "stacks/Pulumi.pytorch.yaml"
UPDATE = bool(os.environ.get("UPDATE_GOLDEN"))
COMMANDS = (
    "validate",
    "render",
    "preview",
    "run",
    "convert",
    "schema",
    "examples",
    "dashboard",
    "history",
)

# A manifest each warning (or the object-storage error) is about; `{}` takes a spec line.
SMALL = """kind: AIchorManifest
apiVersion: 0.2.2
spec:
  operator: pytorch
  image: img
  command: python train.py
{}  types:
    Master:
      count: 1
      resources: {{cpus: 1, ramRatio: 2, accelerators: {{gpu: {{count: 1, type: gpu, product: NVIDIA-L4}}}}}}
"""
ECHO = """spec:
  operator: batchjob
  image: local
  command: echo "shard $JOB_COMPLETION_INDEX"
  types:
    worker:
      count: 2
      resources: {cpus: 1, ramRatio: 1}
"""


def stack(tmp_path: Path, **config: object) -> str:
    """A stack file in a project of its own (a Pulumi.yaml beside it), manifest paths
    relative to it."""
    (tmp_path / "Pulumi.yaml").write_text("name: aichor\nruntime: python\n")
    lines = [f"  aichor:{key}: {json.dumps(value)}" for key, value in config.items()]
    path = tmp_path / "Pulumi.test.yaml"
    path.write_text("config:\n" + "\n".join(lines) + "\n")
    return str(path)


def cli(*argv: str, stdin: str = "", env: dict[str, str] | None = None, cwd: Path = ROOT):
    return subprocess.run(
        [CLI, *argv], input=stdin, capture_output=True, text=True, cwd=cwd, env=env
    )


@pytest.mark.parametrize(
    ("argv", "stdin", "status", "out", "err"),
    [
        (["--version"], "", 0, f"aichor-iac {version('aichor-iac')}\n", ""),
        # `-` is standard input, as for kubectl and most tools
        (["validate", "-"], PYTORCH, 0, "<stdin>: valid pytorch manifest", ""),
        (["render", "-"], PYTORCH, 0, "name: pytorch-ddp-master", ""),
        (
            ["validate", "-"],
            "x: [\n",
            2,
            "",
            "<stdin>:1: invalid YAML: this [ or { is never closed",
        ),
        (["validate", "-"], "", 2, "", "<stdin>"),
        # the namespace is held to the rule the stack file's is
        (["render", "-", "--namespace", "Bad_NS"], PYTORCH, 2, "", "aichor:namespace"),
        # no MANIFEST: the stack's aichor:manifest (relative to its project), validate included
        (
            ["validate", "--stack-config", "stacks/Pulumi.ray.yaml"],
            "",
            0,
            "examples/ray.yaml: valid ray manifest",
            "",
        ),
        (["validate"], "", 2, "", "MANIFEST: missing: give MANIFEST, or --stack-config"),
        # MANIFEST and a stack whose aichor:manifest is another: said, not silently ignored
        (
            ["validate", "-", "--stack-config", "stacks/Pulumi.ray.yaml"],
            PYTORCH,
            0,
            "<stdin>: valid pytorch manifest",
            "stacks/Pulumi.ray.yaml: warning: aichor:manifest: - is used, not the stack's "
            "examples/ray.yaml",
        ),
        (
            ["validate", "examples/ray.yaml", "--stack-config", "stacks/Pulumi.ray.yaml"],
            "",
            0,
            "",
            "",
        ),
        # render -o FILE: a usage error, not an internal one
        (
            ["render", "examples/pytorch.yaml", "-o", "README.md"],
            "",
            2,
            "",
            "README.md: not a directory",
        ),
        # warnings: valid, said on stderr with the line, and the exit status stays 0
        (
            ["validate", "-"],
            SMALL.format("  timeout: 5m\n"),
            0,
            "valid",
            "<stdin>:7: warning: spec.timeout: 300 s is shorter than aichor:peerWaitSeconds",
        ),
        (
            ["validate", "-"],
            SMALL.format("  env:\n    - {name: DATA, value: 's3://bucket/data'}\n"),
            0,
            "valid",
            "warning: spec.env.0.value: s3://bucket/data looks like object storage",
        ),
        # the AICHOR_* paths the replicas certainly use: an error
        (
            [
                "validate",
                "examples/pytorch.yaml",
                "--stack-config",
                "{stack:outputPath=gs://b/out}",
            ],
            "",
            2,
            "",
            "aichor:outputPath: gs://b/out is object storage, which the experiment's NetworkPolicy",
        ),
        (
            ["validate", "-", "--stack-config", "{stack:gpuProductLabel=gpu.example.com/model}"],
            SMALL.format(""),
            0,
            "valid",
            "Pulumi.test.yaml: warning: aichor:gpuProductLabel: gpu.example.com/model is no label "
            "a common node labeller sets",
        ),
        (
            [
                "validate",
                "-",
                "--stack-config",
                "{stack:gpuProductLabel=cloud.google.com/gke-accelerator}",
            ],
            SMALL.format(""),
            0,
            "valid",
            "",
        ),
        # render is quiet: the objects, or nothing when they go to files
        (["render", "examples/jax.yaml", "-o", "{tmp}/out"], "", 0, "", ""),
        # --output json for scripts: validate, problems with file, line, path and message
        (["validate", "-", "--output", "json"], PYTORCH, 0, '"valid": true', ""),
        (
            ["validate", "-", "--output", "json"],
            "spec:\n  operator: pytorch\n  image: i\n",
            2,
            '"file": "<stdin>",\n      "line": 1,\n      "path": "spec.command",\n      "message": "required; add it"',
            "",
        ),
        # the same keys whether valid or not (docs/cli.md)
        (["validate", "-", "--output", "json"], "spec: {}\n", 2, '"warnings": []', ""),
        (["render", "-", "--output", "json"], PYTORCH, 0, '"kind": "List"', ""),
        (
            ["preview", "-", "--output", "json"],
            PYTORCH,
            0,
            '"changeSummary": {\n    "create": 13',  # (with the progress receiver's 7)
            "",
        ),
        (["schema", "--output", "json"], "", 0, '"$schema"', ""),
        (
            ["convert", "tests/kubeflow/pytorch-simple.yaml", "--output", "json"],
            "",
            0,
            '"lost": [',
            "",
        ),
        # preview --diff: against another manifest, or a directory render -o wrote
        (
            ["preview", "examples/pytorch.yaml", "--diff", "examples/pytorch.yaml"],
            "",
            0,
            "Resources:\n    13 unchanged",
            "",
        ),
        (["preview", "-", "--diff", "{tmp}"], PYTORCH, 2, "", "holds no rendered objects"),
        (
            ["preview", "-", "--diff", "{tmp:01-job-x.yaml=a: [}"],
            PYTORCH,
            2,
            "",
            "01-job-x.yaml: not an object render -o wrote",
        ),
        (
            ["preview", "-", "--diff", "{tmp:01-job-x.yaml=kind: Job}"],
            PYTORCH,
            2,
            "",
            "01-job-x.yaml: not a Kubernetes object",
        ),
        # another framework: the old component goes with its objects
        (
            ["preview", "examples/pytorch.yaml", "--diff", "examples/jax.yaml"],
            "",
            0,
            "-   └─ aichor:index:JaxJob                               jax-spmd                      delete\n"
            "-      ├─ tls:index/privateKey:PrivateKey                jax-spmd-progress-ca-key      delete\n",
            "",
        ),
        (
            ["preview", "examples/pytorch.yaml", "--diff", "examples/jax.yaml"],
            "",
            0,
            "Resources:\n    + 12 to create\n    - 11 to delete\n    1 unchanged\n",
            "",
        ),
        # --help: every command with examples
        *[
            ([command, "--help"], "", 0, f"examples:\n  aichor-iac {command}", "")
            for command in COMMANDS
        ],
        # the examples ship with the package: listed, printed, copied with their scripts
        (["examples"], "", 0, "pytorch              PyTorch DDP: one master and two workers", ""),
        (["examples", "pytorch"], "", 0, 'command: "python -u train.py', ""),
        (["examples", "nope"], "", 2, "", "nope: no such example; the examples are jax, jobset"),
        (["examples", "mpi", "-o", "{tmp}"], "", 0, "", ""),
        (
            ["--print-completion", "bash"],
            "",
            0,
            "complete -o bashdefault -F _shtab_aichor_iac aichor-iac",
            "",
        ),
    ],
)
def test_the_cli(argv, stdin, status, out, err, tmp_path) -> None:
    argv = [_expand(a, tmp_path) for a in argv]
    result = cli(*argv, stdin=stdin)
    assert result.returncode == status, result.stderr
    assert out in result.stdout and err in result.stderr, (result.stdout, result.stderr)
    if not err:
        assert "warning" not in result.stderr, result.stderr


@pytest.mark.parametrize(
    "argv",
    [["render", "examples/ray.yaml"], ["--print-completion", "bash"], ["schema"], ["examples"]],
)
def test_a_reader_that_stops_early_stops_the_cli_quietly(argv):
    """`aichor-iac render … | head`: no traceback, no "internal error"."""
    reader = subprocess.Popen(
        [CLI, *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT
    )
    assert reader.stdout is not None and reader.stderr is not None
    reader.stdout.close()  # gone before the CLI writes (it imports for a second first)
    assert reader.wait(timeout=60) == 141  # 128 + SIGPIPE, as `set -o pipefail` shells see it
    assert reader.stderr.read() == b""


def _expand(arg: str, tmp_path: Path) -> str:
    """`{tmp}` is the test's directory, `{tmp:FILE=TEXT}` the same with FILE in it;
    `{stack:key=value}` a stack file setting key."""
    if match := re.fullmatch(r"\{stack:(\w+)=(.*)\}", arg):
        return stack(tmp_path, **{match[1]: match[2]})
    if match := re.fullmatch(r"\{tmp:([\w.-]+)=(.*)\}", arg):  # a file in it
        (tmp_path / match[1]).write_text(match[2])
        return str(tmp_path)
    return arg.replace("{tmp}", str(tmp_path))


def test_render_to_a_directory_replaces_an_earlier_render(tmp_path):
    out = tmp_path / "out"
    assert cli("render", "examples/pytorch.yaml", "-o", str(out)).returncode == 0
    (out / "notes.txt").write_text("mine")
    assert cli("render", "examples/jax.yaml", "-o", str(out)).returncode == 0
    assert sorted(p.name for p in out.iterdir()) == [
        "01-secret-jax-spmd-secret.yaml",
        "02-networkpolicy-jax-spmd.yaml",
        "03-service-jax-spmd.yaml",
        "04-job-jax-spmd-worker.yaml",
        "notes.txt",  # not a render's: left alone
    ]
    assert cli("render", "examples/jax.yaml", "-o", str(out), "--output", "json").returncode == 0
    assert sorted(p.suffix for p in out.iterdir()) == [".json"] * 4 + [".txt"]


def test_preview_diff_says_what_pulumi_up_would_replace_update_and_delete(tmp_path):
    old = tmp_path / "old"
    assert (
        cli(
            "render", "examples/pytorch.yaml", "-o", str(old), "--stack-config", PYTORCH_STACK
        ).returncode
        == 0
    )
    new = tmp_path / "new.yaml"
    new.write_text(PYTORCH.replace("count: 2", "count: 3").replace("runtime\n", "runtime-v2\n", 1))
    assert "runtime-v2" in new.read_text()
    # the image is in the pod template, which a Job cannot change: delete, then create
    result = cli("preview", str(new), "--diff", str(old), "--stack-config", PYTORCH_STACK)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    worker = next(line for line in lines if "pytorch-ddp-worker" in line and "replace" in line)
    assert (
        worker.startswith("+-")
        and "[diff: ~spec.completions, ~spec.parallelism, ~spec.template]" in worker
    )
    assert "    ~ spec.completions: 2 => 3" in lines
    assert any(
        re.fullmatch(
            r'    ~ spec\.template\.spec\.containers\[pytorch\]\.image: ".*runtime" => ".*runtime-v2"',
            line,
        )
        for line in lines
    )
    # named items (containers, env) by name, as a reviewer reads them
    assert '    ~ spec.template.spec.containers[pytorch].env[WORLD_SIZE].value: "3" => "4"' in lines
    assert "Resources:" in lines and "    +-2 to replace" in lines and "    12 unchanged" in lines
    # an object the new version no longer has is deleted
    (old / "09-service-gone.yaml").write_text(
        "apiVersion: v1\nkind: Service\nmetadata:\n  name: gone\n  namespace: ml-experiments\n"
    )
    result = cli(
        "preview", str(new), "--diff", str(old), "--stack-config", PYTORCH_STACK, "--output", "json"
    )
    document = json.loads(result.stdout)
    assert document["changeSummary"] == {"replace": 2, "delete": 1, "same": 12}
    gone = next(s for s in document["steps"] if s["op"] == "delete")
    assert (gone["type"], gone["name"]) == ("kubernetes:core/v1:Service", "gone")
    replaced = [s for s in document["steps"] if s["op"] == "replace"]
    assert all(s["replaceBecause"] == ["spec.template"] for s in replaced)


def test_preview_piped_keeps_each_object_and_quantity_whole():
    # Not a terminal (a CI log, `| tee`): each object's name and each replica's resources on
    # one line, whatever their width.
    from aichor_iac import render

    result = cli("preview", "examples/jobset.yaml", "--stack-config", "stacks/Pulumi.jobset.yaml")
    assert result.returncode == 0, result.stderr
    objects = render(ROOT / "examples" / "jobset.yaml")
    lines = result.stdout.splitlines()
    for obj in objects:
        kind, name = obj["kind"], obj["metadata"]["name"]
        assert any(f":{kind} " in line and f" {name} " in line for line in lines), (kind, name)
    assert any(
        "16 CPU, 32Gi memory each; pulumi up waits until it completes" in line for line in lines
    )


@pytest.mark.parametrize(
    ("name", "env"),
    [
        ("preview-pytorch.txt", {"NO_COLOR": "1"}),
        ("preview-pytorch.ansi", {"FORCE_COLOR": "1", "TERM": "xterm-256color"}),
    ],
)
def test_preview_layout(name, env):
    """`pulumi preview`'s layout: marks, the tree, plan and info columns, outputs, totals and
    the summary line; coloured on a terminal, plain when NO_COLOR is set."""
    environment = {
        "PATH": os.environ["PATH"],
        "HOME": os.environ.get("HOME", "/"),
        "COLUMNS": "120",
        **env,
    }
    result = cli(
        "preview", "examples/pytorch.yaml", "--stack-config", PYTORCH_STACK, env=environment
    )
    assert result.returncode == 0, result.stderr
    golden = GOLDEN / name
    if UPDATE:
        golden.parent.mkdir(exist_ok=True)
        golden.write_text(result.stdout)
    assert result.stdout == golden.read_text()
    assert ("\x1b[" in result.stdout) == ("FORCE_COLOR" in env)


@pytest.mark.skipif(not shutil.which("bash"), reason="needs bash")
def test_bash_completes_commands_options_and_files(tmp_path):
    script = tmp_path / "aichor-iac.bash"
    script.write_text(cli("--print-completion", "bash").stdout)

    def complete(*words: str) -> list[str]:
        line = " ".join(["aichor-iac", *words])
        program = (
            f"source {script}; COMP_WORDS=({line}); COMP_CWORD={len(words)}; "
            "COMP_LINE='" + line + "'; COMP_POINT=${#COMP_LINE}; "
            "_shtab_aichor_iac; printf '%s\\n' \"${COMPREPLY[@]}\""
        )
        return subprocess.run(
            ["bash", "-c", program], capture_output=True, text=True, cwd=ROOT
        ).stdout.split()

    assert set(COMMANDS) <= set(complete(""))
    assert complete("pre") == ["preview"]
    assert "--diff" in complete("preview", "--d")
    assert "--stack-config" in complete("validate", "--st")
    assert complete("render", "examples/pytorch.y") == ["examples/pytorch.yaml"]


@pytest.mark.skipif(not LocalCluster.available(), reason="needs `ip netns` (root)")
def test_run_local_json_lines(tmp_path):
    manifest = tmp_path / "echo.yaml"
    manifest.write_text(ECHO)
    result = cli("run", "--local", str(manifest), "--output", "json", "--timeout", "120")
    assert result.returncode == 0, result.stderr
    events = [json.loads(line) for line in result.stdout.splitlines()]
    lines = [(e["pod"], e["line"]) for e in events if "pod" in e]
    assert sorted(text for pod, text in lines if "/" not in pod) == ["shard 0", "shard 1"]
    # the progress receiver beside shard 0, ended by the TERM at the pod's end even while it
    # starts, never killed after the grace period (`unshare: ...` says a KILL)
    receiver = [text for pod, text in lines if pod == "dev-worker-0/progress"]
    assert all(text.startswith("aichor: progress receiver on port") for text in receiver)
    assert events[-1] == {"experiment": "dev", "result": "succeeded", "status": 0}


HELP_BLOCK = re.compile(r"```text\n\$ (aichor-iac(?: \w+)? --help)\n(.*?)```", re.S)


@pytest.mark.skipif(
    sys.version_info[:2] != (3, 11),
    reason="argparse lays help out per version: the docs' is 3.11's",
)
def test_the_docs_cli_page_is_the_cli_help():
    """docs/cli.md shows `aichor-iac --help` and each command's: the same text the CLI prints
    (100 columns), for every command."""
    readme = (ROOT / "docs" / "cli.md").read_text()
    environment = {**os.environ, "COLUMNS": "100"}
    shown = {}
    for match in HELP_BLOCK.finditer(readme):
        argv = match[1].split()[1:]
        shown[match[1]] = (match[2], cli(*argv, env=environment).stdout)
    if UPDATE:
        readme = HELP_BLOCK.sub(lambda m: f"```text\n$ {m[1]}\n{shown[m[1]][1]}```", readme)
        (ROOT / "docs" / "cli.md").write_text(readme)
        shown = {k: (v[1], v[1]) for k, v in shown.items()}
    assert set(shown) == {"aichor-iac --help", *(f"aichor-iac {c} --help" for c in COMMANDS)}
    for command, (in_readme, printed) in shown.items():
        assert in_readme == printed, (
            f"docs/cli.md's `{command}` differs (UPDATE_GOLDEN=1 rewrites it)"
        )
