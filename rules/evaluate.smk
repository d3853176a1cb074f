rule evaluate:
    """result.json of one attempt: the scored RunResult."""
    input:
        tasks=RUN + "/tasks.json",
        plan=ATTEMPT + "/plan.json",
        prepared=ATTEMPT + "/prepared.json",
        output=ATTEMPT + "/output.json",
    output:
        ATTEMPT + "/result.json",
    params:
        versions=EVAL.evaluate_param,
    run:
        EVAL.evaluate(wildcards, input, output)
