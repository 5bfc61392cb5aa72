"""The id columns' form (contrib/django/columns.py): lossless, and never more characters than
the id has UTF-8 bytes, so every id the store takes fits its column whole. Pure: no database."""

from hypothesis import given
from hypothesis import strategies as st

from celery_fairqueue.contrib.django.columns import MARK, NUL_SIGN, from_column, to_column
from celery_fairqueue.protocol import MAX_ID_LENGTH

PIECES = ["\udc80", "\ud800", "\udfff", "\x00", MARK, NUL_SIGN, "\\udc80", f"{MARK}I0", "é",
          "\U0001f600", "a", "\\", "%41"]
ids = st.lists(st.one_of(st.characters(), st.sampled_from(PIECES))).map("".join)


def utf8_size(value: str) -> int:
    return len(value.encode("utf-8", "surrogatepass"))


@given(ids)
def test_an_id_comes_back_from_its_column_and_is_no_longer_than_its_bytes(value):
    text = to_column(value)
    assert from_column(text) == value
    assert len(text) <= utf8_size(value)
    text.encode("utf-8")  # storable: no lone surrogate left
    assert "\x00" not in text


@given(ids, ids)
def test_two_distinct_ids_have_two_column_forms(one, other):
    assert (to_column(one) == to_column(other)) == (one == other)


def test_the_longest_id_of_lone_surrogates_fits_the_column():
    value = "\udc80" * (MAX_ID_LENGTH // 3) + "a"
    assert utf8_size(value) == MAX_ID_LENGTH and len(to_column(value)) == MAX_ID_LENGTH


def test_ordinary_ids_read_as_they_are():
    for value in ("acme", "ac/me ü", "客户-7", "a b|{x}", "\U0001f600", "\\udc80"):
        assert to_column(value) == value
