"""The deployment's output store, built from its settings (the factory over the backends)."""

from __future__ import annotations

import redis

from tasks.constants import Keys
from tasks.outputs import OutputStore
from tasks.outputs_config import OutputStoreSpec
from tasks.settings import SharedSettings
from tasks.store.outputs_redis import RedisOutputStore


def output_store(client: redis.Redis, settings: SharedSettings, *, api: bool = False) -> OutputStore:
    """The deployment's output store, as ``GENQ_OUTPUT_STORE`` names it (``tasks/outputs_config.py``); ``api``:
    with the API's short timeouts (a stalled S3 is a quick 503, not a held request thread)."""
    spec = OutputStoreSpec.of(settings)
    if spec.backend == "filesystem":
        from tasks.store.outputs_fs import FilesystemOutputStore

        return FilesystemOutputStore(spec.directory)
    if spec.backend == "s3":
        from tasks.store.outputs_s3 import API_TIMEOUTS, WORKER_TIMEOUTS, S3OutputStore

        return S3OutputStore(
            spec.bucket,
            spec.prefix,
            endpoint_url=settings.s3_endpoint_url,
            public_url=settings.s3_public_url,
            region=settings.s3_region,
            timeouts=API_TIMEOUTS if api else WORKER_TIMEOUTS,
        )
    return RedisOutputStore(client, Keys(settings.key_prefix), settings.result_ttl_s)
