"""`aichor-iac preview --output markdown` (issue 42): a pull request's comment that a Markdown
renderer reads as meant (parsed here with markdown-it, GitHub's tables): the experiment, its
component, images and totals, the objects in `pulumi up`'s order, with `--diff` each field
that changes, the outputs; nothing a manifest holds breaks out of its cell or block."""

from __future__ import annotations

import json
import re

import pytest
import yaml
from conftest import ROOT
from markdown_it import MarkdownIt

from aichor_iac import cli, engine
from aichor_iac.review.markdown import COMMENT_MARK
from aichor_iac.settings import Settings

PYTORCH = ROOT / "examples" / "pytorch.yaml"


def comment(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert cli.main(["preview", *argv, "--output", "markdown"]) == 0
    return capsys.readouterr().out


def tables(text: str) -> list[list[list[str]]]:
    """Each table's rows of cells (header first), as GitHub's Markdown reads them."""
    found, rows, row = [], [], None
    for token in MarkdownIt("gfm-like", {"linkify": False}).parse(text):
        if token.type == "table_open":
            rows = []
        elif token.type == "tr_open":
            row = []
        elif token.type == "inline" and row is not None:
            row.append(token.content)
        elif token.type == "tr_close":
            rows.append(row)
            row = None
        elif token.type == "table_close":
            found.append(rows)
    return found


def blocks(text: str) -> list[tuple[str, str]]:
    """Each fenced block's language and text."""
    return [
        (t.info, t.content)
        for t in MarkdownIt("gfm-like", {"linkify": False}).parse(text)
        if t.type == "fence"
    ]


def test_the_comment_names_the_experiment_and_lists_its_objects_in_creation_order(capsys):
    text = comment(capsys, str(PYTORCH), "--namespace", "ml")
    assert text.startswith(COMMENT_MARK + "\n\n### aichor-iac preview: `pytorch-ddp` (stack `dev`)")
    # (the stack, the component, 5 objects, the progress receiver's 6 credentials)
    assert "**+ 13 to create**" in text
    experiments, objects = tables(text)
    assert experiments == [
        ["experiment", "component", "pods", "GPUs", "CPUs", "memory"],
        ["`pytorch-ddp`", "`aichor:index:PyTorchJob`", "3", "3 × Quadro-RTX-4000", "12", "36 GiB"],
    ]
    rendering = engine.expand(engine.doors.load(PYTORCH), Settings(namespace="ml"))
    names = [f"`{o['metadata']['name']}`" for o in rendering.objects]
    assert [row[2] for row in objects[1:]] == names  # (pulumi up's order)
    assert objects[-1][5] == "Job/pytorch-ddp-master"  # (the workers after the master)
    assert "**Images**: `pytorch/pytorch:2.3.1-cuda12.1-cudnn8-runtime`" in text
    ((language, outputs),) = blocks(text)
    assert language == "json" and json.loads(outputs) == rendering.outputs
    assert "<details><summary>Objects in creation order (5)</summary>" in text
    assert "field by field" not in text  # (nothing to compare with)


def test_with_diff_each_changed_field_is_shown_and_why_a_job_is_replaced(capsys, tmp_path):
    new = tmp_path / "pytorch.yaml"
    new.write_text(PYTORCH.read_text().replace("count: 2", "count: 3"))
    text = comment(capsys, str(new), "--diff", str(PYTORCH))
    assert "**+- 2 to replace · 11 unchanged**" in text
    diffs = dict(re.findall(r"\*\*Job `([^`]+)`: replace\*\*.*?```diff\n(.*?)```", text, re.S))
    assert diffs["pytorch-ddp-worker"].splitlines() == [
        "~ spec.completions: 2 => 3",
        "~ spec.parallelism: 2 => 3",
        '~ spec.template.spec.containers[pytorch].env[WORLD_SIZE].value: "3" => "4"',
    ]
    assert "(spec.template cannot change in place: delete, then create)" in text
    objects = tables(text)[1]
    plans = {row[2]: (row[0], row[3]) for row in objects[1:]}
    assert plans["`pytorch-ddp-worker`"] == ("`+-`", "replace")
    assert plans["`pytorch-ddp`"] == ("", "")  # (the Service: unchanged)


def test_a_sweep_gives_a_row_per_trial(capsys):
    text = comment(capsys, str(ROOT / "tests" / "katib" / "random.yaml"))
    experiments = tables(text)[0]
    assert len(experiments) == 1 + 12 and all(
        r[1] == "`aichor:index:BatchJob`" for r in experiments[1:]
    )


def test_nothing_a_manifest_holds_breaks_out_of_its_cell_or_block(capsys, tmp_path):
    # A command with pipes and backticks, an env value with a fence: the tables keep their
    # columns, and the changed value stays in its diff block
    data = yaml.safe_load(PYTORCH.read_text())
    path = tmp_path / "old.yaml"
    path.write_text(yaml.safe_dump(data))
    data["spec"]["command"] = "python train.py | tee log ``` `x`"
    new = tmp_path / "new.yaml"
    new.write_text(yaml.safe_dump(data))
    text = comment(capsys, str(new), "--diff", str(path))
    for table in tables(text):
        assert len({len(row) for row in table}) == 1, table
    diff = [content for language, content in blocks(text) if language == "diff"]
    assert any("| tee log ``` `x`" in content for content in diff), diff
