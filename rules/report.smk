rule report:
    """report/index.html (+ attempt.html, data/ and the charts beside it): the request's report,
    one folder that opens from file:// (agentcompass.report). The charts are report items of
    `snakemake --report`."""
    input:
        metrics=f"{RUN}/metrics.json",
        request=f"{RUN}/request.json",
        # what metrics.json was built from: every result.json, or a sharded request's shard records
        # (not its 10,000 attempt folders, which Snakemake would measure at every job selection)
        results=EVAL.targets.metrics_inputs,
    output:
        categories=report(f"{RUN}/report/categories.svg", caption="captions/categories.rst",
                          category="{run_id}", subcategory="{ns}", labels={"chart": "accuracy by category"}),
        scores=report(f"{RUN}/report/scores.svg", caption="captions/scores.rst",
                      category="{run_id}", subcategory="{ns}", labels={"chart": "score distribution"}),
        errors=report(f"{RUN}/report/errors.svg", caption="captions/errors.rst",
                      category="{run_id}", subcategory="{ns}", labels={"chart": "errors by kind"}),
        tokens=report(f"{RUN}/report/tokens.svg", caption="captions/tokens.rst",
                      category="{run_id}", subcategory="{ns}", labels={"chart": "tokens by category"}),
        index=f"{RUN}/report/index.html",
    log:
        f"{RUN}/logs/report.log",
    params:
        **EVAL.params("report"),
    localrule: True
    run:
        EVAL.build(rule, wildcards, input, output, params, threads, resources, log)
