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
    PreflightSpec,
    RunMetadata,
    RunRequest,
    RunRuntimeSpec,
    ScannerSpec,
)
from .scan import ScanEvidence, ScanFinding, ScanRecord
from .result import FailureClass, MetricResult, Quarantined, ScoredOn, MetricStats, MetricSummary, RunResult, Spread, TaskStatus
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
    "OutputSpec", "PreflightSpec", "ScanEvidence", "ScanFinding", "ScanRecord", "ScannerSpec", "PreparedTask", "RequestOutcome", "ResolvedRuntimeOptions", "RunMetadata",
    "Quarantined", "RunRequest", "RunResult", "RunRuntimeSpec", "ScoredOn", "TaskInput", "TaskOutput", "TaskSpec",
    "Spread", "TaskStatus",
]
