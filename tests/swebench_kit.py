"""A tiny SWE-bench-format instance set, built here with no registry: images, instances, patches.

The base image is made with ``docker import`` from files of this machine:
busybox (the shell and tools), bash, git and patch with the libraries they
load, this Python's interpreter and standard library, and pytest with its
dependencies from this virtual environment. It is named after a digest of
what went in, so it is built once and then found on the engine. Each
instance image adds a small git repository (a Python project with a bug) at
/testbed, at its base commit.

The instances are what swebench 5 reads: instance_id, repo, base_commit,
problem_statement, patch, test_patch, FAIL_TO_PASS, PASS_TO_PASS, version,
image, eval_script (written as SWE-bench's are, with its test-output
markers), log_parser (the package's ``parse_log_pytest``), eval_type.
"""

from __future__ import annotations

import glob
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
from pathlib import Path

BASE_REPOSITORY = "agentcompass-test/swebench-base"
INSTANCE_NAMESPACE = "agentcompass-test-swebench"
INSTANCE_TAG = "t1"
# the name the instances give their images (as the package's datasets do): the tests set
# image_namespace and image_tag to reach the ones built here
DATASET_NAMESPACE = "swebench"
# what pytest needs from this virtual environment
PY_PACKAGES = ("pytest", "_pytest", "pluggy", "iniconfig", "packaging", "pygments", "py.py")
_PY_SKIP = {"test", "idlelib", "tkinter", "turtledemo", "ensurepip", "site-packages", "lib2to3", "pydoc_data",
            "__pycache__", "config-3.11-x86_64-linux-gnu", "unittest/test"}
_GIT = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t",
        "GIT_AUTHOR_DATE": "2020-01-01T00:00:00Z", "GIT_COMMITTER_DATE": "2020-01-01T00:00:00Z"}


def _libraries(binary: str) -> list[str]:
    out = subprocess.run(["ldd", binary], capture_output=True, text=True).stdout  # none for a static one
    found = re.findall(r"(/\S+)", out)
    return sorted({p for p in found if os.path.exists(p)})


def _base_files() -> list[tuple[str, str]]:
    """(path on this machine, path in the image) of every file of the base image."""
    python = os.path.realpath(sys._base_executable)
    prefix = sys.base_prefix
    stdlib = sysconfig.get_paths(vars={"base": prefix, "platbase": prefix})["stdlib"]
    files = [("/bin/busybox", "/bin/busybox")]
    for tool in ("bash", "git", "patch"):
        path = shutil.which(tool)
        assert path, f"{tool} is needed on this machine to build the SWE-bench test image"
        files.append((os.path.realpath(path), f"/usr/bin/{tool}"))
    files.append((python, python))  # where it is here: it finds its standard library from there
    for binary in [path for path, _ in files]:
        files += [(lib, lib) for lib in _libraries(binary)]
    for root, dirs, names in os.walk(stdlib):
        rel = os.path.relpath(root, stdlib)
        dirs[:] = sorted(d for d in dirs if d not in _PY_SKIP and os.path.join(rel, d).lstrip("./") not in _PY_SKIP)
        for name in sorted(names):
            if not name.endswith((".pyc",)):
                files.append((os.path.join(root, name), os.path.join(stdlib, rel, name)))
    site = sysconfig.get_paths()["purelib"]  # this venv's: pytest and its dependencies
    target = os.path.join(stdlib, "site-packages")
    metadata = [os.path.basename(p) for name in PY_PACKAGES for p in glob.glob(os.path.join(site, f"{name}-*.dist-info"))]
    for package in [*PY_PACKAGES, *metadata]:  # pytest reads its plug-ins' versions from their metadata
        source = os.path.join(site, package)
        if os.path.isfile(source):
            files.append((source, os.path.join(target, package)))
        for root, dirs, names in os.walk(source):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            for name in sorted(names):
                files.append((os.path.join(root, name), os.path.join(target, package, os.path.relpath(root, source), name)))
    unique = {os.path.normpath(target): source for source, target in files}
    return sorted((source, target) for target, source in unique.items())


def _engine():
    import docker

    return docker.from_env(timeout=300)


