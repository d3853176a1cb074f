rule metrics:
    """metrics.json: the request's MetricResult and counts by status."""
    input:
        results=EVAL.result_files,
    output:
        RUN + "/metrics.json",
    params:
        versions=EVAL.metrics_param,
    localrule: True
    run:
        EVAL.metrics(wildcards, input, output)
