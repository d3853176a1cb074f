# agentcompass: a Model, a Benchmark, a Harness and an Environment, declared in
# YAML, built into result files. This file is a table of contents: the config is
# loaded and validated here, the stages live in rules/, the logic in agentcompass/.
#
#   request.json -> tasks.json -> plans.json -> attempts/<task>/<n>/{plan,prepared,output,result}.json
#   -> metrics.json, run_info.json -> report/index.html

from agentcompass.pipeline.workflow import EvaluationWorkflow

# Validates every config layer (configs/config.yaml, --configfile, --config)
# against schemas/config.schema.yaml and the registries; exits before any job.
EVAL = EvaluationWorkflow.from_snakemake(workflow)
RESULTS = EVAL.results_dir


include: "rules/common.smk"


# `snakemake --report report.html`: this text, then the charts of every request's report
report: "rules/captions/workflow.rst"


rule all:
    default_target: True
    input:
        EVAL.targets.all,


include: "rules/request.smk"
include: "rules/tasks.smk"
include: "rules/plans.smk"
include: "rules/prepare.smk"
include: "rules/run.smk"
include: "rules/evaluate.smk"
include: "rules/shard.smk"
include: "rules/metrics.smk"
include: "rules/report.smk"


# Modules, config and rules live until exit: the garbage collector need not scan them.
EVAL.freeze_heap()


onstart:
    EVAL.start()


onsuccess:
    EVAL.finish(ok=True)


onerror:
    EVAL.finish(ok=False)


# The same handlers when this Snakefile is a module of another (docs/install.md, Installed as a package).
EVAL.run_handlers_as_module(workflow)
