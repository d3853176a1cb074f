"""Bad input gets a clear error, and what the project prints or exports of hostile data is neutralized.

A bad value of the command line, a config file, a referenced variable or a data
file stops the run before any job with one message naming the field or the
file: these cases call the command's ``main`` in this process, in a scratch
folder (tests/test_config_errors.py shows the real command printing such a
message). The other cases run the real CLI (and through it Snakemake) in a
scratch folder: a model reply that no UTF-8 file can hold is that attempt's
run_error; task ids, categories, error messages and model names holding
terminal escape sequences or spreadsheet formulas come out of every command
shown, never obeyed.
"""

from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path

import pytest

from agentcompass import cli
from agentcompass._util.jsonio import not_unicode
from agentcompass.testing.endpoint import Reply, ScriptedEndpoint, completion, malformed
from conftest import agentcompass

LONG = "a" * 300


def _dataset(folder: Path, rows: list[dict] | list[str], name: str = "data.jsonl") -> Path:
    path = folder / name
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows), encoding="utf-8")
    return path


def run_here(capsys, *argv: str) -> tuple[int, str]:
    """``agentcompass run *argv``, in this process: its exit status, and what it printed."""
    code = cli.main(["run", *argv])
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def _refused(done: tuple[int, str], *named: str) -> str:
    code, out = done
    assert code == 2, out
    assert "Traceback" not in out and "Error in rule" not in out, out
    for text in named:
        assert text in out, f"{text!r} not named in: {out}"
    return out


# --- 1. a clear error before any work ---------------------------------------------------------


CLI_CASES = {
    # a byte that is not UTF-8 on the command line reaches Python as \udcff
    "benchmark-param-value-not-utf8": (["example_exact_match", "oracle", "none", "-b", "prompt_template=\udcff {question}"],
                                       ["benchmark.params.prompt_template", "not valid Unicode", "Fix:"]),
    "harness-param-key-not-utf8": (["example_exact_match", "oracle", "none", "-H", "\udcff=1"],
                                   ["harness.params.\\udcff", "not valid Unicode"]),
    "model-id-not-utf8": (["example_exact_match", "oracle", "n\udcffne"], ["model.id", "not valid Unicode"]),
    "results-dir-not-utf8": (["example_exact_match", "oracle", "none", "--results-dir", "r\udcff"],
                             ["runtime.results_dir", "not valid Unicode"]),
    "run-id-300-characters": (["example_exact_match", "oracle", "none", "--run-id", LONG],
                              ["output.run_id", "300 characters", "240"]),
    "namespace-300-characters": (["example_exact_match", "oracle", "none", "--namespace", LONG],
                                 ["output.namespace", "300 characters", "240"]),
    "base-url-port-out-of-range": (["example_exact_match", "chat", "m", "--base-url", "http://127.0.0.1:99999/v1"],
                                   ["model.base_url", "http://127.0.0.1:99999/v1", "Port out of range", "1 to 65535"]),
    "base-url-port-not-a-number": (["example_exact_match", "chat", "m", "--base-url", "http://127.0.0.1:x/v1"],
                                   ["model.base_url", "Port could not be cast"]),
    "base-url-broken-ipv6": (["example_exact_match", "chat", "m", "--base-url", "http://[::1/v1"],
                             ["model.base_url", "Invalid IPv6"]),
    "base-url-port-0": (["example_exact_match", "chat", "m", "--base-url", "http://127.0.0.1:0/v1"],
                        ["model.base_url", "port must be 1 to 65535"]),
    "base-url-literal-password": (["example_exact_match", "chat", "m", "--base-url", "http://me:hunter2pw@127.0.0.1:9/v1"],
                                  ["model.base_url", "holds a password of its own", "user:${VAR}@host"]),
    "model-param-nan": (["example_exact_match", "chat", "m", "--base-url", "http://127.0.0.1:9/v1", "-m", "temperature=.nan"],
                        ["model.params.temperature", "finite number"]),
    "model-param-yaml-date": (["example_exact_match", "chat", "m", "--base-url", "http://127.0.0.1:9/v1", "-m", "stop=2024-01-01"],
                              ["model.params.stop", "date", "quote it"]),
}


@pytest.mark.parametrize("case", sorted(CLI_CASES))
def test_a_bad_command_line_value_is_refused_naming_its_field_before_any_work(here, capsys, case):
    argv, named = CLI_CASES[case]
    out = _refused(run_here(capsys, *argv), "invalid run config", "the command line", *named)
    assert "hunter2pw" not in out  # a password is never shown back
    assert not (here / "results").exists() and not (here / "r\udcff").exists()


