"""SWE-bench: a diff over ``max_patch_bytes`` is measured in the session and refused before it is copied.

The agent's diff is written in its session; before this it was copied to the
host whole (up to the session's 1 GiB copy limit) and only then found too
large. Here ``after_run`` of the real Benchmark runs in a real session with a
git repository the agent changed: a diff past the limit is refused with its
size as the session measured it and never downloaded, while a small one is
copied and becomes the answer. The session is watched by a wrapper that
records each download it is asked for.
"""

from __future__ import annotations

import posixpath

import pytest

from agentcompass.benchmarks.swebench import PATCH_FILE, SwebenchBenchmark, SwebenchPlan
from agentcompass.runtime.models import RunResult
from environments.conftest import provider, sandboxed_provider  # noqa: F401 (fixtures)
from environments.envkit import Provider

LIMIT = 100_000
BIG = 3_000_000  # bytes of the file the agent adds: its diff is a little larger


class Watched:
    """A session, with the downloads it was asked for recorded."""

    def __init__(self, session) -> None:
        self._session = session
        self.downloads: list[str] = []

    def __getattr__(self, name: str):
        return getattr(self._session, name)

    async def download(self, remote, local) -> None:
        self.downloads.append(remote)
        await self._session.download(remote, local)


async def _repository(session) -> tuple[str, str]:
    """A git repository at its base commit in the session: its folder and that commit."""
    if not (await session.exec(["sh", "-c", "command -v git && command -v stat"])).ok:
        pytest.skip("the session's image has no git (the SWE-bench images have)")
    repo = posixpath.join(session.workdir, "repo")
    made = await session.exec(["sh", "-c", 'set -e; mkdir -p "$1"; cd "$1"; git init -q .; echo one > kept.txt; '
                               'git add -A; git -c user.name=t -c user.email=t@t commit -q -m base; git rev-parse HEAD',
                               "sh", repo])
    assert made.ok, made.stderr
    return repo, made.stdout.strip().splitlines()[-1]


def test_a_diff_over_max_patch_bytes_is_refused_before_it_is_copied(sandboxed_provider: Provider):  # noqa: F811
    benchmark = SwebenchBenchmark()

    async def body(session):
        repo, base = await _repository(session)
        plan = SwebenchPlan(instance_id="demo-1", workdir=repo, base_commit=base, max_patch_bytes=LIMIT)
        watched = Watched(session)
        # the agent leaves a 3 MB file: its diff is far over the limit
        wrote = await session.exec(["sh", "-c", f'yes "a line the agent wrote" | head -c {BIG} > "$1/big.txt"',
                                    "sh", repo])
        assert wrote.ok, wrote.stderr
        big = await benchmark.after_run(None, RunResult(task_id="demo-1", answer="done"), watched, None, plan)
        refused_downloads = list(watched.downloads)
        # the honest control: a small change is copied and is the answer
        await session.exec(["sh", "-c", 'rm "$1/big.txt"; echo two >> "$1/kept.txt"', "sh", repo])
        small = await benchmark.after_run(None, RunResult(task_id="demo-1", answer="done"), watched, None, plan)
        return big, refused_downloads, small, list(watched.downloads)

    big, refused_downloads, small, downloads = sandboxed_provider.run(body)
    patch = big.metadata["model_patch"]
    assert big.answer is None and refused_downloads == [], refused_downloads
    assert patch["bytes"] > BIG and "not copied" in patch["refused"] and "more than max_patch_bytes" in patch["refused"]
    assert big.metadata["harness_answer"] == "done"
    assert downloads == [PATCH_FILE]  # the small diff only
    assert small.answer is not None and "+two" in small.answer and "refused" not in small.metadata["model_patch"]
    assert small.metadata["model_patch"]["bytes"] == len(small.answer.encode())
