"""The key layout and id encoding: hostile ids never shape a key or a separator."""

import pytest

from celery_fairqueue.store.formats.keys import (
    GLOBAL_KEY_NAMES,
    MAX_ID_LENGTH,
    Keys,
    decode_id,
    encode_id,
)

HOSTILE = ["*", "{x}", "a|b", "new\nline", "sp ace", "ümlaut-账户", "x" * 1024, "%41", "a:b", "}{"]


@pytest.mark.parametrize("account", HOSTILE)
def test_encoded_ids_have_no_separator_brace_space_or_newline(account):
    encoded = encode_id(account)
    assert not set(encoded) & set("|{} \n\r*:")
    assert decode_id(encoded) == account


def test_distinct_ids_stay_distinct_after_encoding():
    encoded = {encode_id(a) for a in HOSTILE}
    assert len(encoded) == len(HOSTILE)


def test_an_id_that_looks_encoded_is_not_confused_with_its_decoding():
    assert encode_id("%41") != encode_id("A")


@pytest.mark.parametrize("bad", ["", "y" * (MAX_ID_LENGTH + 1)])
def test_empty_or_huge_ids_are_refused(bad):
    with pytest.raises(ValueError):
        encode_id(bad)


def test_every_key_of_a_queue_shares_the_hash_tag():
    keys = Keys("fq")
    queue = keys.queue("we{ird} queue")
    for key in [*(getattr(keys, name) for name in GLOBAL_KEY_NAMES), *queue.keys]:
        assert key.startswith("{fq}:")
        assert key.count("{") == 1 and key.count("}") == 1


@pytest.mark.parametrize("prefix", ["", "a{b", "a b"])
def test_a_prefix_that_would_break_the_hash_tag_is_refused(prefix):
    with pytest.raises(ValueError):
        Keys(prefix)
