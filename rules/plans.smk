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
        plan=EVAL.params.plans,
        record=EVAL.params.run_info,
    localrule: True
    run:
        EVAL.write_plans(wildcards, input, output, log)
