checkpoint tasks:
    """tasks.json: the selected TaskSpecs, in the Benchmark's order."""
    output:
        f"{RUN}/tasks.json",
    log:
        f"{RUN}/logs/tasks.log",
    params:
        **EVAL.params("tasks"),
    localrule: True
    run:
        EVAL.build(rule, wildcards, input, output, params, threads, resources, log)
