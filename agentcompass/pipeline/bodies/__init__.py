"""The stages' bodies: a module per scope (``stages.Scope``), each holding the bodies of its stages.

- ``request``: request.json, tasks.json, plans.json and run_info.json;
- ``task``: a task's preflight (with ``execution.preflight``);
- ``attempt``: an attempt's prepare, run and evaluate (their sessions: ``pipeline.sessions``);
- ``shard``: one slice of a large request, built by an inner Snakemake;
- ``summary``: metrics.json and the report.

A body is a function of one argument, its job (the class its scope's row names: ``jobs.RequestJob``,
``TaskJob``, ``AttemptJob`` or ``ShardJob``), and writes the stage's files through ``job.write``.
The stage table's ``body`` column names it (``agentcompass.pipeline.bodies.<scope>:<function>``);
its rule calls it through ``jobs.Jobs.build``. A body can be tested without Snakemake: build its job
argument and call it.
"""
