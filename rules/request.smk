rule request:
    """request.json: the complete, redacted RunRequest."""
    output:
        RUN + "/request.json",
    params:
        request=EVAL.request_param,
    localrule: True
    run:
        EVAL.write_request(wildcards, output)
