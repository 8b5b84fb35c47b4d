"""LoRA adapters per row: read and checked (safetensors only), cached on the host and the device, and applied
per row inside one forward (``mixing.rows``)."""