def test_a_referenced_variable_is_checked_resolved_and_never_shown(here, capsys, monkeypatch):
    # the port comes from a variable: checked with it resolved, and the value stays unshown
    monkeypatch.setenv("MODEL_HOST", "127.0.0.1:70000")
    monkeypatch.setenv("NOT_UTF8", "k\udcffey")
    out = _refused(run_here(capsys, "example_exact_match", "chat", "m", "--base-url", "http://${MODEL_HOST}/v1"),
                   "model.base_url", "http://${MODEL_HOST}/v1", "Port out of range")
    assert "70000" not in out
    out = _refused(run_here(capsys, "example_exact_match", "chat", "m", "--base-url", "http://127.0.0.1:9/v1",
                            "--api-key-env", "NOT_UTF8"), "NOT_UTF8", "not UTF-8", "model.api_key")
    assert "key" not in out.replace("api_key", "")
    assert not (here / "results").exists()


def test_a_config_file_with_a_lone_surrogate_escape_is_refused_naming_file_and_field(here, capsys):
    (here / "c.yaml").write_text('requests:\n  r:\n    benchmark: example_exact_match\n    harness: oracle\n'
                                 '    model: {id: "x\\ud800"}\n', encoding="utf-8")
    _refused(run_here(capsys, "-c", "c.yaml"), "c.yaml", "requests.r.model.id", "surrogate")
    (here / "c\udcff.yaml").write_text("requests: {}\n")
    _refused(run_here(capsys, "-c", "c\udcff.yaml"), "c\\udcff.yaml", "not UTF-8", "rename")
    assert not (here / "results").exists()


@pytest.mark.parametrize("rows, named", [
    ([{"id": "a\ud800", "input": "q", "target": "x"}], ["data.jsonl:1", "'id'", "lone surrogate"]),
    ([{"id": "a", "input": "q", "target": "x"}, {"id": "b", "input": {"deep": ["q\udfff"]}, "target": "x"}],
     ["data.jsonl:2", "'input.deep.0'", "lone surrogate"]),
])
def test_a_jsonl_row_with_a_lone_surrogate_escape_names_file_line_and_field(here, capsys, rows, named):
    # json.dumps writes the lone surrogate as the escape \ud800, as a hostile data file would
    _dataset(here, rows)
    fields = "fields={id: id, input: input, target: target}"
    _refused(run_here(capsys, "dataset", "oracle", "none", "-b", "path=data.jsonl", "-b", fields), *named)
    assert not (here / "results").exists()


def test_a_data_file_that_is_not_utf8_names_file_and_line(here, capsys):
    (here / "data.csv").write_bytes(b"id,input,target\na,q,x\nb,\xff,x\n")
    _refused(run_here(capsys, "dataset", "oracle", "none", "-b", "path=data.csv"), "data.csv:3", "not UTF-8")
    assert not (here / "results").exists()  # refused before any job


def test_long_and_periodic_names_run_within_file_name_limits(workdir):
    # the longest run id and task segment allowed, and names ending in one repeated character,
    # which Snakemake alone takes for a rule feeding on itself
    task = "t" + "é" * 150 + "0" * 30
    _dataset(workdir, [{"id": task, "input": "q", "target": "x"}, {"id": "task-" + "0" * 25, "input": "q", "target": "y"}])
    run_id = "r" + "".join(f"{i:x}" for i in range(200))[:239]
    proc = agentcompass(workdir, "run", "dataset", "oracle", "none", "-b", "path=data.jsonl",
                        "-b", "fields={id: id, input: input, target: target}", "--run-id", run_id, "--namespace", "n" * 40)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "completed: 2 attempts; accuracy 1.0" in proc.stdout
    metrics = json.loads((workdir / "results" / ("n" * 40) / run_id / "metrics.json").read_text())
    assert metrics["summary"]["overall"]["attempts"] == 2
    # a long model id makes a request name that is cut, with a hash, to fit
    proc = agentcompass(workdir, "run", "example_exact_match", "fixed_answer", "m" * 300, "-b", "limit=1", "-n")
    name = json.loads(proc.stdout)[0]["name"]
    assert proc.returncode == 0 and len(name) <= 240 and re.search(r"-[0-9a-f]{12}$", name), proc.stdout


