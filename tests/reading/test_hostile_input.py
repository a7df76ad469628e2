"""Manifests no one should write, read safely: one clean error each (exit 2 from the CLI), no
traceback, no blow-up: duplicate keys, alias bombs, deep nesting, bytes that are not UTF-8."""

from __future__ import annotations

import pytest

from aichor_iac import cli, doors
from aichor_iac.problems import ManifestError

MINIMAL = "spec:\n  operator: batchjob\n  image: i\n  command: c\n"


def bomb() -> bytes:
    """1 KB of YAML that is 10^11 list items once its aliases are expanded."""
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 11)]
    return ("\n".join(lines) + "\nspec: *a10\n").encode()


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (
            (MINIMAL + "  image: j\n").encode(),
            "x.yaml:5: spec.image: given twice (also on line 3); keep one",
        ),
        (
            (MINIMAL + "  types:\n    Worker: {}\n    worker: {}\n").encode(),
            "x.yaml:7: spec.types.worker: given twice (also on line 6); keep one",
        ),
        (bomb(), "x.yaml: too large: more than 100000 keys and items once its YAML aliases"),
        (b"spec: " + b"[" * 5000 + b"]" * 5000 + b"\n", "x.yaml: nested more than 64 levels"),
        (b"spec: " + b"[" * 70 + b"]" * 70 + b"\n", "x.yaml: nested more than 64 levels"),
        (b"spec:\n  image: \xff\xfe\n", "x.yaml: not UTF-8 text (byte 0xff at offset 15)"),
        (  # the line of the bracket, what is wrong, the fix, then YAML's words
            b"spec: [\n",
            "x.yaml:1: invalid YAML: this [ or { is never closed, or two of its items have no "
            "comma between them: close it, or put a comma between items (did not find expected "
            "node content)",
        ),
        (  # (libyaml counts bytes: the line is counted in them too)
            "a: \u00e9\u00e9\n\nspec: \x07\n".encode(),
            "x.yaml:3: invalid YAML: control characters are not allowed (character #x0007)",
        ),
        (MINIMAL.encode() + b"#" * 2**20, "x.yaml: larger than 1,048,576 bytes"),
        (
            (MINIMAL.replace("command: c", 'command: "echo a\\0b"')).encode(),
            "x.yaml:4: spec.command: holds a NUL character",
        ),
    ],
    ids=[
        "duplicate",
        "same type twice",
        "alias bomb",
        "deep",
        "deeper than 64",
        "not utf-8",
        "yaml",
        "control character",
        "too large",
        "nul",
    ],
)
def test_a_hostile_manifest_gets_one_clean_error(content, expected, tmp_path, capsys):
    path = tmp_path / "x.yaml"
    path.write_bytes(content)
    code = cli.main(["validate", str(path)])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert err.replace(str(tmp_path) + "/", "").startswith(expected), err


def test_a_lone_surrogate_from_python_is_refused_as_not_utf8() -> None:
    # (only a str made in Python holds one: a file's bytes decode strictly)
    with pytest.raises(
        ManifestError, match=r"^x.yaml: not UTF-8 text \(a lone surrogate at offset 9\)"
    ):
        doors.parse("spec: a: \udc80\n", source="x.yaml")


@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [
        ("kueueQueue", "a b", "is not a label value"),
        ("kueueQueue", "q" * 64, "is not a label value"),
        ("gpuProductLabel", "x y", "is not a label key"),
        ("gpuProductLabel", "Bad_Prefix/gpu.product", "is not a label key"),
        ("schedulerName", "Bad Name", "is not a Kubernetes name"),
        ("priorityClassName", "x;y", "is not a Kubernetes name"),
        ("imagePullSecrets", ["regcred", "A_b"], "'A_b' is not a Kubernetes name"),
        ("egressCIDRs", ["10.0.0.0/33"], "is not a CIDR"),
        ("egressCIDRs", ["0.0.0.0/0; rm"], "is not a CIDR"),
        ("peerWaitSeconds", 10**30, "less than or equal to 2147483647"),
        ("waitTimeoutSeconds", 2**31, "less than or equal to 2147483647"),
    ],
)
def test_stack_config_values_the_api_server_would_refuse(key, value, expected):
    from aichor_iac.problems import ManifestError
    from aichor_iac.settings import from_config

    with pytest.raises(ManifestError, match=rf"aichor:{key}: .*{expected}"):
        from_config({key: value})


