rule run:
    """output.json of one attempt: the harness's answer, status, usage and timings."""
    input:
        prepared=f"{ATTEMPT}/prepared.json",
    output:
        f"{ATTEMPT}/output.json",
    log:
        f"{ATTEMPT}/run.log",
    params:
        **EVAL.params("run"),
    resources:
        # task_concurrency, environment_<id> and model_endpoint_<slug>: caps (agentcompass.pipeline.resources)
        **EVAL.resources.attempt_job("run"),
    run:
        EVAL.build(rule, wildcards, input, output, params, threads, resources, log)
