"""`aichor-iac entrypoints`: what the images run whose containers give no command, read from
their registries (`aichor_iac.registry`, no image pulled), printed as the stack config's
`aichor:entrypoints` to add to it: a group restart then runs them again, and `run --local`
runs them."""

from __future__ import annotations

import argparse
import shlex

PLATFORM = "linux/amd64"


def entrypoint_options(sub: argparse.ArgumentParser) -> None:
    sub.add_argument(
        "--platform",
        default=PLATFORM,
        metavar="OS/ARCH",
        help=f"the image of an index to read (default {PLATFORM}: the nodes' platform)",
    )


def entrypoints(args: argparse.Namespace) -> int:
    """Each image's `IMAGE=COMMAND`, or exit 2 naming each image that cannot be read."""
    import yaml

    from .. import planning
    from ..problems import Problem
    from ..registry import RegistryError, image_config
    from .inputs import inputs_of
    from .report import print_json, print_problem

    inputs = inputs_of(args)
    wanted: dict[str, set[bool]] = {}
    for manifest in inputs.manifests:
        plan = planning.draft_plan(manifest, inputs.settings)
        for image, with_args in planning.commandless(manifest.spec, plan).items():
            wanted.setdefault(image, set()).update(with_args)
    told, problems = [], []
    for image, with_args in sorted(wanted.items()):
        try:
            config = image_config(image, args.platform)
            told.append(told_line(image, config.entrypoint, config.cmd, with_args))
        except (RegistryError, ValueError) as error:
            problems.append(Problem("", str(error)))
    if args.output == "json":
        print_json({"entrypoints": told, "problems": [p.message for p in problems]})
    elif told:
        print(f"# what the images of {inputs.path} run, read from their registries:")
        print("# add to the stack config (Pulumi.<stack>.yaml)")
        print(yaml.safe_dump({"config": {"aichor:entrypoints": told}}, width=1000), end="")
    elif not problems:
        print(f"# every container of {inputs.path} gives its command: nothing to read")
    for problem in problems:
        print_problem(problem, "aichor-iac entrypoints")
    return 2 if problems else 0


def told_line(
    image: str, entrypoint: tuple[str, ...], cmd: tuple[str, ...], args: set[bool]
) -> str:
    """`IMAGE=COMMAND` for the containers that run `image` (with args or not, `args`): its
    Entrypoint, then its Cmd where they give no args (args replace it)."""
    if len(args) > 1:
        raise ValueError(
            f"{image}: some containers give it args and others not: give each a command"
        )
    words = [*entrypoint] if True in args else [*entrypoint, *cmd]
    if not words:
        raise ValueError(
            f"{image} has no Entrypoint{'' if True in args else ' and no Cmd'}: give its "
            "containers a command"
        )
    return f"{image}={shlex.join(words)}"
