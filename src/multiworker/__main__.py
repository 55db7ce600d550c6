"""``python -m multiworker`` runs the command line."""

from multiworker.cli import main

main()
