"""DRS names carry the install that made them, and are told apart from the name alone."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hostaffinity.schema import (
    FLEET_TOKEN,
    DrsName,
    drs_name_digest,
    fleet_rule_name,
    install_token,
    parse_drs_name,
)
from hostaffinity.schema.drs_names import KIND_IN_NAME, MAX_TOKEN_LENGTH

# vCenter keeps inventory names to 80 characters.
VCENTER_NAME_LIMIT = 80
UID = "3f1c2e4a-6b7d-4e8f-9a0b-1c2d3e4f5a6b"


@pytest.mark.parametrize("identity", ["prod-east", UID])
def test_a_short_lowercase_identity_is_its_own_token(identity: str) -> None:
    """A kube-system Namespace UID is a lowercase DNS label already."""
    assert install_token(identity) == identity


def test_another_identity_becomes_a_readable_prefix_and_a_hash_of_the_whole() -> None:
    token = install_token("Prod East")
    assert token.startswith("prod-east-")
    assert len(token) == len("prod-east-") + 8


def test_identities_that_read_alike_keep_different_tokens() -> None:
    assert install_token("Prod East") != install_token("prod east")
    assert install_token("a" * 41) != install_token("a" * 42)
    assert len(install_token("x" * 200)) <= MAX_TOKEN_LENGTH


@given(st.text(min_size=1, max_size=300))
def test_every_name_fits_vcenter_and_parses_back(identity: str) -> None:
    token = install_token(identity)
    for kind in KIND_IN_NAME:
        name = DrsName(kind, token, drs_name_digest("domain-c7", "some group"))
        assert len(str(name)) <= VCENTER_NAME_LIMIT
        assert parse_drs_name(str(name)) == name


def test_a_token_may_itself_contain_a_kind() -> None:
    name = DrsName("vm-host", "team-anti-x", "0123456789ab")
    assert parse_drs_name(str(name)) == name


@pytest.mark.parametrize(
    ("name", "install"),
    [
        ("hostaffinity-anti-0123456789ab", None),  # 0.1.0's form: no install
        ("hostaffinity-prod-east-anti-0123456789ab", "prod-east"),
        ("hostaffinity-prod-east-vmgroup-0123456789ab", "prod-east"),
    ],
)
def test_the_install_is_read_from_the_name(name: str, install: str | None) -> None:
    parsed = parse_drs_name(name)
    assert parsed is not None
    assert parsed.install == install
    assert str(parsed) == name


@pytest.mark.parametrize(
    "name",
    [
        "keep-db-apart",
        "hostaffinity-made-by-hand",
        "hostaffinity-anti-xyz",
        "hostaffinity--anti-0123456789ab",
    ],
)
def test_other_names_are_not_hostaffinity_s(name: str) -> None:
    assert parse_drs_name(name) is None


def test_a_legacy_name_is_renamed_keeping_its_digest() -> None:
    legacy = parse_drs_name("hostaffinity-vmhost-0123456789ab")
    assert legacy is not None
    assert str(legacy.of_install("prod")) == "hostaffinity-prod-vmhost-0123456789ab"


@given(st.text(min_size=1, max_size=300))
def test_no_install_is_ever_named_for_the_fleet(identity: str) -> None:
    """The fleet's rules carry `fleet` where an install's carry its token: no identity, not
    even `fleet` itself, may yield that word, or its rules would be read as the fleet's."""
    assert install_token(identity) != FLEET_TOKEN


def test_a_cluster_named_fleet_gets_a_hashed_token() -> None:
    token = install_token("fleet")
    assert token.startswith("fleet-")
    assert parse_drs_name(str(DrsName("vm-anti-affinity", token, "0123456789ab"))) is not None


@pytest.mark.parametrize(
    ("cluster", "group", "other_cluster", "other_group"),
    [("domain-c7", "web", "domain-c8", "web"), ("domain-c7", "web", "domain-c7", "db")],
)
def test_a_fleet_rule_is_named_for_its_vsphere_cluster_and_group_alone(
    cluster: str, group: str, other_cluster: str, other_group: str
) -> None:
    """Every install derives the same name, and the name no install's: ownership moves between
    installs without a rename."""
    name = fleet_rule_name(cluster, group)
    parsed = parse_drs_name(name)
    assert parsed is not None
    assert parsed.fleet
    assert parsed.kind == "vm-anti-affinity"
    assert name == fleet_rule_name(cluster, group)
    assert name != fleet_rule_name(other_cluster, other_group)
    assert len(name) <= VCENTER_NAME_LIMIT


@pytest.mark.parametrize(
    "name",
    [
        "hostaffinity-prod-anti-0123456789ab",
        "hostaffinity-fleet-x-anti-0123456789ab",
        "hostaffinity-anti-0123456789ab",
    ],
)
def test_an_install_s_or_a_legacy_name_is_not_the_fleet_s(name: str) -> None:
    parsed = parse_drs_name(name)
    assert parsed is not None
    assert not parsed.fleet
