"""The enqueue's shortcuts give exactly what the long way gave: ids as quote() encodes them,
script calls packed byte for byte as redis-py packs them (a keyed call bound once:
tests/integration/test_enqueue_arguments.py)."""

from urllib.parse import quote

import pytest
from redis.connection import Encoder, HiredisRespSerializer, PythonRespSerializer
from redis.exceptions import DataError

from celery_fairqueue.protocol import encode_id
from celery_fairqueue.store.connection.connect import HiredisPacker

pytest.importorskip("hiredis")

OPTIONS = {"encoding_errors": "surrogateescape", "decode_responses": True}


def redis_py_packer() -> HiredisRespSerializer:
    encode = Encoder("utf-8", "surrogateescape", True).encode
    return HiredisRespSerializer(PythonRespSerializer(6000, encode).pack, encode)


@pytest.mark.parametrize("value", ["acct1", "a~b.c-d_e", "a b", "a|b", "é", "{tag}", "x" * 1024])
def test_encode_id_gives_what_quote_gives(value):
    assert encode_id(value) == quote(value, safe="", errors="surrogatepass")


def test_encode_id_still_refuses_an_id_over_the_limit():
    with pytest.raises(ValueError, match="1025 bytes"):
        encode_id("x" * 1025)


@pytest.mark.parametrize("command", [
    ("SET", "k", "v"), ("SCRIPT LOAD", "return 1"), ("SET", "k", "\udcff"), ("SET", "k", 1.5),
    ("SET", "k", 5), ("SET", "k", b"x" * 7000), ("SET", "k", memoryview(b"ab")),
    (b"GET", b"k"), ("SET", "é", "ü"), ("EVALSHA", "f" * 40, 2, "a", "b", 0, 1e20)])
def test_hiredis_packer_packs_as_redis_py(command):
    packed = HiredisPacker.for_options(OPTIONS).pack(*command)
    assert b"".join(packed) == b"".join(redis_py_packer().pack(*command))


@pytest.mark.parametrize("value", [True, None, object()])
def test_hiredis_packer_refuses_what_redis_py_refuses(value):
    with pytest.raises(DataError):
        HiredisPacker.for_options(OPTIONS).pack("SET", "k", value)
