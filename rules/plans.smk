checkpoint plans:
    """plans.json: every attempt's ExecutionPlan, in bulk (planning is cheap)."""
    input:
        tasks=f"{RUN}/tasks.json",
    output:
        f"{RUN}/plans.json",
    log:
        f"{RUN}/logs/plans.log",
    params:
        plan=EVAL.plans_param,
    localrule: True
    run:
        EVAL.write_plans(wildcards, input, output, log)


rule run_info:
    """run_info.json: provenance and the resolved_execution_plans audit view."""
    input:
        plans=f"{RUN}/plans.json",
    output:
        f"{RUN}/run_info.json",
    log:
        f"{RUN}/logs/run_info.log",
    params:
        record=EVAL.run_info_param,
    localrule: True
    run:
        EVAL.write_run_info(wildcards, input, output, log)
