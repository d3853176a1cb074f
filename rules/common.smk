# Shared wiring: wildcard shapes, result paths and the checkpoint hand-off.
# Target lists, params, resources and stage calls are parts of EVAL (agentcompass.pipeline.workflow).


wildcard_constraints:
    ns=r"[A-Za-z0-9][A-Za-z0-9._-]*",
    run_id=r"[A-Za-z0-9][A-Za-z0-9._-]*",
    task=r"[^/]+",
    attempt=r"[0-9]+",
    shard=r"[0-9]+",


RUN = f"{RESULTS}/{{ns}}/{{run_id}}"
ATTEMPT = f"{RUN}/attempts/{{task}}/{{attempt}}"

EVAL.bind(checkpoints, workflow)
