"""Which addresses a webhook may reach: every IPv4 and IPv6 notation of a non-public address is refused.

The API checks a URL's syntax at submit (literal addresses in any notation, local-only names) and
resolves nothing there; the worker resolves the name once per attempt, checks every address, and
connects to the one it checked (``worker/webhooks.py``), so a name rebound in between gains nothing.
"""

from __future__ import annotations

import ipaddress
import re
import unicodedata
from urllib.parse import SplitResult, urlsplit

from tasks.errors import InvalidInput

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

# IANA's special-purpose registries, spelled out: Python's is_global misses some (192.0.0.192, Oracle's
# metadata address, reads as global on 3.11) and differs between versions.
_V4_FORBIDDEN = tuple(
    ipaddress.IPv4Network(n)
    for n in (
        "0.0.0.0/8",
        "10.0.0.0/8",
        "100.64.0.0/10",
        "127.0.0.0/8",
        "169.254.0.0/16",
        "172.16.0.0/12",
        "192.0.0.0/24",
        "192.0.2.0/24",
        "192.88.99.0/24",
        "192.168.0.0/16",
        "198.18.0.0/15",
        "198.51.100.0/24",
        "203.0.113.0/24",
        "224.0.0.0/4",
        "240.0.0.0/4",
    )
)
_V6_FORBIDDEN = tuple(
    ipaddress.IPv6Network(n)
    for n in (
        "::/128",
        "::1/128",
        "64:ff9b:1::/48",
        "100::/64",
        "2001::/23",
        "2001:db8::/32",
        "3fff::/20",
        "5f00::/16",
        "fc00::/7",
        "fe80::/10",
        "fec0::/10",
        "ff00::/8",
    )
)
# IPv6 ranges that carry an IPv4 address in their low 32 bits (NAT64's well-known prefix, the deprecated
# IPv4-compatible form, SIIT's IPv4-translated ::ffff:0:a.b.c.d of RFC 2765); IPv4-mapped and 6to4 have
# their own accessors. ISATAP interface ids (RFC 5214: ...:0:5efe:a.b.c.d, ...:200:5efe:a.b.c.d) carry one
# under any prefix.
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_V4_COMPATIBLE = ipaddress.IPv6Network("::/96")
_V4_TRANSLATED = ipaddress.IPv6Network("::ffff:0:0:0/96")
_ISATAP_IDS = (0x00005EFE, 0x02005EFE)
# Full stops that IDNA (UTS #46) maps to "." when a client resolves a name: ideographic, full-width, half-width.
_IDNA_DOTS = str.maketrans({"\u3002": ".", "\uff0e": ".", "\uff61": "."})
# Cloud metadata endpoints outside the ranges above (AWS's IPv6 one is ULA, Alibaba's is shared space):
# listed so that no allow-list change can let them through.
METADATA_ADDRESSES = frozenset(
    {
        ipaddress.ip_address("fd00:ec2::254"),
        ipaddress.ip_address("100.100.100.200"),
        ipaddress.ip_address("169.254.169.254"),
    }
)
# Names that only mean something inside a host or a private network.
_LOCAL_NAMES = re.compile(r"(^|\.)(localhost|localdomain|local|internal|intranet|lan|home\.arpa|corp)$")
_NUMBER = re.compile(r"^(0x[0-9a-f]*|[0-9]+)$")


