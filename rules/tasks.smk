checkpoint tasks:
    """tasks.json: the selected TaskSpecs, in the Benchmark's order."""
    output:
        RUN + "/tasks.json",
    params:
        benchmark=EVAL.tasks_param,
    localrule: True
    run:
        EVAL.write_tasks(wildcards, output)
