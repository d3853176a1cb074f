rule evaluate:
    """result.json of one attempt (the scored RunResult) and the plan.json it used."""
    input:
        prepared=f"{ATTEMPT}/prepared.json",
        output=f"{ATTEMPT}/output.json",
    output:
        result=f"{ATTEMPT}/result.json",
        plan=f"{ATTEMPT}/plan.json",
    log:
        f"{ATTEMPT}/evaluate.log",
    params:
        **EVAL.params("evaluate"),
    resources:
        **EVAL.resources.attempt_job("evaluate"),
    run:
        EVAL.build(rule, wildcards, input, output, params, threads, resources, log)
