rule run:
    """output.json of one attempt: the harness's answer, status, usage and timings."""
    input:
        prepared=f"{ATTEMPT}/prepared.json",
    output:
        f"{ATTEMPT}/output.json",
    log:
        f"{ATTEMPT}/run.log",
    params:
        depends=EVAL.run_param,
    run:
        EVAL.run(wildcards, input, output, log)
