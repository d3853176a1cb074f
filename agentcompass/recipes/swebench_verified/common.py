"""What Recipes share: a copy of the plan to adapt."""

from __future__ import annotations

from agentcompass.runtime import ExecutionPlan


def clone_execution_plan(plan: ExecutionPlan) -> ExecutionPlan:
    """A deep copy of ``plan`` that a Recipe may change and return (never the plan it was given).

    The copy shares nothing with ``plan``: Environment params, policies and
    subplans are copies, so the Planner's earlier plan (and the request it
    came from) stay as they were.
    """
    return plan.copy()
