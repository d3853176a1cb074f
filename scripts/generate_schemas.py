"""Regenerate schemas/<kind>.schema.json from the contract dataclasses."""

from agentcompass.pipeline.files import write_schemas

if __name__ == "__main__":
    for path in write_schemas():
        print(path)
