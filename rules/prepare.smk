# Per-attempt rules read their own slice of tasks.json and plans.json, and depend on
# it through params (fingerprints of exactly what the stage reads), not through the
# files: rewriting plans.json reruns only the attempts whose slice changed. Attempt
# jobs exist only once both files are written (EVAL.targets.attempt_paths), so they always
# run after them.


rule prepare:
    """prepared.json of one attempt: the harness-facing input."""
    input:
        # its task's preflight file, with execution.preflight on; nothing otherwise
        unpack(EVAL.targets.inputs_of("prepare")),
    output:
        f"{ATTEMPT}/prepared.json",
    log:
        f"{ATTEMPT}/prepare.log",
    params:
        **EVAL.params("prepare"),
    resources:
        **EVAL.resources.attempt_job("prepare"),
    run:
        EVAL.build(rule, wildcards, input, output, params, threads, resources, log)
