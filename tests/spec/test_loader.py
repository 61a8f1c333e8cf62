"""Loading from text, files and directories: documents, positions, interpolation, guard rails."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlbench_tui.errors import SpecError
from mlbench_tui.spec.loader import collect_paths, collect_text, load_paths, load_text, validate_data

ROOT = Path(__file__).resolve().parents[2]

SPEC = """\
apiVersion: mlbench/v1
kind: Benchmark
metadata:
  name: {name}
spec:
  task: 1a
  workers: {workers}
"""


def issues_of(text: str, env: dict[str, str] | None = None) -> list[str]:
    _, issues = collect_text(text, "s.yaml", environ=env or {})
    return [i.render() for i in issues]


def test_example_specs_all_load() -> None:
    loaded = load_paths([ROOT / "specs"], environ={})
    assert {item.spec.metadata.name for item in loaded} >= {"quickstart", "smoke-kind"}
    assert {item.spec.spec.task for item in loaded} == {"0a", "1a", "1b", "2a", "3a", "4a", "4b"}
    for path in sorted((ROOT / "specs").glob("*.yaml")):
        assert path.read_text().startswith("# yaml-language-server: $schema=./mlbench.schema.json\n"), path


def test_multi_document_file_keeps_order_lines_and_text() -> None:
    text = "# header\n" + SPEC.format(name="one", workers=1) + "---\n" + SPEC.format(name="two", workers=2)
    first, second = load_text(text, "multi.yaml", environ={})
    assert (first.spec.metadata.name, first.document, first.line) == ("one", 0, 2)
    assert (second.spec.metadata.name, second.document, second.line) == ("two", 1, 10)
    assert first.text.startswith("# header\napiVersion") and "name: two" not in first.text
    assert second.text.startswith("apiVersion") and second.text.rstrip().endswith("workers: 2")


def test_empty_documents_between_markers_are_skipped() -> None:
    text = "---\n" + SPEC.format(name="one", workers=1) + "---\n---\n"
    assert [s.spec.metadata.name for s in load_text(text, environ={})] == ["one"]


def test_directory_walks_yaml_and_yml_skipping_hidden_and_other_files(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / ".git").mkdir()
    (tmp_path / "a" / "one.yaml").write_text(SPEC.format(name="one", workers=1))
    (tmp_path / "two.yml").write_text(SPEC.format(name="two", workers=2))
    (tmp_path / ".git" / "bad.yaml").write_text("not: [valid")
    (tmp_path / "mlbench.schema.json").write_text("{}")
    (tmp_path / "notes.txt").write_text("hello")
    names = [s.spec.metadata.name for s in load_paths([tmp_path], environ={})]
    assert names == ["one", "two"]


def test_duplicate_names_across_files_are_reported(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(SPEC.format(name="same", workers=1))
    (tmp_path / "b.yaml").write_text(SPEC.format(name="same", workers=2))
    _, issues = collect_paths([tmp_path], environ={})
    assert [i.render() for i in issues] == [
        f"{tmp_path / 'b.yaml'}:4:9: duplicate benchmark name 'same' (also at {tmp_path / 'a.yaml'}:4:9) "
        "(hint: give each spec a unique metadata.name; run names derive from it)"
    ]


def test_runs_sharing_a_name_across_files_name_both_places(tmp_path: Path) -> None:
    """'cmp' comparing frameworks names its runs cmp-pt-gloo-1w and cmp-tf-gloo-1w: the first is
    also the one run of a spec called 'cmp-pt'."""
    (tmp_path / "a.yaml").write_text(SPEC.format(name="cmp-pt", workers=1))
    comparing = SPEC.format(name="cmp", workers=1) + "  framework: [pytorch, tensorflow]\n"
    (tmp_path / "b.yaml").write_text(comparing)
    _, issues = collect_paths([tmp_path], environ={})
    assert [i.render() for i in issues] == [
        f"{tmp_path / 'b.yaml'}:4:9: run 'cmp-pt-gloo-1w' of this spec would share its name with a run of "
        f"spec 'cmp-pt' at {tmp_path / 'a.yaml'}:4:9 "
        "(hint: give each spec a unique metadata.name; run names derive from it)"
    ]


def test_missing_path_and_empty_directory_and_binary_file(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    (tmp_path / "bin.yaml").write_bytes(b"\xff\xfe\x00\x01")
    _, issues = collect_paths([tmp_path / "nope.yaml", tmp_path / "empty", tmp_path / "bin.yaml"], environ={})
    assert [i.message for i in issues] == [
        "no such file or directory",
        "no *.yaml or *.yml files in this directory",
        "not a UTF-8 text file",
    ]


def test_interpolation_types_defaults_and_escapes() -> None:
    text = SPEC.format(name="${NAME}", workers="${WORKERS}") + (
        '  env:\n    QUOTED: "${WORKERS}"\n    DEFAULTED: ${NOT_SET:-fallback}\n    DOLLAR: "$$HOME"\n'
        "  max_time: ${LIMIT:-10m}\n"
    )
    (loaded,) = load_text(text, environ={"NAME": "interp", "WORKERS": "4"})
    body = loaded.spec.spec
    assert loaded.spec.metadata.name == "interp"
    assert body.workers == [4]  # an unquoted ${VAR} takes the YAML type of its value
    assert body.env == {"QUOTED": "4", "DEFAULTED": "fallback", "DOLLAR": "$HOME"}
    assert body.max_time == 600


def test_unset_variables_are_located_and_not_repeated() -> None:
    text = SPEC.format(name="ok", workers="${WORKERS}") + "  seed: ${SEED}\n"
    assert issues_of(text) == [
        "s.yaml:7:12: spec.workers: environment variable 'WORKERS' is not set "
        "(hint: export WORKERS=... or write ${WORKERS:-default})",
        "s.yaml:8:9: spec.seed: environment variable 'SEED' is not set "
        "(hint: export SEED=... or write ${SEED:-default})",
    ]


def test_alias_bomb_and_recursive_alias_give_spec_errors() -> None:
    bomb = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, "
        f"*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}]\n"
        for i in range(6)
    )
    assert issues_of(bomb) == ["s.yaml:1:1: document too large or too deeply nested"]
    # a self-referencing alias must end in a located issue, never in infinite recursion
    assert issues_of(SPEC.format(name="r", workers=1) + "  env: &e\n    X: *e\n")
    assert issues_of(SPEC.format(name="r", workers="&w [*w]"))


def test_issues_are_sorted_and_all_reported() -> None:
    text = SPEC.format(name="Bad_Name", workers=0) + "  backend: glo\n  colour: red\n"
    got = issues_of(text)
    assert [g.split(": ")[0] for g in got] == ["s.yaml:4:9", "s.yaml:7:12", "s.yaml:8:12", "s.yaml:9:3"]


def test_validate_data_for_api_callers() -> None:
    spec = validate_data(
        {"apiVersion": "mlbench/v1", "kind": "Benchmark", "metadata": {"name": "x"}, "spec": {"task": "0a"}}
    )
    assert spec.spec.task == "0a"
    with pytest.raises(SpecError) as info:
        validate_data(
            {"apiVersion": "mlbench/v1", "kind": "Benchmark", "metadata": {"name": "x"}, "spec": {}}
        )
    assert info.value.render() == "<data>:1:1: missing required key 'task' in spec"


def test_load_never_leaks_non_spec_errors() -> None:
    for text in [
        "",
        "   \n",
        "[",
        "a: !!binary AAAA",
        "? [1, 2]\n: 3",
        "2020-01-01",
        "a: b: c",
        "\x00",
        "%YAML 9.9\n---\na: 1",
    ]:
        with pytest.raises(SpecError):
            load_text(text, environ={})


def test_a_file_named_twice_is_loaded_once(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(SPEC.format(name="one", workers=1))
    loaded = load_paths([tmp_path, tmp_path / "a.yaml", tmp_path / "." / "a.yaml"], environ={})
    assert [s.spec.metadata.name for s in loaded] == ["one"]


def test_the_specs_readme_example_is_valid() -> None:
    readme = (ROOT / "specs" / "README.md").read_text()
    block = readme.split("```yaml\n", 1)[1].split("```", 1)[0]
    (loaded,) = load_text(block, "README.md", environ={})
    assert loaded.spec.metadata.name == "my-bench"


def test_a_trailing_double_slash_comment_gets_its_hint() -> None:
    text = "apiVersion: mlbench/v1\nkind: Benchmark\nmetadata:\n  name: x\nspec:\n  task: 1a\n"
    text += "  workers: 2 // two\n"
    _, issues = collect_text(text, "s.yaml")
    (issue,) = issues
    assert (issue.line, issue.col) == (7, 12) and "'2 // two'" in issue.message
    assert (
        issue.hint == "'//' starts no comment in YAML: it became part of the value; comments start with '#'"
    )


def test_a_broken_symlink_says_so_named_or_in_a_directory(tmp_path: Path) -> None:
    link = tmp_path / "specs" / "quickstart.yaml"
    link.parent.mkdir()
    link.symlink_to("../../mlbench_tui/spec/quickstart.yaml")  # copied without what it points to
    for path in (link, link.parent):
        _, issues = collect_paths([str(path)])
        (issue,) = issues
        assert (
            issue.message
            == "a broken symbolic link: its target ../../mlbench_tui/spec/quickstart.yaml does not exist"
        )
        assert issue.hint == "copy the file it points to (cp -L), or point the link at an existing spec"
