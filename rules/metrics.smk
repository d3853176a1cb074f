rule metrics:
    """metrics.json: the request's MetricResult and counts by status."""
    input:
        results=EVAL.result_files,
    output:
        f"{RUN}/metrics.json",
    log:
        f"{RUN}/logs/metrics.log",
    params:
        versions=EVAL.metrics_param,
    localrule: True
    run:
        EVAL.metrics(wildcards, input, output, log)
