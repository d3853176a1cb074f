checkpoint tasks:
    """tasks.json: the selected TaskSpecs, in the Benchmark's order."""
    output:
        f"{RUN}/tasks.json",
    log:
        f"{RUN}/logs/tasks.log",
    params:
        benchmark=EVAL.params.tasks,
    localrule: True
    run:
        EVAL.write_tasks(wildcards, output, log)
