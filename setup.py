"""The wheel carries the workflow: the clone's Snakefile, rules/, schemas/, configs/,
profiles/ and examples/ are copied into ``agentcompass/workflow/`` when the package is
built, so git keeps one copy of them (pyproject.toml holds everything else)."""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
# what the workflow reads at run time, as paths relative to the clone's top folder
WORKFLOW_FILES = ["Snakefile", "rules", "schemas", "configs", "profiles", "examples"]


class BuildPyWithWorkflow(build_py):
    def run(self) -> None:
        super().run()
        if self.editable_mode:
            return  # an editable install reads the clone's own files (agentcompass.PROJECT_ROOT)
        target = Path(self.build_lib) / "agentcompass" / "workflow"
        shutil.rmtree(target, ignore_errors=True)  # no file removed from the clone stays in a rebuilt wheel
        for name in WORKFLOW_FILES:
            source, dest = HERE / name, target / name
            if not source.exists():
                raise FileNotFoundError(f"{source}: the workflow file the package ships is missing")
            if source.is_dir():
                shutil.copytree(source, dest, dirs_exist_ok=True,
                                ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
            else:
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(source, dest)


setup(cmdclass={"build_py": BuildPyWithWorkflow})
