"""Write a small Harbor job folder through Harbor's own result models: the fixture tests/data/harbor_job/.

Run with a Python that has Harbor installed (Harbor needs Python >= 3.12; agentcompass never imports it):

    /work/harbor-venv/bin/python scripts/make_harbor_job.py tests/data/harbor_job

Harbor's oracle agent needs one of Harbor's environments (Docker, or a cloud sandbox) to run a real job,
and none runs on the machines the tests run on; so the trials are made as Harbor's Trial records them
(TrialConfig, TrialResult, AgentInfo, VerifierResult, AgentContext, TimingInfo, ExceptionInfo made from a
raised Harbor exception) and written as Harbor writes them: each trial's config.json and result.json with
``model_dump_json(indent=4)`` (harbor.trial.trial.Trial._init_result and _finalize), the job's config.json
the same way, and its result.json by Harbor's own ``Job._write_job_result`` after the stats, metrics and
pass@k Harbor's ``Job.run`` computes (JobStats.from_trial_results, the Mean metric, compute_pass_at_k_by_evals).

The trials: six trials of five example_exact_match task ids, one agent (terminus-2) with one model, fixed
ids and times so the folder is the same every time (but each trial's ``trial_uri``, Harbor's absolute path):
- capital-france twice: reward 1, then reward 0 (started later: attempt 2);
- capital-japan: reward 0;
- author-hamlet: rewards {"exact": 1, "format": 0.5} (no "reward" key: the mean, 0.75);
- largest-planet: an AgentTimeoutError, the verifier still ran (reward 0), as Harbor grades an agent timeout;
- water-formula: an EnvironmentStartTimeoutError, no agent run, no reward.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path
from types import SimpleNamespace
from uuid import UUID

from harbor.job import Job
from harbor.metrics.mean import Mean
from harbor.models.agent.context import AgentContext
from harbor.models.job.config import JobConfig
from harbor.models.job.result import JobResult, JobStats
from harbor.models.trial.config import AgentConfig, TaskConfig, TrialConfig
from harbor.models.trial.paths import TrialPaths
from harbor.models.trial.result import AgentInfo, ExceptionInfo, ModelInfo, TimingInfo, TrialResult
from harbor.models.verifier.result import VerifierResult
from harbor.trial.errors import AgentTimeoutError, EnvironmentStartTimeoutError
from harbor.utils.pass_at_k import compute_pass_at_k_by_evals

DATASET = "example_exact_match"
JOB_NAME = "harbor_job"
START = datetime(2026, 3, 23, 12, 0, 0, tzinfo=timezone.utc)
AGENT = AgentConfig(name="terminus-2", model_name="openai/gpt-4o-mini")
AGENT_INFO = AgentInfo(name="terminus-2", version="2.0.0", model_info=ModelInfo(name="gpt-4o-mini", provider="openai"))

# (trial name, task, minutes after START it started, rewards, exception, (input, output tokens, cost))
TRIALS = (
    ("capital-france__a1b2c3d", "capital-france", 0, {"reward": 1}, None, (812, 9, 0.000127)),
    ("capital-france__e4f5g6h", "capital-france", 5, {"reward": 0}, None, (790, 14, 0.000127)),
    ("capital-japan__i7j8k9l", "capital-japan", 1, {"reward": 0}, None, (801, 11, 0.000127)),
    ("author-hamlet__m1n2o3p", "author-hamlet", 2, {"exact": 1, "format": 0.5}, None, (845, 12, 0.000134)),
    ("largest-planet__q4r5s6t", "largest-planet", 3, {"reward": 0}, AgentTimeoutError, (15230, 2048, 0.003513)),
    ("water-formula__u7v8w9x", "water-formula", 4, None, EnvironmentStartTimeoutError, None),
)


def exception_info(kind: type[BaseException], at: datetime) -> ExceptionInfo:
    """The ExceptionInfo Harbor's Trial records for an exception raised in it (Trial._record_exception)."""
    message = {AgentTimeoutError: "Agent execution timed out after 600.0 seconds",
               EnvironmentStartTimeoutError: "Environment start timed out after 600.0 seconds"}[kind]
    try:
        raise kind(message)
    except kind as exc:
        info = ExceptionInfo.from_exception(exc)
    info.exception_traceback = f"Traceback (most recent call last):\n{kind.__name__}: {message}\n"  # no local paths
    info.occurred_at = at
    return info


