rule preflight:
    """preflight/<task>.json: the task's reference solution run as the oracle harness runs it, in
    the task's environment and its evaluation environment (only with execution.preflight)."""
    output:
        f"{PREFLIGHT}/{{task}}.json",
    log:
        f"{PREFLIGHT}/{{task}}.log",
    params:
        **EVAL.params("preflight"),
    resources:
        **EVAL.resources.attempt_job("preflight"),
    run:
        EVAL.build(rule, wildcards, input, output, params, threads, resources, log)
