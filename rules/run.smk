rule run:
    """output.json of one attempt: the harness's answer, status, usage and timings."""
    input:
        tasks=ancient(f"{RUN}/tasks.json"),
        plans=ancient(f"{RUN}/plans.json"),
        prepared=f"{ATTEMPT}/prepared.json",
    output:
        f"{ATTEMPT}/output.json",
    log:
        f"{ATTEMPT}/logs/run.log",
    params:
        depends=EVAL.run_param,
    run:
        EVAL.run(wildcards, input, output, log)