def trial(job_dir: Path, index: int, name: str, task: str, minute: int, rewards, raised, usage) -> TrialResult:
    started = START + timedelta(minutes=minute)
    config = TrialConfig(task=TaskConfig(path=Path("tasks") / task, source=DATASET), trial_name=name,
                         trials_dir=job_dir, agent=AGENT)
    paths = TrialPaths(job_dir / name)
    paths.trial_dir.mkdir(parents=True)
    paths.mkdir()  # agent/, verifier/, artifacts/ (empty here: git keeps none of them)
    paths.log_path.write_text(f"trial {name} of {task}\n")  # Harbor's trial.log
    paths.config_path.write_text(config.model_dump_json(indent=4))  # as Trial._init_result writes it
    environment = TimingInfo(started_at=started, finished_at=started + timedelta(seconds=20))
    result = TrialResult(
        id=UUID(int=index + 1), task_name=task, trial_name=name, trial_uri=paths.trial_dir.resolve().as_uri(),
        task_id=config.task.get_task_id(), source=DATASET, task_checksum=f"{index:064x}", config=config,
        agent_info=AGENT_INFO, started_at=started, environment_setup=environment)
    if raised is EnvironmentStartTimeoutError:
        result.exception_info = exception_info(raised, environment.finished_at)
    else:
        agent_start = started + timedelta(seconds=25)
        agent_seconds = 600 if raised is AgentTimeoutError else 4 + index
        result.agent_setup = TimingInfo(started_at=environment.finished_at, finished_at=agent_start)
        result.agent_execution = TimingInfo(started_at=agent_start,
                                            finished_at=agent_start + timedelta(seconds=agent_seconds))
        result.agent_result = AgentContext(n_input_tokens=usage[0], n_cache_tokens=0, n_output_tokens=usage[1],
                                           cost_usd=usage[2])
        if raised is not None:
            result.exception_info = exception_info(raised, result.agent_execution.finished_at)
        verify_start = result.agent_execution.finished_at + timedelta(seconds=1)
        result.verifier = TimingInfo(started_at=verify_start, finished_at=verify_start + timedelta(seconds=2))
        result.verifier_result = VerifierResult(rewards=rewards)
    result.finished_at = started + timedelta(minutes=1) if raised is None else started + timedelta(minutes=11)
    paths.result_path.write_text(result.model_dump_json(indent=4))  # as Trial._finalize writes it
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="the job folder to write (replaced when it exists)")
    args = parser.parse_args(argv)
    job_dir: Path = args.out
    if job_dir.exists():
        shutil.rmtree(job_dir)
    job_dir.mkdir(parents=True)
    tasks = sorted({task for _, task, *_ in TRIALS})
    config = JobConfig(job_name=JOB_NAME, jobs_dir=job_dir.parent, agents=[AGENT],
                       tasks=[TaskConfig(path=Path("tasks") / task, source=DATASET) for task in tasks])
    (job_dir / "config.json").write_text(config.model_dump_json(indent=4))  # as Job.run writes it

    results = [trial(job_dir, index, *spec) for index, spec in enumerate(TRIALS)]

    # what Job.run computes once every trial is done, then writes with Job._write_job_result
    stats = JobStats.from_trial_results(results, n_total_trials=len(results))
    for key, evals in stats.evals.items():
        rewards = [r.verifier_result.rewards for r in results if r.reward_valid and r.verifier_result is not None
                   and JobStats.format_agent_evals_key(AGENT_INFO.name, "gpt-4o-mini", DATASET) == key]
        evals.metrics.append(Mean().compute(rewards))
    for key, pass_at_k in compute_pass_at_k_by_evals(results).items():
        stats.evals[key].pass_at_k = pass_at_k
    job_result = JobResult(id=UUID(int=100), started_at=START, updated_at=START + timedelta(minutes=20),
                           finished_at=START + timedelta(minutes=20), n_total_trials=len(results), stats=stats,
                           trial_results=results)
    writer = SimpleNamespace(_job_result=job_result, _job_result_path=job_dir / "result.json")
    Job._write_job_result(writer, exclude_trial_results=True)  # type: ignore[arg-type]
    print(f"wrote {job_dir}: {len(results)} trials", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
