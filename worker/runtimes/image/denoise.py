"""One step's UNet work over an image step session's rows: their guided noise in one UNet call, each row's LoRAs
applied to that row only (worker/adapters), rows in lockstep scheduled together (lockstep.py), and per-row
DeepCache: rows due a full pass and rows reusing their cached deep features run as two sub-batches (cache.py)."""

from __future__ import annotations

from typing import Any

from worker.adapters.mixing import with_guidance
from worker.adapters.session_rows import SessionAdapters
from worker.runtimes.image.batch import BatchParts, parts_of
from worker.runtimes.image.cache import DeepFeatures
from worker.runtimes.image.lockstep import advance_rows, scaled_inputs
from worker.runtimes.image.rows import ImageRow
from worker.step_metrics import record_cache


class Denoiser:
    def __init__(self, pipe: Any, model: str, adapters: SessionAdapters) -> None:
        self.pipe, self.model, self.adapters = pipe, model, adapters
        self.batch: BatchParts | None = None  # rebuilt when rows come or go
        self._features: DeepFeatures | None = None  # built when a row first caches its deep features
        self._handle_of: dict[int, str] = {}

    def reset(self) -> None:
        """Rows came or went: the batch's parts are built again at the next step."""
        self.batch = None

    def _batch_parts(self, rows: list[ImageRow]) -> BatchParts:
        """The parts of the UNet call that stay the same from step to step until rows come or go."""
        if self.batch is None:
            self.batch = parts_of(rows)
        return self.batch

    def denoise(self, rows: list[ImageRow], handle_of: dict[int, str]) -> None:
        """One step's noise for ``rows`` (``handle_of``: each row's job, by ``id``), each row advanced by it."""
        self._handle_of = handle_of
        if any(row.cache is not None for row in rows):
            self._denoise_cached(rows)
            return
        advance_rows(rows, self._noise(rows, self._batch_parts(rows)))

    def _noise(self, rows: list[ImageRow], parts: BatchParts, deep: Any = None) -> Any:
        """The rows' guided noise predictions: one UNet call, or with ``deep`` (the rows' cached deep features,
        laid out as the UNet's batch) the shallow call that reuses them."""
        import torch

        guided = parts.guided
        scaled = scaled_inputs(rows)
        timesteps = [row.unet_timesteps[row.done] for row in rows]
        sample = torch.cat([scaled[i] for i in guided] + scaled)
        t = torch.stack([timesteps[i] for i in guided] + timesteps)
        with self.adapters.forward(with_guidance([self._handle_of[id(row)] for row in rows], guided)):
            if deep is None:
                noise = self._unet(sample, t, parts.embeds)
            else:
                noise = self._deep_features().shallow(sample, t, parts.embeds, deep)
        uncond, noise = noise[: len(guided)], noise[len(guided) :]
        if guided:  # u + g * (c - u) per guided row, as the pipeline's guidance with the row's own g
            noise = noise.clone()
            noise[parts.index] = uncond + parts.scale * (noise[parts.index] - uncond)
        return noise

    def _unet(self, sample: Any, t: Any, embeds: Any) -> Any:
        """The full UNet call of one step (a wrapper around the UNet's forward goes here)."""
        return self.pipe.unet(sample, t, encoder_hidden_states=embeds, return_dict=False)[0]

    def _denoise_cached(self, rows: list[ImageRow]) -> None:
        """Rows due a full pass (and rows that do not cache) in one UNet call, keeping the deep features of those
        that cache; rows reusing their cache in a second, shallow call (cache.py)."""
        import torch

        full = [row for row in rows if row.cache is None or row.cache.due]
        reuse = [row for row in rows if row.cache is not None and not row.cache.due]
        if full:
            parts = self._batch_parts(rows) if not reuse else parts_of(full)
            noise, deep = self._deep_features().full(lambda: self._noise(full, parts))
            position = {i: k for k, i in enumerate(parts.guided)}
            for i, row in enumerate(full):
                if row.cache is not None:
                    cond = deep[len(parts.guided) + i : len(parts.guided) + i + 1]
                    row.cache.deep = (deep[position[i] : position[i] + 1], cond) if i in position else (cond,)
            advance_rows(full, noise)
        if reuse:
            parts = parts_of(reuse)
            kept = [row.cache.features() for row in reuse if row.cache is not None]  # every reusing row has one
            deep = torch.cat([kept[i][0] for i in parts.guided] + [halves[-1] for halves in kept])
            noise = self._noise(reuse, parts, deep)
            for i, row in enumerate(reuse):
                row.advance(noise[i : i + 1])
        for row in rows:
            if row.cache is not None:
                row.cache.ran(full=row in full)
        record_cache(self.model, sum(r.cache is not None for r in full), len(reuse))

    def _deep_features(self) -> DeepFeatures:
        if self._features is None:
            self._features = DeepFeatures(self.pipe.unet)
        return self._features