def base_image() -> str:
    """The base image's name, built (once) from this machine's files."""
    import docker

    files = _base_files()
    digest = hashlib.sha256(json.dumps([(a, b, os.path.getsize(a)) for a, b in files]).encode()).hexdigest()[:16]
    name = f"{BASE_REPOSITORY}:{digest}"
    client = _engine()
    try:
        client.images.get(name)
        return name
    except docker.errors.ImageNotFound:
        pass
    applets = subprocess.run(["/bin/busybox", "--list"], capture_output=True, text=True, check=True).stdout.split()
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        made = set()

        def folder(path: str) -> None:
            parts = path.strip("/").split("/")
            for i in range(1, len(parts) + 1):
                sub = "/".join(parts[:i])
                if sub and sub not in made:
                    made.add(sub)
                    info = tarfile.TarInfo(sub)
                    info.type, info.mode = tarfile.DIRTYPE, 0o755
                    tar.addfile(info)

        for sub in ("tmp", "root", "etc", "bin", "usr/bin", "usr/local/bin"):
            folder(sub)
        for source, target in files:
            folder(os.path.dirname(target))
            info = tar.gettarinfo(os.path.realpath(source), target.lstrip("/"))  # a link's file, as a file
            info.uid = info.gid = 0
            info.uname = info.gname = "root"
            with open(os.path.realpath(source), "rb") as f:
                tar.addfile(info, f)
        links = [(f"bin/{a}", "busybox") for a in applets if a not in ("busybox", "bash")]
        python = os.path.realpath(sys._base_executable)
        links += [("usr/local/bin/python3", python), ("usr/local/bin/python", python), ("bin/bash", "/usr/bin/bash")]
        for path, target in links:
            info = tarfile.TarInfo(path)
            info.type, info.linkname = tarfile.SYMTYPE, target
            tar.addfile(info)
        passwd = b"root:x:0:0:root:/root:/bin/sh\n"
        info = tarfile.TarInfo("etc/passwd")
        info.size = len(passwd)
        tar.addfile(info, io.BytesIO(passwd))
    buffer.seek(0)
    with tempfile.NamedTemporaryFile(suffix=".tar") as archive:
        archive.write(buffer.getvalue())
        archive.flush()
        subprocess.run(
            ["docker", "import", "-c", "ENV PATH=/usr/local/bin:/usr/bin:/bin", "-c", "ENV HOME=/root",
             "-c", 'CMD ["sh"]', archive.name, name],
            check=True, capture_output=True,
        )
    for image in client.images.list(name=BASE_REPOSITORY):  # those of files this machine no longer has
        for tag in image.tags:
            if tag != name:
                client.images.remove(tag)
    return name


# --- the project and its instances -------------------------------------------------------

CALC = "def add(a, b):\n    return a - b\n\n\ndef mul(a, b):\n    return a * b\n"
TESTS = "from calc import add, mul\n\n\ndef test_mul():\n    assert mul(2, 3) == 6\n"


LEFTOVER_CONFTEST = """import os
import time

LOG = "/tmp/agentcompass-swebench/test_output.txt"
FAKE = ("+ : '>>>>> Start Test Output'\\nPASSED tests/test_calc.py::test_add\\n"
        "PASSED tests/test_calc.py::test_mul\\n+ : '>>>>> End Test Output'\\n")


def _script():
    pid = os.getppid()
    while pid > 1:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if f.read().split(b"\\0")[:1] == [b"/bin/bash"]:
                    return pid
            with open(f"/proc/{pid}/stat") as f:
                pid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            return None
    return None


def pytest_unconfigure(config):
    script = _script()
    if script is None or os.fork():
        return
    os.setsid()
    while True:
        try:
            os.kill(script, 0)
        except OSError:
            break
        time.sleep(0.02)
    while True:
        with open(LOG + ".x", "w") as f:
            f.write(FAKE)
        os.replace(LOG + ".x", LOG)
        time.sleep(0.02)
"""


def _git(repo: Path, *args: str, input: str | None = None) -> str:
    env = {**os.environ, **_GIT, "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1"}
    return subprocess.run(["git", *args], cwd=repo, env=env, check=True, capture_output=True, text=True,
                          input=input).stdout


def _diff(repo: Path, edit) -> str:
    """The diff that ``edit(repo)`` makes to the repository (left as it was)."""
    edit(repo)
    _git(repo, "add", "-A")
    diff = _git(repo, "diff", "--cached")
    _git(repo, "reset", "-q", "--hard")
    _git(repo, "clean", "-fdq")
    return diff


def _write(repo: Path, files: dict[str, str | None]) -> None:
    for name, text in files.items():
        path = repo / name
        if text is None:
            path.unlink()
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)


def eval_script(base: str, test_files: list[str], test_patch: str) -> str:
    files = " ".join(test_files)
    return "\n".join([
        "#!/bin/bash", "set -uxo pipefail", "cd /testbed", "git config --global --add safe.directory /testbed",
        "git status", f"git -c core.fileMode=false diff {base}", f"git checkout {base} {files}",
        "git apply -v - <<'EOF_114329324912'", test_patch.rstrip("\n"), "EOF_114329324912",
        ": '>>>>> Start Test Output'", f"python -m pytest -rA -p no:cacheprovider {files}",
        ": '>>>>> End Test Output'", f"git checkout {base} {files}", "",
    ])