# --- 2. a model reply no file can hold: that attempt's run_error ---------------------------------


def _replies(body) -> object:
    prompt = body["messages"][-1]["content"]
    if "France" in prompt:
        return completion("Par\ud800is")  # sent as the JSON escape \ud800
    if "Japan" in prompt:
        return Reply(200, b'{"choices": [{"message": {"content": "Tok\\udc00yo"}}], "usage": "x"}')
    if "planet" in prompt:
        return malformed()  # not JSON: the model's (empty) answer, recorded as malformed
    if "water" in prompt:
        return {"choices": "wrong shape"}
    return completion("Shakespeare")


def _every_file_is_valid(results: Path) -> int:
    checked = 0
    for path in results.rglob("*"):
        if path.suffix in (".json", ".jsonl"):
            text = path.read_bytes().decode("utf-8")  # strict: no lone surrogate reached a file
            data = json.loads(text) if path.suffix == ".json" else [json.loads(x) for x in text.splitlines() if x.strip()]
            assert not_unicode(data) is None, path  # nor as a \\ud800 escape
            checked += 1
    return checked


def test_a_model_reply_with_a_lone_surrogate_is_that_attempts_run_error(workdir):
    with ScriptedEndpoint(reply=_replies) as endpoint:
        proc = agentcompass(workdir, "run", "example_exact_match", "chat", "scripted", "--base-url", endpoint.base_url,
                            "-H", "max_model_retries=0")
    out = proc.stdout + proc.stderr
    assert "Traceback" not in out and "Error in rule" not in out, out
    assert proc.returncode == 1, out  # attempts failed; the run itself completed
    run = workdir / "results" / "default" / "example_exact_match-chat-scripted"
    results = {json.loads(p.read_text())["task_id"]: json.loads(p.read_text())
               for p in run.glob("attempts/*/1/result.json")}
    for task in ("capital-france", "capital-japan"):
        assert results[task]["status"] == "run_error", results[task]
        assert "not valid Unicode" in results[task]["error"] and "lone surrogate" in results[task]["error"]
        assert results[task]["usage"]["calls"] == 1  # not retried, and what it cost is kept
    assert "choices[0].message.content" in results["capital-france"]["error"]
    assert results["capital-france"]["usage"]["prompt_tokens"] == 10
    # a reply that is not JSON, or JSON of the wrong shape, stays the model's empty answer, scored
    for task in ("largest-planet", "water-formula"):
        assert results[task]["status"] == "completed" and results[task]["correct"] is False, results[task]
    assert results["author-hamlet"]["correct"] is True
    assert _every_file_is_valid(run) > 10
    trajectory = (run / "attempts" / "capital-france" / "1" / "trajectory.jsonl").read_text(encoding="utf-8")
    assert "Par\ufffdis" in trajectory  # the reply kept as evidence, its surrogate replaced


# --- 3. hostile text in data: shown, never obeyed -------------------------------------------------

FORMULA = "=cmd|' /C calc'!A0"
HOSTILE = {
    "esc": "x\x1b[2J\x1b[31mred",
    "osc8": "\x1b]8;;http://127.0.0.1/\x1b\\link\x1b]8;;\x1b\\",
    "c1": "csi\x9b31m",
    "bidi": "abc\u202edcba",
    "bell": "ding\x07\rx",
}
RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


HOSTILE_RUN = ["dataset", "chat", "m\x1b[5m", "-b", "path=data.jsonl",
               "-b", "fields={id: id, input: input, target: target, category: category}", "-H", "max_model_retries=0"]


def _hostile_reply(right: bool):
    def reply(body):
        prompt = body["messages"][-1]["content"]
        if prompt.startswith("fail"):  # an error message holding raw escapes, from the endpoint
            return Reply(400, b"bad \x1b]8;;http://127.0.0.1/\x07click\x1b]8;;\x07 \xc2\x9b2J \x1b[2J")
        return completion(FORMULA if "formula" in prompt else "ok" if right else "no")
    return reply


