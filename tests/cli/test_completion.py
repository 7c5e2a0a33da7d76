"""Shell completion (click's): the documented commands print a script for bash, zsh and fish, and the script's
callback completes the lazily loaded commands and their options. The installed entry point is checked in
tests/packaging/test_wheel.py."""

from __future__ import annotations

import pytest

from tests.cli.conftest import rackctl

#: what each shell's script must hold for the shell to call rackctl back (click's templates)
MARKS = {
    "bash": "complete -o nosort -F _rackctl_completion rackctl",
    "zsh": "#compdef rackctl",
    "fish": "complete --no-files --command rackctl",
}


@pytest.mark.parametrize("shell", sorted(MARKS))
def test_each_shell_gets_its_script(shell: str) -> None:
    proc = rackctl(_RACKCTL_COMPLETE=f"{shell}_source")
    assert proc.returncode == 0, proc.stderr
    assert MARKS[shell] in proc.stdout and "_RACKCTL_COMPLETE" in proc.stdout


def test_the_callback_completes_commands_and_a_commands_options() -> None:
    words = rackctl(_RACKCTL_COMPLETE="bash_complete", COMP_WORDS="rackctl ru", COMP_CWORD="1")
    assert words.returncode == 0 and words.stdout.split() == ["plain,runs"], words.stdout + words.stderr
    options = rackctl(_RACKCTL_COMPLETE="bash_complete", COMP_WORDS="rackctl runs --la", COMP_CWORD="2")
    assert options.stdout.split() == ["plain,--last"], options.stdout + options.stderr
