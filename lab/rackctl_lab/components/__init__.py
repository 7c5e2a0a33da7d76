"""The lab's cluster components: Go programs built here from their modules at exact, pinned versions.

``pins`` is the one place their versions live; ``build`` turns a pin into a cached binary with ``go build``;
``cli`` is ``rackctl lab components``. Nothing is downloaded but Go modules, through the ``go`` command.
"""