def test_escape_sequences_and_formulas_in_data_are_shown_not_obeyed(workdir):
    rows = [{"id": task_id, "input": f"q {i}", "target": "ok", "category": task_id} for i, task_id in enumerate(HOSTILE.values())]
    rows += [{"id": FORMULA, "input": "formula", "target": "-1", "category": "@SUM(1+1)*cmd|' /C calc'!A0"},
             {"id": "@TAB", "input": "fail", "target": "ok", "category": "+1+1"},
             {"id": "-1", "input": "q", "target": "ok", "category": "-1.5"}]
    _dataset(workdir, rows)
    runs = []
    for run_id, right in (("a", True), ("b", False)):
        with ScriptedEndpoint(reply=_hostile_reply(right)) as endpoint:
            runs.append(agentcompass(workdir, "run", *HOSTILE_RUN, "--base-url", endpoint.base_url, "--run-id", run_id))
    a, b = workdir / "results" / "default" / "a", workdir / "results" / "default" / "b"
    export_file = workdir / "out.csv"
    outputs = {
        "run": runs[0],
        "status": agentcompass(workdir, "status", *HOSTILE_RUN, "--base-url", "http://127.0.0.1:9/v1", "--run-id", "a", "-v"),
        "compare": agentcompass(workdir, "compare", str(a), str(b)),
        "compare-json": agentcompass(workdir, "compare", str(a), str(b), "--json"),
        "export-csv": agentcompass(workdir, "export", str(a)),
        "export-jsonl": agentcompass(workdir, "export", str(a), "-f", "jsonl"),
        "export-file": agentcompass(workdir, "export", str(a), "-o", str(export_file)),
        "runs": agentcompass(workdir, "runs"),
        "runs-json": agentcompass(workdir, "runs", "--json"),
        "diff": agentcompass(workdir, "diff", str(a), str(b), "-v"),
    }
    for name, proc in outputs.items():
        out = proc.stdout + proc.stderr
        assert "Traceback" not in out, (name, out)
        assert proc.returncode in (0, 1), (name, out)
        # Snakemake's own log (the run's) names jobs by their percent-encoded folders; what
        # agentcompass printed is every line of the other commands, and the run's summary line
        shown = proc.stdout.splitlines()[-1:] if name == "run" else out.splitlines()
        for line in shown:
            assert not RAW.search(line), (name, line)
    # each shown with its escapes: task ids (flipped in compare), the error message, the model name
    assert "x\\x1b[2J\\x1b[31mred" in outputs["compare"].stdout and "abc\\u202edcba" in outputs["compare"].stdout
    assert "csi\\x9b31m" in outputs["compare"].stdout
    assert "bad \\x1b]8;;http://127.0.0.1/\\x07click" in outputs["status"].stdout and "\\x9b2J" in outputs["status"].stdout
    assert "m\\x1b[5m" in outputs["runs"].stdout and "m\\x1b[5m" in outputs["compare"].stdout
    assert "abc\\u202edcba" in outputs["export-csv"].stdout
    # JSON stays exact data: the same task ids come back
    exported = [json.loads(line) for line in outputs["export-jsonl"].stdout.splitlines()]
    assert {row["task_id"] for row in exported} == {r["id"] for r in rows}
    assert json.loads(outputs["compare-json"].stdout)["baseline"]["model"] == "m\x1b[5m"
    # CSV: no cell a spreadsheet would run as a formula; numbers stay numbers
    # the results_table analyzer's file, written from the same rows
    from agentcompass import results
    from agentcompass.analyzers.results_table import ResultsTableAnalyzer

    table_file = ResultsTableAnalyzer().analyze(None, results.load(a), workdir / "analysis")[0]
    for text in (outputs["export-csv"].stdout, export_file.read_text(encoding="utf-8"),
                 table_file.read_text(encoding="utf-8")):
        table = list(csv.DictReader(io.StringIO(text)))
        for row in table:
            for column, cell in row.items():
                if cell.startswith(("=", "+", "-", "@", "\t", "\r")):
                    assert re.fullmatch(r"[+-]?[0-9.]+", cell), (column, cell)
                assert not RAW.search(cell.replace("\n", "").replace("\t", "")), (column, cell)
        if table:
            ids = {row["task_id"] for row in table}
            assert "'" + FORMULA in ids and "'@TAB" in ids and "-1" in ids
            categories = {row["category"] for row in table}
            assert "'@SUM(1+1)*cmd|' /C calc'!A0" in categories and "'+1+1" in categories and "-1.5" in categories
            answered = next(row for row in table if row["task_id"] == "'" + FORMULA)
            assert float(answered["score"]) == 0.0
            errored = next(row for row in table if row["task_id"] == "'@TAB")
            assert errored["status"] == "run_error" and "\\x1b]8;;" in errored["error"]
