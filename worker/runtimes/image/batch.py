"""The parts of one UNet call over an image step session's rows that stay the same until rows come or go: the text
embeddings ([unconditional of guided rows] + [conditional of all rows]), the guided rows' positions and guidance."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from worker.runtimes.image.rows import ImageRow


@dataclass
class BatchParts:
    """The UNet's text embeddings ([unconditional of guided rows] + [conditional of all rows]), the guided rows'
    positions (a list, so no step waits on the device to read them; and as an index tensor) and guidance column."""

    embeds: Any
    guided: list[int]
    index: Any
    scale: Any


def parts_of(rows: list[ImageRow]) -> BatchParts:
    """The embeddings, guided rows and guidance column of one UNet call over ``rows``."""
    import torch

    guided = [i for i, row in enumerate(rows) if row.uncond is not None]
    parts: list[Any] = [rows[i].uncond for i in guided] + [row.cond for row in rows]
    embeds = torch.cat(parts)
    index = torch.tensor(guided, dtype=torch.long, device=embeds.device)
    scale = torch.tensor([rows[i].guidance for i in guided], dtype=embeds.dtype, device=embeds.device)
    return BatchParts(embeds, guided, index, scale.view(-1, 1, 1, 1))