def test_stack_config_values_that_are_fine():
    from aichor_iac.settings import from_config

    settings = from_config(
        {
            "kueueQueue": "team-a",
            "gpuProductLabel": "nvidia.com/gpu.product",
            "schedulerName": "volcano",
            "priorityClassName": "high",
            "imagePullSecrets": ["regcred"],
            "egressCIDRs": ["0.0.0.0/0", "10.1.0.0/16", "fd00::/8"],
        }
    )
    assert settings.egress_cidrs == ["0.0.0.0/0", "10.1.0.0/16", "fd00::/8"]


@pytest.mark.parametrize(
    ("field", "expected"),
    [
        (
            "      count: 100001\n",
            "spec.types.Worker.count: Input should be less than or equal to 100000",
        ),
        (
            "      resources: {cpus: .inf, ramRatio: 1}\n",
            "resources.cpus: Input should be a finite number",
        ),
        (
            "      resources: {cpus: .nan, ramRatio: 1}\n",
            "resources.cpus: Input should be a finite number",
        ),
        (
            "      resources: {cpus: 0.0001, ramRatio: 1}\n",
            "resources.cpus: Input should be greater than or equal to 0.001",
        ),
        (
            "      resources: {cpus: 1, memory: 1e308}\n",
            "resources.memory: Input should be less than or equal to 1048576",
        ),
        (
            "      resources: {cpus: 1, ramRatio: 1, accelerators: {gpu: {count: 99999999999999999999}}}\n",
            "gpu.count: Input should be less than or equal to 1024",
        ),
        (
            "  restartPolicy: {backoffLimit: 2147483648}\n",
            "spec.restartPolicy.backoffLimit: Input should be less than or equal to 2147483647",
        ),
        (
            "  timeout: 99999999999999999d\n",
            "spec.timeout: '99999999999999999d' is longer than 2147483647 seconds",
        ),
    ],
    ids=["count", "inf", "nan", "tiny cpu", "huge memory", "huge int", "int32", "timeout"],
)
def test_numbers_no_object_could_hold(field, expected, tmp_path, capsys):
    base = MINIMAL + "  types:\n    Worker:\n"
    worker = "      resources: {cpus: 1, ramRatio: 1}\n"
    if field.startswith("  ") and not field.startswith("    "):  # a spec key
        text = MINIMAL + field + "  types:\n    Worker:\n" + worker
    elif "resources" in field:
        text = base + field
    else:
        text = base + field + worker
    path = tmp_path / "x.yaml"
    path.write_text(text)
    assert cli.main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert expected in err and "Traceback" not in err, err


def test_a_rendered_secret_says_its_values_are_redacted():
    import yaml
    from conftest import ROOT

    from aichor_iac import render
    from aichor_iac.review import output

    objects = render(ROOT / "examples/mpi-horovod.yaml")
    text = output.to_yaml(objects)
    secret = text.split("---\n")[[o["kind"] for o in objects].index("Secret")]
    assert secret.startswith(output.SECRET_NOTE)
    assert set(yaml.safe_load(secret)["stringData"].values()) == {"[secret]"}
    assert list(yaml.safe_load_all(text)) == [output.canonical(o) for o in objects]


def test_security_options_from_the_stack_config():
    from conftest import expand, pytorch_manifest

    settings = {"run_as_non_root": True, "run_as_user": 1000, "run_as_group": 100, "fs_group": 100}
    jobs = [o for o in expand(pytorch_manifest(), **settings).objects if o["kind"] == "Job"]
    for job in jobs:
        assert job["spec"]["template"]["spec"]["securityContext"] == {
            "seccompProfile": {"type": "RuntimeDefault"},
            "runAsNonRoot": True,
            "runAsUser": 1000,
            "runAsGroup": 100,
            "fsGroup": 100,
        }
    default = next(o for o in expand(pytorch_manifest()).objects if o["kind"] == "Job")
    assert default["spec"]["template"]["spec"]["securityContext"] == {
        "seccompProfile": {"type": "RuntimeDefault"}
    }


@pytest.mark.parametrize("setting", [{"run_as_non_root": True}, {"run_as_user": 1000}])
def test_mpi_workers_cannot_run_sshd_as_a_user(setting):
    from conftest import expand

    from aichor_iac.problems import ManifestError

    data = {"spec": {"operator": "mpi", "image": "i", "command": "mpirun true", "types": {
        "Launcher": {"resources": {"cpus": 1, "ramRatio": 1}},
        "Worker": {"count": 2, "resources": {"cpus": 1, "ramRatio": 1}},
    }}}  # fmt: skip
    with pytest.raises(ManifestError, match="MPI workers run sshd as root"):
        expand(data, **setting)
