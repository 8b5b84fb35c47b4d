"""genq's HTTP API. Imports only ``tasks/``: never torch, never ``worker/``."""

from api.app import create_app

__all__ = ["create_app"]
