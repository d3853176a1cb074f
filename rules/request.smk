rule request:
    """request.json: the complete, redacted RunRequest."""
    output:
        f"{RUN}/request.json",
    log:
        f"{RUN}/logs/request.log",
    params:
        request=EVAL.params.request,
    localrule: True
    run:
        EVAL.write_request(wildcards, output, log)
