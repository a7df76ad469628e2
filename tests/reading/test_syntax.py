"""YAML syntax errors in the project's words (aichor_iac/reading/syntax.py): the line of the
mistake, what it is and the fix, with YAML's own words after them."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aichor_iac.problems import ManifestError
from aichor_iac.reading import text


@pytest.mark.parametrize(
    ("yaml_text", "line", "words"),
    [
        ("spec:\n\toperator: pytorch\n", 2, "a tab character: YAML indents with spaces only"),
        ("spec:\n  operator: pytorch\n  \timage: x\n", 3, "a tab character"),
        (  # a key deeper than the key above it, which has its value
            "spec:\n  operator: pytorch\n    image: x\n",
            3,
            "indented more than 'operator' (line 2), which has its value already",
        ),
        (  # a key deeper than its siblings: YAML stops a line later, the mistake is named
            "spec:\n  types:\n    Master:\n        count: 1\n      resources: {}\n",
            4,
            "indented 8 spaces, more than the key after it (line 5, indented 6)",
        ),
        (  # a key shallower than its siblings
            "spec:\n  types:\n    Master:\n      count: 1\n     resources: {}\n",
            5,
            "indented 5 spaces, which lines up with no key above it (line 4 is indented 6)",
        ),
        ('spec:\n  command: "python train.py\n  image: x\n', 2, "a quote opened on this line is never closed"),
        ("spec:\n  command: 'python train.py\n  image: x\n", 2, "a quote opened on this line is never closed"),
        ("spec:\n  env: [a, b\n  image: x\n", 2, "this [ or { is never closed"),
        ("spec:\n  command: python -c print('a: b')\n", 2, "the value of 'command' holds ': '"),
        ("spec:\n  operator:pytorch\n  image: x\n", 2, "a key needs a space after its colon"),
        ("spec:\n  - a\n  b: c\n", 3, "a key beside the items of a list ('- ...')"),
    ],
    ids=[
        "tab", "tab after spaces", "deeper than a valued key", "deeper than its siblings",
        "shallower than its siblings", "double quote", "single quote", "bracket",
        "colon in a value", "no space after a colon", "key among list items",
    ],
)  # fmt: skip
def test_a_syntax_error_names_its_line_what_it_is_and_the_fix(yaml_text, line, words) -> None:
    with pytest.raises(ManifestError) as error:
        text.documents(yaml_text, "m.yaml")
    (problem,) = error.value.problems
    assert problem.line == line, problem
    assert problem.message.startswith(f"invalid YAML: {words}"), problem.message
    assert problem.message.endswith(")")  # (YAML's own words last, for a search)


@settings(max_examples=400, deadline=None)
@given(st.text(alphabet=" \t:-'\"[]{}#,|>&*!?\nab1", max_size=60))
def test_any_text_is_read_or_refused_in_one_clean_line(yaml_text: str) -> None:
    try:
        text.documents(yaml_text, "m.yaml")
    except ManifestError as error:
        assert all(p.message and "\n" not in p.message for p in error.problems)
