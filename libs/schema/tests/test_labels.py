"""label_value: valid names pass through, anything else becomes a valid, stable, distinct value."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hostaffinity.schema.labels import MAX_LABEL_VALUE_LENGTH, is_valid_label_value, label_value


@pytest.mark.parametrize(
    "name",
    ["esx-01.lab.example.com", "h1", "A_b.c-9", "x" * 63, ""],
    ids=["fqdn", "short", "mixed", "max-length", "empty"],
)
def test_valid_names_are_kept(name: str) -> None:
    assert label_value(name) == name


@pytest.mark.parametrize(
    ("name", "prefix"),
    [
        ("ESX Host #1 (rack 7)", "ESX-Host-1-rack-7-"),
        ("x" * 80, "x" * 52 + "-"),
        ("-edge-", "edge-"),
        ("höst", "h-st-"),
    ],
    ids=["spaces-and-symbols", "too-long", "bad-edges", "non-ascii"],
)
def test_invalid_names_keep_a_readable_prefix(name: str, prefix: str) -> None:
    value = label_value(name)
    assert value.startswith(prefix)
    assert is_valid_label_value(value)


def test_only_symbols_gives_just_the_hash() -> None:
    value = label_value("###")
    assert is_valid_label_value(value)
    assert len(value) == 10


def test_names_that_clean_up_alike_stay_distinct() -> None:
    assert label_value("rack 1/host a") != label_value("rack 1 host a")


@given(st.text(max_size=200))
def test_any_name_gives_a_valid_stable_value(name: str) -> None:
    value = label_value(name)
    assert is_valid_label_value(value)
    assert len(value) <= MAX_LABEL_VALUE_LENGTH
    assert label_value(name) == value
