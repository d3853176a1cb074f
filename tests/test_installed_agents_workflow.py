"""Every installed agent solves a task folder's task in a real workflow, on host_process and docker.

One Snakemake run of eight requests (claude_code, codex, opencode, qwen_code, each on host_process and on
docker) of task_dir's hello-file, its verifier checking the file the agent wrote, against one ScriptedEndpoint
on 127.0.0.1 that speaks each agent's own protocol (Anthropic's Messages for Claude Code, OpenAI's Responses for
Codex, chat completions for the others), streaming, with tool calls; each Model's ``protocol`` is its agent's,
so the gateway passes the calls through (test_installed_agents drives them through translation): each
attempt has reward 1 and the agent's final text as its answer, its usage is the gateway's
count of its calls, and the Model's key is in no file of the run and not in its output.
"""

from __future__ import annotations

import json
import secrets
import shutil
from pathlib import Path

import pytest

from agentcompass.benchmarks.task_dir import SHIPPED_TASKS
from agentcompass.environments.netns import network_isolation
from agentcompass.testing.endpoint import ALL_PROTOCOLS, ScriptedEndpoint
from conftest import clean_env, files_holding, snakemake
from test_atif_export import agent_steps, check_usage, exported
from test_installed_agents import FINAL, GLIBC_IMAGE, KEY_VARIABLE, shell_reply


def glibc_tasks(tmp_path: Path) -> Path:
    """task_dir's hello-file, its image one with glibc (and libstdc++: Node's) for the agents' programs."""
    tasks = tmp_path / "tasks"
    shutil.copytree(SHIPPED_TASKS / "hello-file", tasks / "hello-file")
    (tasks / "hello-file/environment/Dockerfile").write_text(f"FROM {GLIBC_IMAGE}\nWORKDIR /app\n")
    return tasks


AGENTS = {"claude_code": "claude-code", "codex": "codex", "opencode": "opencode", "qwen_code": "qwen-code"}
# the protocol each agent speaks: its Model's, so the gateway passes the calls through
PROTOCOL = {"claude_code": "anthropic", "codex": "openai_responses"}
PROVIDERS = ("host_process", "docker")


def test_every_installed_agent_solves_a_task_dir_task_on_both_providers(installed_agent, needs_docker, workdir: Path,
                                                                        tmp_path):
    for tool in AGENTS.values():
        installed_agent(tool)
    if not network_isolation()[0]:
        pytest.skip("host_process cannot isolate the agent's and the verifier's 'none' phases here")
    secret = "sk-agents-" + secrets.token_hex(16)
    command = "printf 'Hello, agentcompass!\\n' > hello.txt"
    tasks = glibc_tasks(tmp_path)  # the docker requests' image has glibc (and Node's libstdc++)
    with ScriptedEndpoint(shell_reply(command), protocols=ALL_PROTOCOLS) as endpoint:
        def model(agent: str) -> dict:
            protocol = PROTOCOL.get(agent, "openai_chat")
            # an anthropic Model's base_url is the host alone: its calls are /v1/messages under it
            base_url = endpoint.base_url.removesuffix("/v1") if protocol == "anthropic" else endpoint.base_url
            return {"id": "scripted-model", "base_url": base_url, "api_key": f"${{{KEY_VARIABLE}}}", "protocol": protocol}

        config = {"requests": {f"{agent}-{where}": {
            "benchmark": {"id": "task_dir", "params": {"path": str(tasks), "task_ids": ["hello-file"]}},
            "harness": {"id": agent, "params": {"max_turns": 4} if agent != "codex" else {}},
            "model": model(agent),
            "environment": {"id": where},
        } for agent in AGENTS for where in PROVIDERS}}
        path = workdir / "agents.yaml"
        path.write_text(json.dumps(config))
        done = snakemake(workdir, "--configfile", str(path), env=clean_env(**{KEY_VARIABLE: secret}))
    assert done.returncode == 0, done.stderr[-3000:]
    calls = 0
    for name in config["requests"]:
        attempt = workdir / f"results/default/{name}/attempts/hello-file/1"
        result = json.loads((attempt / "result.json").read_text())
        assert result["status"] == "completed", (name, result.get("error"))
        assert result["score"] == 1.0 and result["answer"] == FINAL, name
        lines = [json.loads(line) for line in (attempt / "trajectory.jsonl").read_text().splitlines()]
        forwarded = [r for r in lines if r["source"] == "gateway" and r.get("method") == "POST" and "status" in r
                     and r["status"] == 200]
        assert result["usage"]["calls"] == len(forwarded) >= 2, name
        ran = [r["arguments"] for r in lines if r.get("type") == "tool_result"]  # the shell call, as the agent ran it
        assert len(ran) == 1 and "hello.txt" in json.dumps(ran), name
        calls += result["usage"]["calls"]
    model_calls = [r for r in endpoint.requests if "/models" not in r.path]  # the POSTs: no model list
    assert calls == len(model_calls)
    # each in its own protocol, passed through, with the real key (Anthropic's as x-api-key)
    assert {r.protocol for r in model_calls} == {"anthropic", "openai_responses", "openai_chat"}
    for r in model_calls:
        sent = {name.lower(): value for name, value in r.headers.items()}
        assert sent.get("authorization") == f"Bearer {secret}" or sent.get("x-api-key") == secret
    holding, scanned = files_holding(secret, workdir / "results", workdir / ".snakemake")
    assert scanned > 50 and holding == []
    assert secret not in done.stdout + done.stderr
    # each agent's attempt exports as ATIF that Harbor's own models validate: its shell call a tool call with
    # its output, its tokens the attempt's
    runs = [workdir / f"results/default/{name}" for name in config["requests"]]
    documents = exported(workdir, tmp_path / "atif", *runs)
    assert len(documents) == len(runs)
    for name, document in documents.items():
        run_id = name.split("/")[1]
        called = [c for s in agent_steps(document) for c in s.get("tool_calls") or ()]
        assert called and "hello.txt" in json.dumps([c["arguments"] for c in called]), name
        check_usage(document, workdir / f"results/default/{run_id}/attempts/hello-file/1")
