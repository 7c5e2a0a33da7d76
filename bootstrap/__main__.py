"""``python -m bootstrap`` runs the rackctl CLI."""

from bootstrap.cli import main

main()
