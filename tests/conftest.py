"""Session-wide test setup."""

from __future__ import annotations

import signal


def pytest_configure() -> None:
    """Deliver Ctrl-C as Python does by default, however the test run was started.

    A shell starts background jobs with SIGINT ignored, and an ignored signal stays ignored in every child
    process: the tests that send a real SIGINT (to this process or to a ``rackctl`` subprocess) would then
    see nothing. Python installs its own handler only when SIGINT was not ignored at start.
    """
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
