"""task_segment (ids as path segments) and the canonical, atomic JSON writer."""

from __future__ import annotations

import json
import os

import pytest

from agentcompass._util.jsonio import canonical_json, read_json, write_json, write_text_atomic
from agentcompass.layout import MAX_SEGMENT_BYTES, attempt_dir, run_dir, task_segment


# --- task_segment -------------------------------------------------------------------


def test_task_segment_percent_encodes_slash():
    assert task_segment("HumanEval/0") == "HumanEval%2F0"


def test_task_segment_keeps_plain_ids():
    assert task_segment("capital-france_1.2") == "capital-france_1.2"


@pytest.mark.parametrize("task_id", [".", ".."])
def test_dot_ids_never_map_to_dot_segments(task_id):
    segment = task_segment(task_id)
    assert segment not in (".", "..")
    assert "/" not in segment


def test_dot_ids_map_to_distinct_segments():
    assert len({task_segment("."), task_segment(".."), task_segment("%2E"), task_segment("...")}) == 4


@pytest.mark.parametrize("task_id", ["a/b", "a\\b", "a b", "é", "\x00", "?#&", "../etc/passwd", "~"])
def test_segment_is_one_path_component(task_id):
    segment = task_segment(task_id)
    assert "/" not in segment
    assert "\x00" not in segment
    assert segment not in ("", ".", "..")


def test_long_id_is_cut_to_at_most_200_bytes():
    segment = task_segment("x" * 500)
    assert len(segment.encode()) <= MAX_SEGMENT_BYTES == 200
    assert segment.startswith("x" * 100)


@pytest.mark.parametrize("unit", ["x", "/", "é", "%", "日本", "a/"])
def test_long_ids_of_any_characters_fit_and_do_not_cut_escapes(unit):
    segment = task_segment(unit * 400)
    assert len(segment.encode()) <= 200
    head = segment.rsplit("~", 1)[0]
    # every '%' in the kept head starts a complete %XX escape
    for i, ch in enumerate(head):
        if ch == "%":
            assert len(head[i + 1:i + 3]) == 2
            int(head[i + 1:i + 3], 16)


def test_long_ids_with_the_same_prefix_map_to_different_segments():
    prefix = "p" * 450
    a, b = task_segment(prefix + "a"), task_segment(prefix + "b")
    assert a != b
    assert len(a.encode()) <= 200 and len(b.encode()) <= 200


def test_task_segment_is_deterministic():
    ids = ["HumanEval/0", "z" * 500, ".."]
    assert [task_segment(i) for i in ids] == [task_segment(i) for i in ids]


def test_short_and_long_ids_do_not_collide():
    long_id = "q" * 300
    assert task_segment(long_id) != task_segment("q" * 199)
    assert task_segment(long_id) != task_segment(long_id[:-1])


def test_attempt_dir_layout(tmp_path):
    assert run_dir(tmp_path, "ns", "r") == tmp_path / "ns" / "r"
    assert attempt_dir(tmp_path, "ns", "r", "HumanEval/0", 2) == tmp_path / "ns" / "r" / "attempts" / "HumanEval%2F0" / "2"


# --- JSON -------------------------------------------------------------------------


def test_write_json_sorts_keys_and_ends_with_newline(tmp_path):
    path = write_json(tmp_path / "out.json", {"b": 1, "a": {"z": 1, "y": [3, 1]}, "é": "ü"})
    text = path.read_text(encoding="utf-8")
    assert text.endswith("}\n")
    assert not text.endswith("\n\n")
    assert list(json.loads(text)) == ["a", "b", "é"]
    assert text.index('"y"') < text.index('"z"')
    assert "ü" in text  # UTF-8, not \u escapes
    assert read_json(path) == {"b": 1, "a": {"z": 1, "y": [3, 1]}, "é": "ü"}


def test_write_json_is_canonical_regardless_of_key_order(tmp_path):
    a = write_json(tmp_path / "a.json", {"x": 1, "y": {"p": 1, "q": 2}})
    b = write_json(tmp_path / "b.json", {"y": {"q": 2, "p": 1}, "x": 1})
    assert a.read_bytes() == b.read_bytes()
    assert a.read_text() == canonical_json({"y": {"q": 2, "p": 1}, "x": 1})


def test_canonical_json_rejects_nan():
    with pytest.raises(ValueError):
        canonical_json({"a": float("inf")})


def test_write_json_creates_parent_directories(tmp_path):
    path = write_json(tmp_path / "a" / "b" / "c.json", [1])
    assert read_json(path) == [1]


def test_write_json_leaves_no_temporary_files(tmp_path):
    write_json(tmp_path / "out.json", {"a": 1})
    write_json(tmp_path / "out.json", {"a": 2})
    assert os.listdir(tmp_path) == ["out.json"]
    assert read_json(tmp_path / "out.json") == {"a": 2}


def test_failed_serialization_keeps_previous_content(tmp_path):
    path = write_json(tmp_path / "out.json", {"a": 1})
    before = path.read_bytes()
    with pytest.raises(ValueError):
        write_json(path, {"a": float("nan")})
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == ["out.json"]


def test_failed_write_keeps_previous_content_and_removes_temporary(tmp_path):
    path = write_text_atomic(tmp_path / "out.txt", "old\n")

    # a lone surrogate cannot be encoded as UTF-8: the write fails after the temp file exists
    with pytest.raises(UnicodeEncodeError):
        write_text_atomic(path, "new" + "\ud800")
    assert path.read_text() == "old\n"
    assert os.listdir(tmp_path) == ["out.txt"]


def test_unserializable_value_raises_and_writes_nothing(tmp_path):
    with pytest.raises(TypeError):
        write_json(tmp_path / "out.json", {"a": object()})
    assert os.listdir(tmp_path) == []


# --- which writes are checked against their schema ---------------------------------


def test_per_attempt_files_are_checked_against_their_schema_when_asked_and_request_files_always(monkeypatch,
                                                                                               tmp_path):
    from agentcompass.pipeline.files import VALIDATE_WRITES_ENV, FileSchemaError, write_file

    bad = {"not": "what any file holds"}
    monkeypatch.delenv(VALIDATE_WRITES_ENV, raising=False)
    write_file("result", tmp_path / "result.json", bad)  # a run's own contracts checked themselves when made
    with pytest.raises(FileSchemaError, match="metrics.json would break"):
        write_file("metrics", tmp_path / "metrics.json", bad)
    monkeypatch.setenv(VALIDATE_WRITES_ENV, "1")  # as the test suite runs
    with pytest.raises(FileSchemaError, match="result.json would break"):
        write_file("result", tmp_path / "result2.json", bad)
    assert not (tmp_path / "metrics.json").exists() and not (tmp_path / "result2.json").exists()
