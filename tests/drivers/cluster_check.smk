# A workflow of one cluster job that calls agentcompass.pipeline.cluster.check_shard_job
# the way the real workflow's shard rule should: from its input function, in the
# submitting Snakemake, before the job is submitted (tests/test_slurm.py).

from agentcompass.pipeline import cluster


localrules:
    all,


rule all:
    input:
        "done/0.txt",


rule shard:
    input:
        lambda w: cluster.check_shard_job(workflow, w) or [],
    output:
        "done/{shard}.txt",
    threads: 1
    shell:
        "echo ran > {output}"
