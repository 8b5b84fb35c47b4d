"""SSRF rules: every notation of a non-public address is recognised; the submit check does no DNS."""

from __future__ import annotations

import ipaddress
import socket

import pytest

from tasks.errors import InvalidInput
from tasks.settings import Settings
from tasks.ssrf import embedded_ipv4, forbidden_address, parse_ipv4
from tasks.webhooks import check_webhook_url, key_secret, sign, verify

LOOPBACK = ipaddress.IPv4Address("127.0.0.1")


@pytest.mark.parametrize(
    "host",
    [
        "127.0.0.1",
        "2130706433",
        "0x7f000001",
        "0177.0.0.1",
        "017700000001",
        "127.1",
        "127.0.1",
        "0x7f.1",
        "0x7F.0.0.1",
        "127.0.0.1.",
    ],
)
def test_every_ipv4_spelling_of_loopback(host):
    assert parse_ipv4(host) == LOOPBACK


@pytest.mark.parametrize("host", ["1.2.3.4.5", "256.0.0.1", "0x1g.0.0.1", "1.2.3.0x100", "4294967296", "09.0.0.1"])
def test_numeric_hosts_that_are_no_address_are_errors(host):
    with pytest.raises(ValueError):
        parse_ipv4(host)


@pytest.mark.parametrize("host", ["example.com", "hooks.example.com", "1.example.com", "a1"])
def test_names_are_not_addresses(host):
    assert parse_ipv4(host) is None


@pytest.mark.parametrize("address", ["::ffff:127.0.0.1", "::127.0.0.1", "2002:7f00:1::", "64:ff9b::7f00:1"])
def test_ipv6_forms_embedding_loopback(address):
    assert embedded_ipv4(ipaddress.IPv6Address(address)) == LOOPBACK
    assert forbidden_address(address)


@pytest.mark.parametrize(
    "address", ["8.8.8.8", "1.1.1.1", "2606:4700:4700::1111", "::ffff:8.8.8.8", "64:ff9b::808:808", "2002:808:808::"]
)
def test_public_addresses_are_allowed(address):
    assert not forbidden_address(address)


@pytest.mark.parametrize(
    "address",
    [
        "64:ff9b:1::808:808",
        "2001:0:4136:e378:8000:63bf:80ff:fffe",
        "fe80::1%eth0",
        "192.0.0.192",
        "100.100.100.200",
        "fd00:ec2::254",
        "233.252.0.1",
        "::",
    ],
)
def test_local_use_teredo_link_local_and_metadata_are_forbidden(address):
    assert forbidden_address(address)


def test_the_submit_check_never_resolves(monkeypatch):
    def no_dns(*args: object, **kwargs: object) -> None:
        raise AssertionError("DNS lookup in the request thread")

    monkeypatch.setattr(socket, "getaddrinfo", no_dns)
    check_webhook_url("https://hooks.example.com/x", Settings(webhook_secret="s"))
    with pytest.raises(InvalidInput):
        check_webhook_url("https://[2002:7f00:1::]/", Settings(webhook_secret="s"))


def test_signatures_follow_standard_webhooks_and_are_per_key():
    body, secret = b'{"event":"completed"}', key_secret("server", "a" * 64)
    assert secret.startswith("whsec_") and secret != key_secret("server", "b" * 64)
    headers = {
        "webhook-id": "msg_1",
        "webhook-timestamp": "1700000000",
        "webhook-signature": sign(secret, "msg_1", 1700000000, body),
    }
    assert verify(secret, headers, body, now=1700000010)
    assert not verify(key_secret("server", "b" * 64), headers, body, now=1700000010)
    assert not verify(secret, headers, body + b" ", now=1700000010)
    assert not verify(secret, headers, body, now=1700000000 + 3600)  # a replay, an hour later


@pytest.mark.parametrize(
    "address",
    [
        "::ffff:0:127.0.0.1",
        "::ffff:0:7f00:1",
        "::ffff:0:169.254.169.254",
        "::ffff:0:10.0.0.1",
        "fe80::5efe:127.0.0.1",
        "2001:db9::200:5efe:a00:1",
    ],
)
def test_ipv4_translated_and_isatap_forms_carry_their_ipv4_address(address):
    assert embedded_ipv4(ipaddress.IPv6Address(address)) is not None
    assert forbidden_address(address)
    with pytest.raises(InvalidInput, match="webhook"):  # the submit check refuses the literal too
        check_webhook_url(f"https://[{address}]/hook", Settings(webhook_secret="s"))


def test_ipv4_translated_public_address_is_judged_by_its_ipv4_address():
    assert embedded_ipv4(ipaddress.IPv6Address("::ffff:0:8.8.8.8")) == ipaddress.IPv4Address("8.8.8.8")


@pytest.mark.parametrize(
    "host",
    [
        "\uff11\uff12\uff17.\uff10.\uff10.\uff11",
        "127.0.0.\uff11",
        "\u0661\u0662\u0667.0.0.1",
        "hooks\uff11.example.com",
        "127\u30020\u30020\u30021",
        "\uff4c\uff4f\uff43\uff41\uff4c\uff48\uff4f\uff53\uff54",
    ],
)
def test_full_width_and_other_non_ascii_hosts_are_refused_at_submit(host):
    with pytest.raises(InvalidInput, match="webhook") as refused:
        check_webhook_url(f"https://{host}/hook", Settings(webhook_secret="s"))
    assert refused.value.field == "webhook"
