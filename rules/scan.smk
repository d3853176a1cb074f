rule scan:
    """scan.json of one attempt: what each selected transcript scanner found in it. Only with scanners."""
    input:
        result=f"{ATTEMPT}/result.json",
    output:
        f"{ATTEMPT}/scan.json",
    log:
        f"{ATTEMPT}/scan.log",
    params:
        **EVAL.params("scan"),
    run:
        EVAL.build(rule, wildcards, input, output, params, threads, resources, log)
