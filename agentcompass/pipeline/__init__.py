"""The file pipeline: request.json -> tasks.json -> plans -> prepared -> output -> result -> metrics."""
