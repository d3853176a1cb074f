"""Which base images a Dockerfile starts from: the docker provider checks each is on the engine before a
build (the engine would try to pull a missing one)."""

from __future__ import annotations

import textwrap

import pytest

from agentcompass.environments.docker.images import base_images


@pytest.mark.parametrize(
    ("dockerfile", "build_args", "bases"),
    [
        ("FROM local/busybox:latest\nRUN true\n", {}, ["local/busybox:latest"]),
        # flags, stage names (any case), scratch, a stage built on another, the same image twice
        ("from --platform=linux/amd64 python:3.12 AS Build\nFROM build\nFROM scratch\nFROM python:3.12 as x\n",
         {}, ["python:3.12"]),
        # ARG defaults before the first FROM, overridden by build_args; ${VAR:-default} and ${VAR:+alt}
        ("ARG BASE=a/base:1 TAG\nFROM $BASE\nFROM other:${TAG:-latest}\nFROM x${TAG:+-$TAG}\n", {}, 
         ["a/base:1", "other:latest", "x"]),
        ("ARG BASE=a/base:1\nFROM ${BASE}\n", {"BASE": "given/base:2"}, ["given/base:2"]),
        # an ARG after the first FROM is the stage's, not the FROM lines'; a variable without a value is left out
        ("FROM a\nARG LATER=b\nFROM $LATER\nFROM ${UNSET}\n", {"LATER": "c"}, ["a"]),
        # comments, continued lines, and the escape directive
        ("# a comment\nFROM \\\n  # between\n  cont/inued:1 \\\n  AS s1\nFROM s1\n", {}, ["cont/inued:1"]),
        ("# escape=`\nFROM win/base `\n  AS w\n", {}, ["win/base"]),
    ],
)
def test_base_images_are_the_from_images_that_are_not_stages(dockerfile, build_args, bases):
    assert base_images(textwrap.dedent(dockerfile), build_args) == bases
