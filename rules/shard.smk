rule shard:
    """shards/<k>/shard.json: one slice of a request of more than runtime.shard_size
    attempts, built by an inner Snakemake in this folder (agentcompass.pipeline.shards)."""
    input:
        # only the slice's files a --forcerun names (built by this run first)
        EVAL.shards.inputs,
    output:
        f"{SHARD}/shard.json",
    log:
        # the inner Snakemake's own output: which jobs ran, and why any failed
        f"{SHARD}/shard.log",
    params:
        # what its attempts read, and a generation bumped when a file of the slice was deleted or
        # replaced since shard.json
        **EVAL.params("shard"),
    threads: EVAL.shards.threads()
    resources:
        **EVAL.resources.shard_job(),
    run:
        EVAL.build(rule, wildcards, input, output, params, threads, resources, log)
