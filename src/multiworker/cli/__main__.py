"""``python -m multiworker.cli`` runs the command line."""

from multiworker.cli import main

main()
