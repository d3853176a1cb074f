rule plans:
    """plans.json: every attempt's ExecutionPlan, in bulk (planning is cheap)."""
    input:
        tasks=RUN + "/tasks.json",
    output:
        RUN + "/plans.json",
    params:
        plan=EVAL.plans_param,
    localrule: True
    run:
        EVAL.write_plans(wildcards, input, output)


rule run_info:
    """run_info.json: provenance and the resolved_execution_plans audit view."""
    input:
        plans=RUN + "/plans.json",
    output:
        RUN + "/run_info.json",
    localrule: True
    run:
        EVAL.write_run_info(wildcards, input, output)
