"""The ``rackctl`` command line. Each area registers its commands from its own module."""

from __future__ import annotations

import importlib

import click

from bootstrap import __version__

#: Modules that add commands to the root group; each exposes ``register(group)``.
COMMAND_MODULES = (
    "bootstrap.cli.inventory_cmds",
    "bootstrap.cli.run_cmds",
    "bootstrap.cli.doctor_cmd",
    "bootstrap.cli.bmc_cmds",
    "bootstrap.cli.lab_cmds",
    "bootstrap.cli.triton_cmds",
    "bootstrap.cli.size_cmd",
    "bootstrap.cli.image_cmds",
    "bootstrap.cli.provision_cmds",
)


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.version_option(__version__, prog_name="rackctl")
def cli() -> None:
    """rackctl: a rack of Dell PowerEdge servers from bare metal to serving LLMs.

    Exit codes: 0 ok, 1 something failed, 2 invalid input, 3 missing tool on this machine,
    4 stage not implemented yet, 130 interrupted.
    """


for _name in COMMAND_MODULES:
    importlib.import_module(_name).register(cli)


def main() -> None:
    """Console-script entry point."""
    cli(prog_name="rackctl")
