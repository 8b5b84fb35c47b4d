"""A JPEG's decoding cost read from its markers, before any decoding: how many scans it holds.

A progressive JPEG is decoded scan by scan, and each scan walks every block of the picture however few bytes
it takes: a 126 KB file of one 12-byte scan repeated ten thousand times cost 9.4 s of a core to check, and
again to read (issue 36), within every pixel bound. Ordinary encoders write 1 scan (baseline), 3 (one per
component) or about 10 (libjpeg's progressive script); ``MAX_JPEG_SCANS`` leaves room for tuned encoders
(mozjpeg) and bounds a picture's cost to that many passes over its pixels.
"""

from __future__ import annotations

import re

from tasks.errors import InvalidInput

MAX_JPEG_SCANS = 64
_SOI, _SOS, _EOI = 0xD8, 0xDA, 0xD9
#: The marker that ends a scan's entropy-coded data: 0xFF then anything but a stuffed 0x00, a restart marker
#: (0xD0-0xD7, inside the scan) or a fill 0xFF.
_SCAN_END = re.compile(rb"\xff[^\x00\xd0-\xd7\xff]")


def jpeg_scans(data: bytes, stop_after: int = MAX_JPEG_SCANS) -> int:
    """The scans (SOS segments) in ``data``, counted up to ``stop_after + 1``; 0 for anything not a JPEG.

    Malformed structure ends the count where it breaks: the decoder refuses such a file on its own.
    """
    if data[:2] != b"\xff\xd8":
        return 0
    scans, pos = 0, 2
    while pos + 4 <= len(data) and scans <= stop_after:
        if data[pos] != 0xFF:
            break
        marker = data[pos + 1]
        if marker == 0xFF:  # fill byte before a marker
            pos += 1
            continue
        if marker == _EOI:
            break
        if marker == _SOI or 0xD0 <= marker <= 0xD7 or marker == 0x01:  # markers without a length
            pos += 2
            continue
        length = int.from_bytes(data[pos + 2 : pos + 4], "big")
        if length < 2:
            break
        pos += 2 + length
        if marker == _SOS:
            scans += 1
            found = _SCAN_END.search(data, pos)
            if found is None:
                break
            pos = found.start()
    return scans


def check_jpeg_scans(data: bytes, field: str) -> None:
    """InvalidInput naming ``field`` when ``data`` is a JPEG with more than ``MAX_JPEG_SCANS`` scans."""
    scans = jpeg_scans(data)
    if scans > MAX_JPEG_SCANS:
        raise InvalidInput(
            f"{field}: the JPEG holds more than {MAX_JPEG_SCANS} scans (an ordinary encoder writes at most about "
            "10, and each one costs a pass over every pixel to decode): re-encode it",
            field=field,
        )
