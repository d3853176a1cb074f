"""The docker environment's images: the one a session runs (``_image``), built from a Dockerfile
once per process (``_build``) and only from base images already on the engine (``base_images``,
``_check_bases``): nothing is pulled.
"""

from __future__ import annotations

import hashlib
import re
import threading
from pathlib import Path

from agentcompass.runtime.base import ImageBuildError, ImageMissingError
from agentcompass.secrets import MissingSecretError, resolve_secret, scrub
from agentcompass._util.trees import confined

from .config import _NO_IMAGE, DockerConfig


_built: dict[tuple, str] = {}
_build_lock = threading.Lock()

def _image(client, config: DockerConfig) -> str:
    import docker

    if config.dockerfile:
        return _build(client, config, config.dockerfile)
    if not config.image:
        raise RuntimeError(f"docker environment: no image to run: {_NO_IMAGE}")
    try:
        client.images.get(config.image)
    except docker.errors.ImageNotFound:
        raise ImageMissingError(
            f"docker environment: image {config.image!r} is not on the engine, and nothing is pulled; "
            + (config.missing_image_hint or "build it first (docker build, or docker import of a root filesystem) "
               "or set `dockerfile`")
        ) from None
    return config.image

_VARIABLE = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)(?::([-+])([^}]*))?\}|([A-Za-z_][A-Za-z0-9_]*))")


def base_images(dockerfile: str, build_args: dict[str, str]) -> list[str]:
    """The images a Dockerfile's ``FROM`` lines start from: neither its own stages nor ``scratch``, with
    the ``ARG`` values declared before the first ``FROM`` (``build_args`` overriding their defaults) put
    in. A name that still holds a variable without a value is left out (the engine reports it)."""
    escape = "\\"
    if directive := re.match(r"\s*#\s*escape\s*=\s*(\S)", dockerfile):
        escape = directive.group(1)
    instructions, current = [], ""
    for line in dockerfile.splitlines():
        if line.lstrip().startswith("#"):
            continue  # a comment, also between continued lines
        if line.rstrip().endswith(escape):
            current += line.rstrip()[:-1] + " "
            continue
        instructions.append(current + line)
        current = ""
    instructions.append(current)
    args: dict[str, str | None] = {}
    stages: set[str] = set()
    bases: list[str] = []
    started = False

    def value(match: re.Match) -> str:
        name = match.group(1) or match.group(4)
        known = args.get(name)
        if match.group(2) == "-" and not known:
            return match.group(3)
        if match.group(2) == "+":
            return match.group(3) if known else ""
        if known is None:
            raise KeyError(name)
        return known

    for instruction in instructions:
        words = instruction.split()
        keyword = words[0].upper() if words else ""
        if keyword == "ARG" and not started:
            for word in words[1:]:
                name, given, default = word.partition("=")
                args[name] = build_args.get(name, default.strip("\"'") if given else None)
        elif keyword == "FROM":
            started = True
            named = [word for word in words[1:] if not word.startswith("--")]
            if not named:
                continue
            try:
                image = _VARIABLE.sub(value, named[0])
            except KeyError:
                image = ""
            if image and image.lower() not in stages and image != "scratch" and image not in bases:
                bases.append(image)
            if len(named) >= 3 and named[1].upper() == "AS":
                stages.add(named[2].lower())
    return bases


def _check_bases(client, config: DockerConfig, dockerfile: Path, buildargs: dict[str, str]) -> None:
    """Refuse a build whose base image is not on the engine (``ImageBuildError``, as every build that
    cannot succeed): the engine would try to pull it (Docker's builder and Podman's pull a missing
    ``FROM`` image whatever ``pull=False`` says)."""
    import docker

    for base in base_images(dockerfile.read_text(encoding="utf-8", errors="replace"), buildargs):
        try:
            client.images.get(base)
        except docker.errors.ImageNotFound:
            raise ImageBuildError(scrub(
                f"docker environment: {str(dockerfile)!r} starts FROM {base!r}, which is not on the engine, and "
                f"nothing is pulled; put it there first (`docker pull {base}` where a registry is reachable, "
                "`docker load` of a saved image or `docker import` of a root filesystem; `podman` the same), "
                "then run again",
                config.build_args.values(),
            )) from None
        except docker.errors.APIError:
            pass  # a name the engine cannot read: the build reports it


def _build(client, config: DockerConfig, path: str) -> str:
    import docker

    dockerfile = Path(path).resolve()
    if not dockerfile.is_file():
        raise RuntimeError(f"docker environment: dockerfile {str(dockerfile)!r} does not exist")
    context = Path(config.context).resolve() if config.context else dockerfile.parent
    digest = hashlib.sha256(f"{context}\0{dockerfile}\0{sorted(config.build_args.items())}".encode()).hexdigest()
    tag = config.image or f"agentcompass-built:{digest[:16]}"
    key = (client.api.base_url, str(context), str(dockerfile), tag, tuple(sorted(config.build_args.items())),
           dockerfile.stat().st_mtime_ns)
    with _build_lock:  # one build per Dockerfile and process, however many sessions open at once
        if key not in _built:
            # the client tars the context following its links to folders (and reads .dockerignore through
            # one): nothing of it may lead out of the context, nor be a FIFO or a device
            problem = confined(context, folder_links=False)
            if problem is not None:
                raise ImageBuildError(f"docker environment: build context {str(context)!r}: {problem}; a build "
                                      "context must hold what the build copies (replace the link by the file)")
            try:
                # the tag and key above hash the references; the values exist only for this call
                buildargs = resolve_secret(config.build_args)
            except MissingSecretError as exc:
                raise ImageBuildError(f"docker environment: build_args: {exc}") from None
            _check_bases(client, config, dockerfile, buildargs)
            try:
                image, _ = client.images.build(
                    path=str(context), dockerfile=str(dockerfile), tag=tag, buildargs=buildargs,
                    pull=False, rm=True, forcerm=True,
                )
            except docker.errors.BuildError as exc:
                log = "".join(str(line.get("stream") or line.get("error") or "") for line in exc.build_log)
                raise ImageBuildError(scrub(
                    f"docker environment: building {str(dockerfile)!r} failed: {exc.msg}\n{log[-2000:]}",
                    config.build_args.values(),
                )) from None
            except docker.errors.APIError as exc:
                # e.g. a Dockerfile the engine cannot parse
                raise ImageBuildError(scrub(
                    f"docker environment: the engine refused to build {str(dockerfile)!r}: {exc.explanation or exc}",
                    config.build_args.values(),
                )) from None
            _built[key] = image.id
        return _built[key]
