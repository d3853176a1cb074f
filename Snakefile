# agentcompass: a Model, a Benchmark, a Harness and an Environment, declared in
# YAML, built into result files. This file is a table of contents: the config is
# loaded and validated here, the stages are declared in agentcompass/stages.py, their
# rules live in rules/<stage>.smk, their bodies in agentcompass/pipeline/bodies/.
#
#   request.json -> tasks.json -> plans.json -> attempts/<task>/<n>/{plan,prepared,output,result}.json
#   -> metrics.json, run_info.json -> report/index.html

from agentcompass.pipeline.workflow import EvaluationWorkflow
from agentcompass.stages import STAGES

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


# One rule file per stage, in the stage table's order (agentcompass.stages).
for stage in STAGES:
    include: f"rules/{stage.name}.smk"


# The rules exist: their resource functions are told to Snakemake once, and modules, config
# and rules, which live until exit, are kept from the garbage collector.
EVAL.parsed()


onstart:
    EVAL.start()


onsuccess:
    EVAL.finish(ok=True)


onerror:
    EVAL.finish(ok=False)


# The same handlers when this Snakefile is a module of another (docs/install.md, Installed as a package).
EVAL.run_handlers_as_module(workflow)