def build_repo(folder: Path) -> tuple[str, dict]:
    """The project's repository at its base commit; its base commit and the instances' patches."""
    folder.mkdir(parents=True)
    _git(folder, "init", "-q", "-b", "main")
    _write(folder, {"calc.py": CALC, "tests/test_calc.py": TESTS, "tests/__init__.py": ""})
    _git(folder, "add", "-A")
    _git(folder, "commit", "-q", "-m", "calc")
    base = _git(folder, "rev-parse", "HEAD").strip()
    w = lambda files: (lambda repo: _write(repo, files))  # noqa: E731
    patches = {
        "add": {
            "patch": _diff(folder, w({"calc.py": CALC.replace("a - b", "a + b")})),
            "test_patch": _diff(folder, w({"tests/test_calc.py": TESTS + "\n\ndef test_add():\n    assert add(2, 3) == 5\n"})),
            "FAIL_TO_PASS": ["tests/test_calc.py::test_add"],
            "problem_statement": "add(2, 3) returns -1; it should return 5.",
            "test_files": ["tests/test_calc.py"],
        },
        "neg": {
            "patch": _diff(folder, w({"calc_extra.py": "def neg(x):\n    return -x\n"})),
            "test_patch": _diff(folder, w({"tests/test_extra.py": "from calc_extra import neg\n\n\ndef test_neg():\n    assert neg(4) == -4\n"})),
            "FAIL_TO_PASS": ["tests/test_extra.py::test_neg"],
            "problem_statement": "There is no neg(x) in a module calc_extra; add one that returns -x.",
            "test_files": ["tests/test_extra.py", "tests/test_calc.py"],
        },
    }
    bad = {
        "empty": "",
        "wrong": _diff(folder, w({"calc.py": CALC.replace("a - b", "a + b + 1")})),
        "delete-tests": _diff(folder, w({"tests/test_calc.py": None})),
        # pytest prints the test lines the log parser reads, then the runner exits before any test runs
        "exit-early": _diff(folder, w({"conftest.py": (
            "import os\n\n\ndef pytest_collection_finish(session):\n"
            "    session.config.pluginmanager.get_plugin('capturemanager').suspend_global_capture()\n"
            "    print('PASSED tests/test_calc.py::test_add')\n    print('PASSED tests/test_calc.py::test_mul', flush=True)\n"
            "    os._exit(3)\n")})),
    }
    bad["sleep"] = _diff(folder, w({"conftest.py": "import time\n\ntime.sleep(60)\n"}))
    # add stays wrong, and the tests leave a process that waits for the evaluation script to exit, then
    # writes a log of passing tests over the one it wrote
    bad["leftover"] = _diff(folder, w({"calc.py": CALC.replace("a - b", "a * b"), "conftest.py": LEFTOVER_CONFTEST}))
    return base, {"instances": patches, "bad": bad}


def instance(iid: str, base: str, spec: dict, image_id: str) -> dict:
    """A swebench 5 instance; its image named as the package's datasets name theirs."""
    return {
        "instance_id": iid, "repo": "demo/calc", "base_commit": base, "version": "0.1",
        "problem_statement": spec["problem_statement"], "hints_text": "", "created_at": "2020-01-01",
        "patch": spec["patch"], "test_patch": spec["test_patch"],
        "FAIL_TO_PASS": json.dumps(spec["FAIL_TO_PASS"]), "PASS_TO_PASS": json.dumps(["tests/test_calc.py::test_mul"]),
        "environment_setup_commit": base,
        "image": f"docker.io/{DATASET_NAMESPACE}/sweb.eval.x86_64.{image_id}:latest",
        "eval_script": eval_script(base, spec["test_files"], spec["test_patch"]),
        "log_parser": "parse_log_pytest", "eval_type": "pass_and_fail",
    }


def local_image(image_id: str) -> str:
    return f"{INSTANCE_NAMESPACE}/sweb.eval.x86_64.{image_id}:{INSTANCE_TAG}"


def build_instance_image(repo: Path, image_id: str) -> str:
    """``image_id``'s image: the base image with ``repo`` at /testbed (its WORKDIR)."""
    base = base_image()
    with tempfile.TemporaryDirectory() as context:
        shutil.copytree(repo, Path(context) / "testbed", symlinks=True)
        (Path(context) / "Dockerfile").write_text(f"FROM {base}\nCOPY testbed /testbed\nWORKDIR /testbed\n")
        name = local_image(image_id)
        subprocess.run(["docker", "build", "-q", "-t", name, context], check=True, capture_output=True)
    return name
