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
    ModelPricing,
    ModelSpec,
    NetworkPolicy,
    OutputSpec,
    RunMetadata,
    RunRequest,
    RunRuntimeSpec,
)
from .result import FailureClass, MetricResult, MetricStats, MetricSummary, RunResult, Spread, TaskStatus
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
    "ExecutionPlan", "ExecutionSpec", "FailureClass", "HarnessPlan", "HarnessSpec", "MetricResult",
    "MetricStats", "MetricSummary", "ModelPricing", "ModelSpec", "NetworkPolicy", "OrchestratedRun", "Orchestration", "OrchestrationResult",
    "OutputSpec", "PreparedTask", "RequestOutcome", "ResolvedRuntimeOptions", "RunMetadata",
    "RunRequest", "RunResult", "RunRuntimeSpec", "TaskInput", "TaskOutput", "TaskSpec",
    "Spread", "TaskStatus",
]
