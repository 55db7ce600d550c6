"""Backends run a recorded job somewhere; ``base`` holds the contract and the registry
(``BACKENDS``, ``get_backend``), ``controller`` the restart loop shared by supervised backends, and
each backend is a folder of its own (``local``: processes on this machine, the default)."""
