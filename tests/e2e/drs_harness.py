"""Runs the drs-translator in-process (through the service runner) or as a subprocess, and reads
vcsim's DRS rules and groups field by field."""

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import pytest
from pyVmomi import vim

from hostaffinity.drs_translator.config import DrsTranslatorConfig
from hostaffinity.drs_translator.core.diff import Change
from hostaffinity.drs_translator.main import service_spec
from hostaffinity.drs_translator.service import DrsTranslatorWork
from hostaffinity.drs_translator.translator import DrsTranslator
from hostaffinity.drs_translator.vcenter_cluster import ClusterRules
from hostaffinity.runtime.bus.client import Bus
from hostaffinity.runtime.runner import ServiceRunner, running_service
from hostaffinity.schema import (
    DRS_BUCKET,
    LABEL_ESXI_HOST,
    DrsName,
    DrsOwnership,
    DrsRulesApplied,
    install_token,
    parse_drs_name,
)
from hostaffinity.schema.names import DRS_OUTBOX_KEY_PREFIX, DRS_RULE_KEY_PREFIX
from tests.e2e.harness import BusPlatform, eventually, finished, inventory, runner_sections
from tests.e2e.labeller_harness import vm_by_name
from tests.platform.kube_double import KubeDouble
from tests.platform.vcsim import Vcsim

_vim: Any = vim


def drs_config(
    vc: Vcsim, nats: BusPlatform, kubeconfig: Path, /, **overrides: Any
) -> DrsTranslatorConfig:
    """A translator config for these parts, the vCenter named `vcsim` as the labeller's;
    keywords override fields (`vcenters`, `drs`)."""
    fields = {"vcenters": [vc.settings(name="vcsim")]}
    return DrsTranslatorConfig(
        **(runner_sections(nats, kubeconfig, "drs-translator") | fields | overrides)
    )


@dataclass
class RunningTranslator:
    runner: ServiceRunner[DrsTranslatorConfig]
    work: DrsTranslatorWork

    @property
    def translator(self) -> DrsTranslator:
        assert self.work.translator is not None, "the work has not built its translator yet"
        return self.work.translator

    @property
    def calls(self) -> Any:
        """Calls made so far to the first vCenter, by kind (a Counter)."""
        assert self.work.cluster_rules, "the work has not reached vCenter yet"
        return next(iter(self.work.cluster_rules.values())).calls


@contextlib.asynccontextmanager
async def running_translator(config: DrsTranslatorConfig) -> AsyncIterator[RunningTranslator]:
    """The service as main() runs it, until the first DRS cycle is done; stopped as by SIGTERM."""
    work = DrsTranslatorWork()
    async with running_service(service_spec(work), config, identity="drs-a") as runner:
        await eventually(
            lambda: work.translator is not None and work.translator.cycles > 0,
            "the first DRS cycle",
            30,
        )
        yield RunningTranslator(runner, work)


async def cycles_after(running: RunningTranslator, count: int, within: float = 10.0) -> None:
    """Wait until the translator has finished `count` more cycles than now."""
    target = running.translator.cycles + count
    await eventually(lambda: running.translator.cycles >= target, f"{count} more cycles", within)


def pod_manifest(
    name: str,
    node: str,
    labels: dict[str, str],
    *,
    apart_from: dict[str, str] | None = None,
    near: dict[str, str] | None = None,
    on_hosts: list[str] | None = None,
) -> dict[str, Any]:
    """A scheduled Pod with required (anti-)affinity on the ESXi-host key, or required node
    affinity `In` the host label values `on_hosts`."""
    spec: dict[str, Any] = {
        "nodeName": node,
        "containers": [{"name": "app", "image": "registry.invalid/pause:3"}],
    }
    affinity: dict[str, Any] = {}
    for kind, selector in (("podAntiAffinity", apart_from), ("podAffinity", near)):
        if selector is not None:
            term = {"labelSelector": {"matchLabels": selector}, "topologyKey": LABEL_ESXI_HOST}
            affinity[kind] = {"requiredDuringSchedulingIgnoredDuringExecution": [term]}
    if on_hosts is not None:
        expression = {"key": LABEL_ESXI_HOST, "operator": "In", "values": on_hosts}
        affinity["nodeAffinity"] = {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [expression]}]
            }
        }
    if affinity:
        spec["affinity"] = affinity
    metadata = {"name": name, "namespace": "default", "labels": labels}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


# -- vcsim's DRS state, read with a separate pyVmomi session as an administrator would -----------


def cluster_of(si: vim.ServiceInstance) -> Any:
    (cluster,) = inventory(si, vim.ClusterComputeResource)
    return cluster


