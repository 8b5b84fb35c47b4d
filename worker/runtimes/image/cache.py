"""Per-row deep feature caching for UNet step sessions (DeepCache, Ma et al. 2023, its shallowest branch).

A full UNet pass runs every block; the input of the last up block's last layer (the deep features, concatenated
with the skip from ``conv_in``) is kept per row. For the next ``interval - 1`` steps a row reuses its deep features
and runs only the shallow path: time embedding, ``conv_in``, that last layer (resnet, and its attention if the
block has one) over ``cat(cached deep features, this step's conv_in skip)``, and the output convolutions. Each row
keeps its own cache and step counter, so rows that opt in, rows with other intervals and rows that do not cache
share a session: a step runs the rows due a full pass as one UNet call and the rows reusing their cache as a
second, shallow one. A row that does not opt in runs the plain UNet call, unaffected.

Not thread-safe, like the session that owns it (the model thread only).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tasks.kinds import TextToImageInput


@dataclass(eq=False)
class RowCache:
    """One image's cache: its interval, the steps since its last full pass, and its deep features (one tensor per
    classifier-free guidance half it runs: (unconditional, conditional), or (conditional,))."""

    interval: int
    since_full: int = 0
    deep: tuple[Any, ...] | None = None

    @property
    def due(self) -> bool:
        """A full pass at this step: none yet, or ``interval`` steps since the last."""
        return self.deep is None or self.since_full >= self.interval

    def features(self) -> tuple[Any, ...]:
        assert self.deep is not None, "a row reuses its cache only after a full pass"
        return self.deep

    def ran(self, full: bool) -> None:
        self.since_full = 1 if full else self.since_full + 1


def cache_interval(inp: TextToImageInput, default: int | None = None) -> int | None:
    """The job's DeepCache interval (``input.accel.deepcache.interval``), else the model's default; None or 1:
    no caching."""
    deepcache = inp.accel.deepcache if inp.accel is not None else None
    interval = deepcache.interval if deepcache is not None else default
    return interval if interval is not None and interval > 1 else None


def _last_layer(unet: Any) -> tuple[Any, Any | None]:
    block = unet.up_blocks[-1]
    attentions = getattr(block, "attentions", None)
    return block.resnets[-1], (attentions[-1] if attentions else None)


class DeepFeatures:
    """Captures the deep features of a full UNet call (a forward pre-hook on the last up layer's resnet) and runs
    the shallow call that reuses them."""

    def __init__(self, unet: Any) -> None:
        self.unet = unet
        self.resnet, self.attention = _last_layer(unet)
        self.skip_channels = unet.config.block_out_channels[0]  # conv_in's output, the last layer's skip
        self._captured: Any = None

    def full(self, call: Any) -> tuple[Any, Any]:
        """``call()`` (the full UNet call) and the deep features of its rows, batch-first."""

        def hook(_: Any, args: tuple[Any, ...]) -> None:
            self._captured = args[0][:, : args[0].shape[1] - self.skip_channels]

        handle = self.resnet.register_forward_pre_hook(hook)
        try:
            out = call()
        finally:
            handle.remove()
        captured, self._captured = self._captured, None
        return out, captured

    def shallow(self, sample: Any, timesteps: Any, embeds: Any, deep: Any) -> Any:
        """The noise prediction of rows reusing their ``deep`` features: the UNet's first and last layers only."""
        import torch

        unet = self.unet
        emb = unet.time_embedding(unet.get_time_embed(sample=sample, timestep=timesteps), None)
        if unet.time_embed_act is not None:
            emb = unet.time_embed_act(emb)
        skip = unet.conv_in(sample)
        hidden = self.resnet(torch.cat([deep, skip], dim=1), emb)
        if self.attention is not None:
            hidden = self.attention(hidden, encoder_hidden_states=embeds, return_dict=False)[0]
        if unet.conv_norm_out is not None:
            hidden = unet.conv_act(unet.conv_norm_out(hidden))
        return unet.conv_out(hidden)
