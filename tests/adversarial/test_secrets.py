"""Secrets are scrubbed as values, from every file, whatever their characters.

The real workflow runs with an API key whose value is ``null``, ``true``,
``a"b\\c`` or a unicode string (a key sent for real to a scripted endpoint on
127.0.0.1, which echoes it back in its reply, as a provider's error would),
and task folders that turn secrets against the run: a verifier that writes its
``[verifier] env`` secret into reward.txt and its stdout and stderr, and a
``solve.sh`` that prints its ``[solution] env`` secret. Afterwards every file
under results/ and .snakemake/ parses (JSON and JSON lines) and holds none of
the values, in any form: raw, JSON-escaped, ASCII-escaped or repr.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import yaml

from agentcompass import secrets as secret_refs
from agentcompass.testing.endpoint import ScriptedEndpoint, completion
from conftest import clean_env, regular_files, snakemake
from environments.envkit import TEST_IMAGE, require_docker

KEYS = {"null": "null", "true": "true", "quotes": 'a"b\\c', "unicode": "clé-ключ-🔑\u2028"}
# a string of any file is checked for these substrings; the two JSON words only as whole strings
WORDS = ("null", "true")


def forms(value: str) -> set[str]:
    return {value, json.dumps(value)[1:-1], json.dumps(value, ensure_ascii=False)[1:-1], repr(value)[1:-1]}


def strings(value, found: list[str]) -> list[str]:
    if isinstance(value, str):
        found.append(value)
    elif isinstance(value, dict):
        for k, v in value.items():
            strings(k, found), strings(v, found)
    elif isinstance(value, list):
        for v in value:
            strings(v, found)
    return found


def leaks(roots: list[Path], secrets: dict[str, str]) -> tuple[list[str], int]:
    """Every (file, secret) where a secret is found, and how many files were read.

    A JSON or JSON-lines file must parse, and none of its strings (mapping keys
    too) may hold a secret; any other file must hold none of a secret's forms.
    The values ``null`` and ``true`` are JSON's own words: in JSON they are
    looked for as strings, in other files as quoted strings (a JSON string of
    the report's data, a repr).
    """
    found, scanned = [], 0
    for root in roots:
        for path in sorted(regular_files(root)):
            scanned += 1
            data = path.read_bytes()
            parsed: list | None = None
            if path.suffix == ".json":
                parsed = [json.loads(data)]  # raises: a results file that is not JSON
            elif path.suffix == ".jsonl":
                parsed = [json.loads(line) for line in data.decode().splitlines() if line.strip()]
            for name, value in secrets.items():
                if parsed is not None:
                    texts = strings(parsed, [])
                    hit = any(t == value for t in texts) if value in WORDS else any(value in t for t in texts)
                    # and the bytes: a form a JSON parser would not show (an escape inside a string)
                    hit = hit or (value not in WORDS and any(f.encode() in data for f in forms(value)))
                elif value in WORDS:
                    hit = any(q.encode() in data for q in (f'"{value}"', f"'{value}'"))
                else:
                    hit = any(f.encode() in data for f in forms(value))
                if hit:
                    found.append(f"{path}: {name}")
    return found, scanned


def task_folder(folder: Path, instruction: str, toml: str, test: str, solve: str) -> None:
    """A task folder in the test image: its instruction, task.toml, tests/test.sh and solution/solve.sh."""
    for sub in ("environment", "tests", "solution"):
        (folder / sub).mkdir(parents=True)
    (folder / "instruction.md").write_text(instruction)
    (folder / "environment" / "Dockerfile").write_text(f"FROM {TEST_IMAGE}\nWORKDIR /app\n")
    (folder / "task.toml").write_text(toml)
    (folder / "tests" / "test.sh").write_text(test)
    (folder / "solution" / "solve.sh").write_text(solve)


def write_tasks(root: Path, solution_sha: str) -> Path:
    tasks = root / "tasks"
    # the verifier hands its secret back every way it can: reward.txt, stdout, stderr
    task_folder(
        tasks / "echo-secret", "Say hello.\n",
        '[verifier]\ntimeout_sec = 60.0\n\n[verifier.env]\nV_SECRET = "${AC_ADV_VERIFIER}"\n',
        '#!/bin/sh\nmkdir -p /logs/verifier\nprintf "%s" "$V_SECRET" > /logs/verifier/reward.txt\n'
        'printf "verifier saw %s\\n" "$V_SECRET"\nprintf "verifier saw %s\\n" "$V_SECRET" >&2\nexit 3\n',
        "#!/bin/sh\ntrue\n",
    )
    # the solution's secret must reach solve.sh resolved: the verifier checks its digest
    task_folder(
        tasks / "solve-secret", "Write solution.sha.\n",
        '[verifier]\ntimeout_sec = 60.0\n\n[solution.env]\nS_SECRET = "${AC_ADV_SOLUTION}"\n',
        "#!/bin/sh\nmkdir -p /logs/verifier\n"
        f'if [ "$(cat solution.sha)" = "{solution_sha}" ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n',
        '#!/bin/sh\nprintf "%s" "$S_SECRET" | sha256sum | cut -c1-64 > solution.sha\n'
        'printf "solution has %s\\n" "$S_SECRET"\nprintf "solution has %s\\n" "$S_SECRET" >&2\n',
    )
    return tasks


def environment_of(provider: str) -> dict:
    if provider == "docker":
        require_docker()
        return {"id": "docker"}
    return {"id": "host_process"}


CASES = [(name, "host_process") for name in KEYS] + [("quotes", "docker"), ("true", "docker")]


@pytest.mark.parametrize("key_name,provider", CASES)
def test_no_secret_of_any_characters_reaches_a_file_and_every_file_parses(
        key_name: str, provider: str, workdir: Path, tmp_path: Path):
    key = KEYS[key_name]
    verifier_secret, solution_secret = f'{key}"ver\\ifier-ü', f"{key}'sol\\ution\n-é"
    values = {"AC_ADV_KEY": key, "AC_ADV_VERIFIER": verifier_secret, "AC_ADV_SOLUTION": solution_secret}
    tasks = write_tasks(tmp_path, hashlib.sha256(solution_secret.encode()).hexdigest())
    environment = environment_of(provider)
    with ScriptedEndpoint(lambda body: (200, completion(f"my key is {key} and {key}"))) as endpoint:
        model = {"id": "scripted", "base_url": endpoint.base_url, "api_key": "${AC_ADV_KEY}"}
        config = workdir / "secrets.yaml"
        config.write_text(yaml.safe_dump({"requests": {
            "chat-run": {"benchmark": {"id": "task_dir", "params": {"path": str(tasks), "task_env": ["AC_ADV_VERIFIER", "AC_ADV_SOLUTION"]}},
                         "harness": {"id": "chat", "params": {"max_model_retries": 0}},
                         "model": model, "environment": environment},
            "oracle-run": {"benchmark": {"id": "task_dir", "params": {"path": str(tasks), "task_env": ["AC_ADV_VERIFIER", "AC_ADV_SOLUTION"]}},
                           "harness": "oracle", "model": {"id": "none"}, "environment": environment},
        }}))
        done = snakemake(workdir, "--configfile", str(config), env=clean_env(**values))
    assert done.returncode == 0, done.stderr[-3000:]
    attempts = workdir / "results/default"
    echoed = json.loads((attempts / "chat-run/attempts/echo-secret/1/result.json").read_text())
    if key.isascii():
        # the key really travelled, and came back in the reply
        assert {r.headers["Authorization"] for r in endpoint.requests} == {f"Bearer {key}"}
        assert echoed["status"] == "eval_error" and "${AC_ADV_VERIFIER}" in echoed["error"], echoed
        assert "${AC_ADV_VERIFIER}" in echoed["metadata"]["verifier"]["stderr"]
        chat_output = json.loads((attempts / "chat-run/attempts/echo-secret/1/output.json").read_text())
        assert chat_output["answer"] == "my key is ${AC_ADV_KEY} and ${AC_ADV_KEY}"
        trajectory = (attempts / "chat-run/attempts/echo-secret/1/trajectory.jsonl").read_text()
        assert "${AC_ADV_KEY}" in trajectory
    else:
        # an HTTP header carries ASCII only: a clear error of the attempt, naming the variable, not the value
        assert endpoint.requests == []
        assert echoed["status"] == "run_error" and "model.api_key ${AC_ADV_KEY}" in echoed["error"], echoed
        assert "HTTP header cannot carry" in echoed["error"]
    solved = json.loads((attempts / "oracle-run/attempts/solve-secret/1/result.json").read_text())
    assert solved["status"] == "completed" and solved["score"] == 1.0, solved  # solve.sh saw the value
    oracle_log = (attempts / "oracle-run/attempts/solve-secret/1/oracle.txt").read_text()
    assert "solution has ${AC_ADV_SOLUTION}" in oracle_log
    found, scanned = leaks([workdir / "results", workdir / ".snakemake"], values)
    assert found == [] and scanned > 30
    for value in values.values():
        if value not in WORDS:
            assert value not in done.stdout + done.stderr


# --- the scrubber, on its own ------------------------------------------------------------

ODD = ["null", "true", "false", "1234", 'a"b\\c', "clé-ключ-🔑", "line\nbreak\ttab", "\u2028\u2029\x01\x7f", "${X}", "</script>"]


@pytest.mark.parametrize("value", ODD)
def test_any_value_is_scrubbed_as_a_value_and_the_json_stays_valid(value: str, monkeypatch):
    monkeypatch.setenv("AC_ADV_ODD", value)
    payload = {"a": value, value: [value, f"pre {value} post", {"k": value}], "n": None, "t": True, "num": 1234,
               "escaped": json.dumps({"key": value}), "repr": repr({"key": value})}
    scrubbed = secret_refs.Scrubber(["${AC_ADV_ODD}"], resolved=False).value(payload)
    text = json.dumps(scrubbed)
    assert json.loads(text) == scrubbed
    assert scrubbed["a"] == "${AC_ADV_ODD}" and scrubbed["${AC_ADV_ODD}"][0] == "${AC_ADV_ODD}"
    assert scrubbed["n"] is None and scrubbed["t"] is True and scrubbed["num"] == 1234  # JSON's own values stay
    assert scrubbed["${AC_ADV_ODD}"][1] == "pre ${AC_ADV_ODD} post"
    for string in strings(scrubbed, []):
        assert value not in string and all(f not in string for f in forms(value)), string


def test_a_value_shorter_than_four_characters_is_scrubbed_only_where_it_is_a_whole_string(monkeypatch):
    monkeypatch.setenv("AC_ADV_SHORT", "ab")
    scrubber = secret_refs.Scrubber(["${AC_ADV_SHORT}"], resolved=False)
    assert scrubber.value({"key": "ab", "text": "a cab"}) == {"key": "${AC_ADV_SHORT}", "text": "a cab"}


def test_json_lines_are_scrubbed_line_by_line_and_stay_json(monkeypatch):
    monkeypatch.setenv("AC_ADV_LINE", 'tr"ue\\')
    lines = [json.dumps({"reply": 'key tr"ue\\ here'}), json.dumps({"other": 1}), '{"cut": "tr\\"ue\\\\']
    scrubbed = secret_refs.Scrubber(["${AC_ADV_LINE}"], resolved=False).json_lines("\n".join(lines) + "\n").splitlines()
    assert json.loads(scrubbed[0]) == {"reply": "key ${AC_ADV_LINE} here"}
    assert scrubbed[1] == lines[1]  # an untouched line stays byte for byte
    assert scrubbed[2] == '{"cut": "${AC_ADV_LINE}'  # a line that is not JSON: its escaped form is scrubbed as text


def test_a_value_resolved_in_this_process_is_scrubbed_without_being_named(monkeypatch):
    from agentcompass.secrets import resolve_secret

    monkeypatch.setenv("AC_ADV_RESOLVED", "resolved-by-a-component")
    assert resolve_secret({"V": "${AC_ADV_RESOLVED}"}) == {"V": "resolved-by-a-component"}
    assert secret_refs.Scrubber().text("it was resolved-by-a-component") == "it was ${AC_ADV_RESOLVED}"


def test_a_failing_stage_logs_and_hands_snakemake_only_references(monkeypatch, tmp_path: Path):
    from agentcompass.pipeline.jobs import stage_log
    from agentcompass.runtime.models import RunRequest

    monkeypatch.setenv("AC_ADV_STAGE", 'st"age\\secret')
    req = RunRequest.from_dict({"benchmark": {"id": "b", "params": {"p": "${AC_ADV_STAGE}"}},
                                "harness": {"id": "none"}, "model": {"id": "none"}})
    log = tmp_path / "stage.log"
    with pytest.raises(RuntimeError) as raised:
        with stage_log([str(log)], "run", {"segment": "t"}, req):
            try:
                raise KeyError('st"age\\secret')
            except KeyError:
                raise RuntimeError('failed with st"age\\secret')
    assert str(raised.value) == "failed with ${AC_ADV_STAGE}"
    assert raised.value.__context__.args == ("${AC_ADV_STAGE}",)
    text = log.read_text()
    assert "${AC_ADV_STAGE}" in text and all(f not in text for f in forms('st"age\\secret'))
