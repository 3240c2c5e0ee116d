"""What the watcher asks vCenter for: a VM's guest hostname only where nodes are matched by it."""

from hostaffinity.node_labeller.core.inventory import (
    GUEST_HOSTNAME,
    VM,
    WATCHED_PROPERTIES,
    watched_properties,
)


def test_the_guest_hostname_is_watched_only_for_the_guest_hostname_fallback() -> None:
    assert GUEST_HOSTNAME in watched_properties(guest_hostname=True)[VM]
    assert GUEST_HOSTNAME not in watched_properties(guest_hostname=False)[VM]


def test_leaving_the_guest_hostname_out_keeps_every_other_property() -> None:
    without = watched_properties(guest_hostname=False)
    assert without.keys() == WATCHED_PROPERTIES.keys()
    for kind, paths in WATCHED_PROPERTIES.items():
        assert without[kind] == tuple(path for path in paths if path != GUEST_HOSTNAME)
    assert "runtime.host" in without[VM]
