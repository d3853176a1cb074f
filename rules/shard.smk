rule shard:
    """shards/<k>/shard.json: one slice of a request of more than runtime.shard_size
    attempts, built by an inner Snakemake in this folder (agentcompass.pipeline.shards)."""
    input:
        # only the slice's files a --forcerun names (built by this run first)
        EVAL.shards.inputs,
    output:
        f"{RUN}/shards/{{shard}}/shard.json",
    log:
        # the inner Snakemake's own output: which jobs ran, and why any failed
        f"{RUN}/shards/{{shard}}/shard.log",
    params:
        depends=EVAL.attempt_params.shard,
        # bumped when a file of the slice was deleted or replaced since shard.json
        generation=EVAL.shards.generation,
    threads: EVAL.shards.threads()
    resources:
        **EVAL.resources.shard_job(),
    run:
        EVAL.run_shard(wildcards, threads, resources, params, output, log)
