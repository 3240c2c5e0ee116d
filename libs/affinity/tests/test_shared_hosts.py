"""What other installs' DRS rules do to the hosts shared with them (shared_hosts.py)."""

from hostaffinity.affinity.shared_hosts import shared_hosts_warnings
from hostaffinity.schema import FLEET_TOKEN, DrsName, EsxiHost, OtherInstallRule, fleet_rule_name


def host(name: str, *, entering: bool = False, connected: bool = True) -> EsxiHost:
    return EsxiHost(
        moid=name,
        name=name,
        label=name,
        cluster_moid="domain-c1",
        cluster_name="c1",
        datacenter="DC0",
        connection_state="connected" if connected else "disconnected",
        in_maintenance_mode=False,
        entering_maintenance=entering,
    )


def rule(vms: int, *, enabled: bool = True) -> OtherInstallRule:
    return OtherInstallRule(
        name=str(DrsName("vm-anti-affinity", "cluster-b", "e" * 12)),
        install="cluster-b",
        kind="vm-anti-affinity",
        vms=[f"vm{i}" for i in range(vms)],
        enabled=enabled,
    )


def test_another_install_s_rule_over_every_usable_host_leaves_no_failover_room() -> None:
    (warning,) = shared_hosts_warnings([rule(3)], [host("h0"), host("h1"), host("h2")])
    assert (warning.risk, warning.install, warning.vms) == ("no-failover-room", "cluster-b", 3)
    assert warning.hosts == ["h0", "h1", "h2"]
    assert "install cluster-b" in warning.message
    assert shared_hosts_warnings([rule(2)], [host("h0"), host("h1"), host("h2")]) == []


def test_another_install_s_enabled_rule_keeps_a_host_from_maintenance_until_it_is_held() -> None:
    hosts = [host("h0", entering=True), host("h1"), host("h2")]
    (warning,) = shared_hosts_warnings([rule(3)], hosts)
    assert (warning.risk, warning.hosts) == ("blocks-maintenance", ["h0"])
    assert "until install cluster-b holds it" in warning.message
    assert shared_hosts_warnings([rule(3, enabled=False)], hosts) == []
    assert shared_hosts_warnings([rule(2)], hosts)[0].risk == "no-failover-room"


def test_a_what_if_counts_the_named_hosts_as_away() -> None:
    hosts = [host("h0"), host("h1"), host("h2"), host("h3", connected=False)]
    (warning,) = shared_hosts_warnings([rule(3)], hosts, also_away={"h1"})
    assert (warning.risk, warning.hosts) == ("blocks-maintenance", ["h1"])


def test_a_fleet_rule_is_said_to_be_the_fleet_s_not_an_install_s() -> None:
    fleet = OtherInstallRule(
        name=fleet_rule_name("domain-c1", "payments-db"),
        install=FLEET_TOKEN,
        kind="vm-anti-affinity",
        vms=["vm0", "vm1", "vm2"],
        enabled=True,
    )
    hosts = [host("h0", entering=True), host("h1"), host("h2")]
    (warning,) = shared_hosts_warnings([fleet], hosts)
    assert "until the fleet (the install holding its lease) holds it" in warning.message
    assert "install fleet" not in warning.message
