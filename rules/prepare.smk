rule prepare:
    """plan.json and prepared.json of one attempt: the harness-facing input."""
    input:
        tasks=f"{RUN}/tasks.json",
        plans=f"{RUN}/plans.json",
    output:
        plan=f"{ATTEMPT}/plan.json",
        prepared=f"{ATTEMPT}/prepared.json",
    log:
        f"{ATTEMPT}/logs/prepare.log",
    params:
        versions=EVAL.prepare_param,
    run:
        EVAL.prepare(wildcards, input, output, log)
