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
    resources:
        # model_endpoint_<slug>: one per endpoint, for a profile to cap (README, Models)
        **EVAL.model_endpoint_resources(),
    run:
        EVAL.run(wildcards, input, output, log)
