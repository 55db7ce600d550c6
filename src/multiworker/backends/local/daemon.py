"""Entry point of a detached supervisor: ``python -m multiworker.backends.local.daemon JOB_ID``."""

from __future__ import annotations

import logging
import sys

from multiworker.backends.local.supervisor import EXIT_CODES, Supervisor
from multiworker.store import Store


def main(argv: list[str]) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    job_id = argv[0]
    state = Supervisor(Store(), job_id).run()
    return EXIT_CODES.get(state, 1)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