def embedded_ipv4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 form carries: IPv4-mapped, IPv4-compatible, IPv4-translated, 6to4, NAT64
    (64:ff9b::/96) or an ISATAP interface id."""
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip.sixtofour is not None:
        return ip.sixtofour
    low = ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    if ip in _NAT64 or ip in _V4_TRANSLATED or (ip in _V4_COMPATIBLE and int(ip) > 1):
        return low
    if (int(ip) >> 32) & 0xFFFFFFFF in _ISATAP_IDS:
        return low
    return None


def forbidden_address(address: str | IPAddress) -> bool:
    """True for loopback, private, link-local, shared, reserved, multicast, unspecified and metadata addresses."""
    ip = ipaddress.ip_address(address.split("%", 1)[0] if isinstance(address, str) else address)
    if ip in METADATA_ADDRESSES:
        return True
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.teredo is not None or any(ip in net for net in _V6_FORBIDDEN):
            return True
        inner = embedded_ipv4(ip)
        if inner is not None:
            return forbidden_address(inner)
        return not ip.is_global
    return (
        any(ip in net for net in _V4_FORBIDDEN) or ip == ipaddress.IPv4Address("255.255.255.255") or (not ip.is_global)
    )


def parse_ipv4(host: str) -> ipaddress.IPv4Address | None:
    """An IPv4 address in any notation browsers and libc accept (WHATWG URL rules), else None.

    ``2130706433``, ``0x7f.1``, ``0177.0.0.1`` and ``127.1`` all mean 127.0.0.1. Raises ValueError for a
    host whose last label is a number but which is no valid address (ambiguous: refused, never resolved).
    """
    labels = host.rstrip(".").split(".")
    if not labels or not _NUMBER.match(labels[-1].lower()):
        return None
    if len(labels) > 4:
        raise ValueError(f"{host!r} looks like an IPv4 address but is not one")
    numbers = []
    for label in labels:
        label = label.lower()
        if not _NUMBER.match(label):
            raise ValueError(f"{host!r} looks like an IPv4 address but is not one")
        if label.startswith("0x"):
            numbers.append(int(label[2:] or "0", 16))
        elif len(label) > 1 and label.startswith("0"):
            numbers.append(int(label, 8))
        else:
            numbers.append(int(label))
    *head, last = numbers
    if any(n > 255 for n in head) or last >= 256 ** (5 - len(numbers)):
        raise ValueError(f"{host!r} is out of range for an IPv4 address")
    value = last
    for index, number in enumerate(head):
        value += number << (8 * (3 - index))
    return ipaddress.IPv4Address(value)


def literal_address(host: str) -> IPAddress | None:
    """The address a URL's host names literally (any IPv4 notation, IPv6 with or without zone), else None."""
    if ":" in host:
        return ipaddress.IPv6Address(host.split("%", 1)[0])
    return parse_ipv4(host)


def split_webhook_url(url: str, *, allow_http: bool, field: str = "webhook") -> SplitResult:
    """The URL's parts if its scheme, host and port are usable; raise InvalidInput naming ``field`` otherwise."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise InvalidInput(f"{field}: not a valid URL", field=field) from None
    allowed_schemes = ("https", "http") if allow_http else ("https",)
    if parts.scheme not in allowed_schemes:
        raise InvalidInput(f"{field}: must be an {' or '.join(allowed_schemes)} URL", field=field)
    if not parts.hostname or parts.username is not None or parts.password is not None:
        raise InvalidInput(f"{field}: must name a host and carry no credentials", field=field)
    if port == 0:
        raise InvalidInput(f"{field}: port 0 is not a port", field=field)
    return parts


def check_host(host: str, *, allow_private: bool, field: str = "webhook") -> IPAddress | None:
    """Refuse a host that is, or spells, a non-public address or a local-only name; no DNS lookup.

    Returns the literal address when the host is one (it needs no resolving later). A host with non-ASCII
    digits is refused: a resolver's IDNA mapping turns full-width ``１２７.０.０.１`` into 127.0.0.1. Other
    characters are checked as IDNA would map them (NFKC, its full stops), so ``ｌｏｃａｌｈｏｓｔ`` is localhost.
    """
    if any(ch.isdigit() and not ch.isascii() for ch in host):
        raise InvalidInput(f"{field}: {host!r} has non-ASCII digits (write the host in ASCII)", field=field)
    host = unicodedata.normalize("NFKC", host).translate(_IDNA_DOTS).lower()
    try:
        literal = literal_address(host)
    except ValueError:
        raise InvalidInput(f"{field}: {host!r} is not a valid address", field=field) from None
    if allow_private:
        return literal
    if literal is not None:
        if forbidden_address(literal):
            raise InvalidInput(f"{field}: {host!r} is a loopback, private, link-local or reserved address", field=field)
        return literal
    if "." not in host.rstrip(".") or _LOCAL_NAMES.search(host.rstrip(".")):
        raise InvalidInput(f"{field}: {host!r} names a local or internal host", field=field)
    return None
