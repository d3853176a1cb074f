rule run:
    """output.json of one attempt: the harness's answer, status, usage and timings."""
    input:
        tasks=f"{RUN}/tasks.json",
        plan=f"{ATTEMPT}/plan.json",
        prepared=f"{ATTEMPT}/prepared.json",
    output:
        f"{ATTEMPT}/output.json",
    log:
        f"{ATTEMPT}/logs/run.log",
    params:
        model=EVAL.run_param,
    run:
        EVAL.run(wildcards, input, output, log)
