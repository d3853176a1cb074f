rule metrics:
    """metrics.json: the request's MetricResult and counts by status."""
    input:
        # every result.json, or the shard records of a sharded request
        results=EVAL.targets.metrics_inputs,
    output:
        f"{RUN}/metrics.json",
    log:
        f"{RUN}/logs/metrics.log",
    params:
        **EVAL.params("metrics"),
    localrule: True
    run:
        EVAL.build(rule, wildcards, input, output, params, threads, resources, log)
