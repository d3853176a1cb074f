# Shared wiring: wildcard shapes, result paths and the checkpoint hand-off.
# Target lists, params, resources and the one entry point of every rule's run: block
# (EVAL.build) are parts of EVAL (agentcompass.pipeline.workflow).

from agentcompass import layout


wildcard_constraints:
    ns=r"[A-Za-z0-9][A-Za-z0-9._-]*",
    run_id=r"[A-Za-z0-9][A-Za-z0-9._-]*",
    task=r"[^/]+",
    attempt=r"[0-9]+",
    shard=r"[0-9]+",


# the results layout (agentcompass.layout): a request's run folder, an attempt's, a shard's
RUN = f"{RESULTS}/{layout.RUN_PATTERN}"
ATTEMPT = f"{RESULTS}/{layout.ATTEMPT_PATTERN}"
SHARD = f"{RESULTS}/{layout.SHARD_PATTERN}"
PREFLIGHT = f"{RESULTS}/{layout.PREFLIGHT_PATTERN}"

EVAL.bind(checkpoints, workflow)
