rule shard:
    """shards/<k>/shard.json: one slice of a request of more than runtime.shard_size
    attempts, built by an inner Snakemake in this folder (agentcompass.pipeline.shards)."""
    input:
        # only the slice's files a --forcerun names (built by this run first)
        EVAL.shard_inputs,
    output:
        f"{RUN}/shards/{{shard}}/shard.json",
    log:
        # the inner Snakemake's own output: which jobs ran, and why any failed
        f"{RUN}/shards/{{shard}}/shard.log",
    params:
        depends=EVAL.shard_param,
        # bumped when a file of the slice was deleted or replaced since shard.json
        generation=EVAL.shard_generation,
    threads: EVAL.shard_threads()
    resources:
        **EVAL.shard_endpoint_resources(),
    run:
        EVAL.run_shard(wildcards, threads, resources, params, output, log)
