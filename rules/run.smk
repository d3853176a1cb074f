rule run:
    """output.json of one attempt: the harness's answer, status, usage and timings."""
    input:
        tasks=RUN + "/tasks.json",
        plan=ATTEMPT + "/plan.json",
        prepared=ATTEMPT + "/prepared.json",
    output:
        ATTEMPT + "/output.json",
    params:
        model=EVAL.run_param,
    run:
        EVAL.run(wildcards, input, output)
