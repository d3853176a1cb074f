checkpoint plans:
    """plans.json: every attempt's ExecutionPlan, in bulk (planning is cheap), and
    run_info.json: provenance and the resolved_execution_plans audit view."""
    input:
        tasks=f"{RUN}/tasks.json",
    output:
        plans=f"{RUN}/plans.json",
        run_info=f"{RUN}/run_info.json",
    log:
        f"{RUN}/logs/plans.log",
    params:
        **EVAL.params("plans"),
    localrule: True
    run:
        EVAL.build(rule, wildcards, input, output, params, threads, resources, log)
