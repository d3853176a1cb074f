rule request:
    """request.json: the complete, redacted RunRequest."""
    output:
        f"{RUN}/request.json",
    log:
        f"{RUN}/logs/request.log",
    params:
        **EVAL.params("request"),
    localrule: True
    run:
        EVAL.build(rule, wildcards, input, output, params, threads, resources, log)