def _plain(value: Any) -> Any:
    if isinstance(value, vim.ManagedEntity | vim.ManagedObject):
        return value._moId
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def fields(obj: Any) -> dict[str, Any]:
    """Every property of a rule or group data object, references as moids: field by field."""
    values = {prop.name: _plain(getattr(obj, prop.name)) for prop in obj._GetPropertyList()}
    return {"_type": type(obj).__name__, **values}


def drs_state(si: vim.ServiceInstance) -> dict[str, dict[str, Any]]:
    """Name → fields of every DRS rule (`rule:<name>`) and group (`group:<name>`)."""
    config = cluster_of(si).configurationEx
    state = {f"rule:{r.name}": fields(r) for r in config.rule or ()}
    state.update({f"group:{g.name}": fields(g) for g in config.group or ()})
    return state


def reconfigure(si: vim.ServiceInstance, spec: Any) -> None:
    """One ReconfigureComputeResource_Task as an administrator, waited for."""
    finished(cluster_of(si).ReconfigureComputeResource_Task(spec=spec, modify=True))


def add_anti_affinity_rule(si: vim.ServiceInstance, name: str, vm_moids: Sequence[str]) -> None:
    """An administrator's VM-VM anti-affinity rule over these VMs (or a stray one of any name)."""
    vms = [_vim.VirtualMachine(moid, si._stub) for moid in vm_moids]
    rule = _vim.cluster.AntiAffinityRuleSpec(name=name, enabled=True, vm=vms)
    spec = _vim.cluster.ConfigSpecEx(rulesSpec=[_vim.cluster.RuleSpec(operation="add", info=rule)])
    reconfigure(si, spec)


# A rule named as this install names its rules, made by hand: no record, so a conflict.
STRAY_DIGEST = "0123456789ab"


def install_of(kube: KubeDouble) -> str:
    """The install token the services derive for the double's cluster: its `kube-system`
    Namespace's UID (no ClusterProperty, no configured name)."""
    namespace = kube.read("v1", "namespaces", "kube-system")
    assert namespace is not None
    return install_token(namespace["metadata"]["uid"])


def stray_name(kube: KubeDouble) -> str:
    return str(DrsName("vm-anti-affinity", install_of(kube), STRAY_DIGEST))


def vm(si: vim.ServiceInstance, node: str) -> str:
    return str(vm_by_name(si, node)._moId)


def foreign(state: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Everything not created by the translator: the admin's objects and the stray one."""
    return {k: v for k, v in state.items() if not _ours(v["name"])}


def _ours(name: str) -> bool:
    parsed = parse_drs_name(name)
    return parsed is not None and parsed.digest != STRAY_DIGEST


def anti_rules(si: vim.ServiceInstance) -> dict[str, list[str]]:
    """Our anti-affinity rules: name → sorted VM moids."""
    return {
        v["name"]: sorted(v["vm"])
        for v in drs_state(si).values()
        if _ours(v["name"]) and v["_type"].endswith("AntiAffinityRuleSpec")
    }


async def drs_keys(bus: Bus, prefix: str) -> list[str]:
    kv = await bus.js.key_value(DRS_BUCKET)
    try:
        keys = await kv.keys()
    except Exception:  # nats-py raises NoKeysError for an empty bucket
        return []
    return [key for key in keys if key.startswith(prefix)]


async def kept_announcements(bus: Bus) -> list[str]:
    """The ids of the `drs.rules.applied` events the translator still keeps (not acknowledged
    yet), every vCenter's list read."""
    kv = await bus.js.key_value(DRS_BUCKET)
    kept = []
    for key in await drs_keys(bus, DRS_OUTBOX_KEY_PREFIX):
        entry = await kv.get(key)
        kept += [
            event.id
            for event in msgspec.json.decode(entry.value or b"[]", type=list[DrsRulesApplied])
        ]
    return kept


async def records(bus: Bus) -> dict[str, DrsOwnership]:
    kv = await bus.js.key_value(DRS_BUCKET)
    found = {}
    for key in await drs_keys(bus, DRS_RULE_KEY_PREFIX):
        entry = await kv.get(key)
        found[key] = msgspec.json.decode(entry.value or b"", type=DrsOwnership)
    return found


@contextlib.asynccontextmanager
async def reading_vcenter_after_every_reconfigure(
    si: Any, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[list[dict[str, dict[str, Any]]]]:
    """vCenter's DRS state after each reconfigure the translator makes in this block."""
    states: list[dict[str, dict[str, Any]]] = []
    reconfigure = ClusterRules.reconfigure

    async def and_read(self: ClusterRules, cluster: str, changes: Sequence[Change]) -> None:
        try:
            await reconfigure(self, cluster, changes)
        finally:
            states.append(await asyncio.to_thread(drs_state, si))

    monkeypatch.setattr(ClusterRules, "reconfigure", and_read)
    yield states
