"""Contract dataclasses of the runtime."""

from .codec import Contract, ContractError
from .orchestration import (
    OrchestratedRun,
    Orchestration,
    OrchestrationResult,
    RequestOutcome,
    ResolvedRuntimeOptions,
)
from .request import (
    BenchmarkSpec,
    EnvironmentSpec,
    ExecutionSpec,
    HarnessSpec,
    ModelSpec,
    NetworkPolicy,
    OutputSpec,
    RunMetadata,
    RunRequest,
    RunRuntimeSpec,
)
from .result import MetricResult, RunResult, TaskStatus
from .task import (
    BenchmarkPlan,
    ExecutionPlan,
    HarnessPlan,
    PreparedTask,
    TaskInput,
    TaskOutput,
    TaskSpec,
)

__all__ = [
    "BenchmarkPlan", "BenchmarkSpec", "Contract", "ContractError", "EnvironmentSpec",
    "ExecutionPlan", "ExecutionSpec", "HarnessPlan", "HarnessSpec", "MetricResult",
    "ModelSpec", "NetworkPolicy", "OrchestratedRun", "Orchestration", "OrchestrationResult",
    "OutputSpec", "PreparedTask", "RequestOutcome", "ResolvedRuntimeOptions", "RunMetadata",
    "RunRequest", "RunResult", "RunRuntimeSpec", "TaskInput", "TaskOutput", "TaskSpec",
    "TaskStatus",
]
