# Per-attempt rules read the bulk files as ancient(): rewriting tasks.json or
# plans.json reruns an attempt only when its own task or plan slice changed,
# which the params (fingerprints of exactly what the stage reads) tell Snakemake.


rule prepare:
    """prepared.json of one attempt: the harness-facing input."""
    input:
        tasks=ancient(f"{RUN}/tasks.json"),
        plans=ancient(f"{RUN}/plans.json"),
    output:
        f"{ATTEMPT}/prepared.json",
    log:
        f"{ATTEMPT}/logs/prepare.log",
    params:
        depends=EVAL.prepare_param,
    run:
        EVAL.prepare(wildcards, input, output, log)
