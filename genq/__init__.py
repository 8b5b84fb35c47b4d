"""genq: the user-facing side (the ``genq`` command; the Python client). Never imports torch."""
