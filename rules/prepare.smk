rule prepare:
    """plan.json and prepared.json of one attempt: the harness-facing input."""
    input:
        tasks=RUN + "/tasks.json",
        plans=RUN + "/plans.json",
    output:
        plan=ATTEMPT + "/plan.json",
        prepared=ATTEMPT + "/prepared.json",
    params:
        versions=EVAL.prepare_param,
    run:
        EVAL.prepare(wildcards, input, output)
