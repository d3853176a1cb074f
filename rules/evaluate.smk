rule evaluate:
    """result.json of one attempt: the scored RunResult."""
    input:
        tasks=f"{RUN}/tasks.json",
        plan=f"{ATTEMPT}/plan.json",
        prepared=f"{ATTEMPT}/prepared.json",
        output=f"{ATTEMPT}/output.json",
    output:
        f"{ATTEMPT}/result.json",
    log:
        f"{ATTEMPT}/logs/evaluate.log",
    params:
        versions=EVAL.evaluate_param,
    run:
        EVAL.evaluate(wildcards, input, output, log)
