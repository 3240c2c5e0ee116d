"""Filter and score: kube-scheduler's answers for one pod over many nodes, from the index.

Two modes. KUBE_SCHEDULER reproduces the default profile's placement filters in their order
(NodeAffinity PreFilter narrowing, NodeUnschedulable, TaintToleration, NodeAffinity,
PodTopologySpread, InterPodAffinity: pkg/scheduler/apis/config/v1/default_plugins.go) with
physical domains resolved through the placement map. PHYSICAL decides only the inter-pod terms
and topology spreads whose domain is the ESXi host -- what the scheduler-extender owns, since
kube-scheduler already enforces every other rule (ARCHITECTURE.md "Services").

Each stage yields (nodes, rejection) pairs with one Rejection object per cause (a taint list, a
domain, a term), so a filter over N nodes costs set operations plus the matching pods, and the
first rejecting stage wins per node as in kube-scheduler. Where a stage is "every node but
these", a filter asked about a few nodes tests just those, and `first_fit` tests candidates one
at a time, so neither costs the whole cluster.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Iterator, Mapping, Set

import msgspec

from hostaffinity.affinity import explain, spread_filtering
from hostaffinity.affinity.explain import Rejection
from hostaffinity.affinity.index import ClusterIndex, PodRecord, TermKind
from hostaffinity.affinity.interpod import (
    HOST_KEYS,
    AffinityTerm,
    PodTerms,
    compile_pod_terms,
    incoming_matches_itself,
    incoming_scope,
)
from hostaffinity.affinity.model import Pod, Taint
from hostaffinity.affinity.nodeaffinity import (
    RequiredNodeAffinity,
    preferred_node_terms,
    required_node_affinity,
    required_nodes,
    term_nodes,
)
from hostaffinity.affinity.rejections import Rejections, Stage
from hostaffinity.affinity.scoring import (
    INTER_POD_AFFINITY_WEIGHT,
    MAX_NODE_SCORE,
    NODE_AFFINITY_WEIGHT,
    POD_TOPOLOGY_SPREAD_WEIGHT,
    TAINT_TOLERATION_WEIGHT,
    Groups,
    ScoreResult,
    SparseScores,
    combine,
    normalize_default,
    normalize_min_max,
    normalize_min_max_groups,
)
from hostaffinity.affinity.spread_filtering import DomainCounts
from hostaffinity.affinity.spread_scoring import PreScoreState, prescore
from hostaffinity.affinity.taints import (
    UNSCHEDULABLE_TAINT,
    first_untolerated,
    intolerable_preferences,
    tolerated,
)
from hostaffinity.affinity.topology_spread import (
    NodeInclusion,
    SpreadConstraint,
    SpreadDefaults,
    compile_spread_constraints,
)

_NONE: frozenset[str] = frozenset()
# Up to this many asked nodes, a filter tests them one by one where a stage would otherwise build
# a set over every node (a set difference is cheaper per node, a Python test cheaper in total).
FEW_NODES = 16
# kube-scheduler's default InterPodAffinity arg: existing pods' required affinity terms add this
# to the score of nodes in their domain when the incoming pod matches them (scoring.go).
HARD_POD_AFFINITY_WEIGHT = 1


class FilterMode(enum.Enum):
    """Which rules a filter decides."""

    KUBE_SCHEDULER = "kube-scheduler"
    PHYSICAL = "physical"


class FilterResult(msgspec.Struct, frozen=True):
    """Nodes that passed, in the order asked, and why each other node failed (found on
    demand: read it before the index changes, see rejections.py)."""

    feasible: list[str]
    rejected: Mapping[str, Rejection]

    def summary(self) -> str:
        """kube-scheduler's one-line summary of the rejections."""
        return explain.fit_error_message(len(self.feasible) + len(self.rejected), self.rejected)


def _union(sets: Iterable[Set[str]]) -> set[str]:
    result: set[str] = set()
    result.update(*sets)
    return result


class AffinityEngine:
    """Decides placement for pods against a ClusterIndex the caller keeps current.

    `fail_unplaced`: a node whose ESXi host is unknown (no placement, no label) fails the pod's
    host-level required terms and spreads instead of following kube-scheduler's missing-label
    rules. `spread_defaults`: the profile's topology spread for pods without their own.
    """

    def __init__(
        self,
        index: ClusterIndex,
        *,
        fail_unplaced: bool = False,
        spread_defaults: SpreadDefaults | None = None,
    ) -> None:
        self.index = index
        self.fail_unplaced = fail_unplaced
        self.spread_defaults = SpreadDefaults() if spread_defaults is None else spread_defaults

    def terms(self, pod: Pod, mode: FilterMode = FilterMode.KUBE_SCHEDULER) -> PodTerms:
        """The pod's compiled terms; in PHYSICAL mode only those on the ESXi-host domain."""
        terms = compile_pod_terms(pod, self.index.physical_anti_affinity)
        if mode is FilterMode.KUBE_SCHEDULER:
            return terms

        def physical(kind: tuple[AffinityTerm, ...]) -> tuple[AffinityTerm, ...]:
            return tuple(t for t in kind if t.physical)

        return PodTerms(
            physical(terms.required_affinity),
            physical(terms.required_anti),
            physical(terms.preferred_affinity),
            physical(terms.preferred_anti),
        )

    def spreads(
        self, pod: Pod, mode: FilterMode = FilterMode.KUBE_SCHEDULER
    ) -> tuple[SpreadConstraint, ...]:
        """The topology spreads that apply to the pod: its own (in PHYSICAL mode only those over
        ESXi hosts), else -- in kube-scheduler mode -- the profile's defaults."""
        if pod.spec.topology_spread_constraints:
            spreads = compile_spread_constraints(pod, self.index.physical_anti_affinity)
            if mode is FilterMode.PHYSICAL:
                return tuple(c for c in spreads if c.physical)
            return spreads
        if mode is FilterMode.PHYSICAL:
            return ()
        return self.spread_defaults.for_pod(pod)

    def hard_spreads(
        self, pod: Pod, mode: FilterMode = FilterMode.KUBE_SCHEDULER
    ) -> list[SpreadConstraint]:
        """The DoNotSchedule spreads the filter enforces."""
        return [c for c in self.spreads(pod, mode) if c.hard]

    def spread_counts(
        self, pod: Pod, mode: FilterMode = FilterMode.KUBE_SCHEDULER
    ) -> list[tuple[SpreadConstraint, DomainCounts]]:
        """Each DoNotSchedule spread with the matching pods per domain its filter reads."""
        hard = self.hard_spreads(pod, mode)
        if not hard:
            return []
        state = spread_filtering.prefilter_counts(
            self.index, pod, hard, NodeInclusion(self.index, pod)
        )
        return [(c, state[c.topology_key]) for c in hard]

    def spread_prescore(
        self, pod: Pod, nodes: Iterable[str], mode: FilterMode = FilterMode.KUBE_SCHEDULER
    ) -> PreScoreState | None:
        """PodTopologySpread's PreScore over the (feasible) nodes; None when it skips the pod:
        no ScheduleAnyway spread of its own, nor (kube-scheduler mode) a default one."""
        soft = [c for c in self.spreads(pod, mode) if c.soft]
        if not soft:  # before any set over the nodes: most pods have nothing to score here
            return None
        defaulted = not pod.spec.topology_spread_constraints
        return prescore(
            self.index,
            pod,
            soft,
            self.index.all_nodes() & (nodes if isinstance(nodes, Set) else set(nodes)),
            require_all_keys=not (defaulted and self.spread_defaults.system_defaulted),
            inclusion=NodeInclusion(self.index, pod),
        )

    # -- filter --------------------------------------------------------------------------------

    def filter(
        self,
        pod: Pod,
        nodes: Iterable[str] | None = None,
        *,
        mode: FilterMode = FilterMode.KUBE_SCHEDULER,
    ) -> FilterResult:
        """Which of `nodes` (default: every indexed node) can take the pod, and why not."""
        index = self.index
        if nodes is None:
            order: list[str] = []
            asked: Set[str] | None = None
        else:
            order = list(nodes)
            asked = set(order)
        stages: list[Stage] = []
        if asked is not None:
            stages.append((asked - index.all_nodes(), explain.unknown_node()))
        few = asked if asked is not None and len(asked) <= FEW_NODES else None
        if mode is FilterMode.KUBE_SCHEDULER:
            stages.extend(self._node_stages(pod, few))
        stages.extend(self._pod_stages(pod, mode, few))
        rejected = Rejections(stages, asked)
        failing = rejected.nodes()
        if asked is None:
            return FilterResult(index.feasible_in_order(failing), rejected)
        return FilterResult([n for n in order if n not in failing], rejected)

    def first_fit(
        self, pod: Pod, order: Iterable[str], accept: Callable[[str], bool]
    ) -> str | None:
        """The first node of `order` that `filter` (kube-scheduler mode) would pass and `accept`
        takes, or None.

        Decided one node at a time, for a caller that needs one node and not the reasons: each
        candidate is looked up in the stages' failing sets and its own labels are matched
        against the pod's node affinity, so no set over every node is built and the cost is the
        candidates tried, not the cluster. `order` must hold indexed nodes only.
        """
        required = required_node_affinity(pod)
        names = required.prefilter_names
        failing = [nodes for nodes, _ in self._taint_stages(pod)]
        failing += [nodes for nodes, _ in self._pod_stages(pod, FilterMode.KUBE_SCHEDULER)]
        failing = [nodes for nodes in failing if nodes]
        for node in order:
            if names is not None and node not in names:
                continue
            if any(node in nodes for nodes in failing) or not self._selects(required, node):
                continue
            if accept(node):
                return node
        return None

    def _node_stages(self, pod: Pod, few: Set[str] | None) -> Iterator[Stage]:
        """`few`: the (few) nodes asked, tested one by one instead of every node by set algebra."""
        index = self.index
        everyone = index.all_nodes() if few is None else few
        required = required_node_affinity(pod)
        if required.prefilter_names is not None:
            yield everyone - required.prefilter_names, explain.node_names(required.prefilter_names)
        yield from self._taint_stages(pod)
        if required.is_empty:
            return
        if few is None:
            failing = everyone - required_nodes(required, index)
        else:
            failing = {name for name in few if not self._selects(required, name)}
        yield failing, explain.node_affinity(required)

    def _selects(self, required: RequiredNodeAffinity, name: str) -> bool:
        """The pod's nodeSelector and required node affinity match this indexed node's labels."""
        record = self.index.node(name)
        return record is not None and required.matches(name, record.labels)

    def _taint_stages(self, pod: Pod) -> Iterator[Stage]:
        """NodeUnschedulable then TaintToleration: each failing set is one the index keeps."""
        index = self.index
        tolerations = pod.spec.tolerations
        if index.cordoned() and not tolerated(tolerations, UNSCHEDULABLE_TAINT):
            yield index.cordoned(), explain.cordoned()
        by_taint: dict[Taint, Rejection] = {}
        for taints, group in index.taint_groups().items():
            taint = first_untolerated(tolerations, taints)
            if taint is not None:
                if taint not in by_taint:
                    by_taint[taint] = explain.untolerated_taint(taint)
                yield group, by_taint[taint]

    def _pod_stages(
        self, pod: Pod, mode: FilterMode, few: Set[str] | None = None
    ) -> Iterator[Stage]:
        """PodTopologySpread then InterPodAffinity, the default profile's order."""
        terms = self.terms(pod, mode)
        forbidding = [
            (record, term)
            for record, term in self._forbidding(pod)
            if mode is FilterMode.KUBE_SCHEDULER or term.physical
        ]
        hard_spreads = self.hard_spreads(pod, mode)
        if self.fail_unplaced:
            yield from self._unplaced_stages(terms, forbidding, hard_spreads)
        yield from spread_filtering.filter_stages(
            self.index, pod, hard_spreads, NodeInclusion(self.index, pod)
        )
        yield from self._affinity_stages(pod, terms.required_affinity, few)
        yield from self._anti_affinity_stages(pod, terms.required_anti)
        yield from self._existing_anti_affinity_stages(forbidding)

    def _unplaced_stages(
        self,
        terms: PodTerms,
        forbidding: list[tuple[PodRecord, AffinityTerm]],
        spreads: list[SpreadConstraint],
    ) -> Iterator[Stage]:
        """Nodes with no ESXi host fail every host-level term or spread that concerns the pod."""
        keys = {t.topology_key for t in (*terms.required_affinity, *terms.required_anti)}
        keys.update(t.topology_key for _, t in forbidding)
        keys.update(c.topology_key for c in spreads)
        for key in sorted(keys & HOST_KEYS):
            yield self.index.nodes_without(key), explain.unplaced(key)

    def _affinity_stages(
        self, pod: Pod, terms: tuple[AffinityTerm, ...], few: Set[str] | None
    ) -> Iterator[Stage]:
        """The pod's required affinity (filtering.go satisfyPodAffinity).

        An existing pod counts only if it matches every term; a node must carry every term's
        topology key and share each domain with such a pod -- unless no pod matches anywhere
        and the pod matches its own terms (the first pod of a self-affine group).
        """
        if not terms:
            return
        index = self.index
        scopes = [incoming_scope(t, index.namespaces) for t in terms]
        first, rest = terms[0], list(zip(terms[1:], scopes[1:], strict=True))
        domains: list[set[str]] = [set() for _ in terms]
        for record in index.matching_pods(scopes[0], first.selector):
            if record.key == pod.key or not all(
                record.namespace in scope and t.selector.matches(record.labels) for t, scope in rest
            ):
                continue
            for position, term in enumerate(terms):
                value = index.domain(record.node, term.topology_key)
                if value is not None:
                    domains[position].add(value)
        first_pod = not any(domains) and incoming_matches_itself(pod, terms, scopes)
        for term, values in zip(terms, domains, strict=True):
            with_key = index.nodes_with(term.topology_key)
            yield index.nodes_without(term.topology_key), explain.affinity_missing_key(term)
            if first_pod:
                continue
            if few is None:
                by_value = index.domains(term.topology_key)
                allowed = _union(by_value[v] for v in values if v in by_value)
                failing = with_key - allowed
            else:
                failing = {
                    n
                    for n in few
                    if n in with_key and index.domain(n, term.topology_key) not in values
                }
            yield failing, explain.affinity_unmatched(term)

    def _anti_affinity_stages(self, pod: Pod, terms: tuple[AffinityTerm, ...]) -> Iterator[Stage]:
        """The pod's required anti-affinity (satisfyPodAntiAffinity): each term on its own."""
        index = self.index
        for term in terms:
            culprits: dict[str, PodRecord] = {}
            scope = incoming_scope(term, index.namespaces)
            for record in index.matching_pods(scope, term.selector):
                value = index.domain(record.node, term.topology_key)
                if value is not None and value not in culprits and record.key != pod.key:
                    culprits[value] = record
            by_value = index.domains(term.topology_key)
            for value, record in culprits.items():
                yield by_value.get(value, _NONE), explain.anti_affinity(term, record, value)

    def _forbidding(self, pod: Pod) -> Iterator[tuple[PodRecord, AffinityTerm]]:
        """Existing pods' required anti-affinity terms that select this pod."""
        meta = pod.metadata
        for record, term in self.index.terms_matching("required_anti", meta.namespace, meta.labels):
            if record.key != pod.key:
                yield record, term

    def _existing_anti_affinity_stages(
        self, forbidding: list[tuple[PodRecord, AffinityTerm]]
    ) -> Iterator[Stage]:
        """Existing pods' required anti-affinity (satisfyExistingPodsAntiAffinity)."""
        index = self.index
        seen: dict[tuple[str, str], tuple[PodRecord, AffinityTerm]] = {}
        for record, term in forbidding:
            value = index.domain(record.node, term.topology_key)
            if value is not None:
                seen.setdefault((term.topology_key, value), (record, term))
        for (key, value), (record, term) in seen.items():
            yield (
                index.domains(key).get(value, _NONE),
                explain.existing_anti_affinity(term, record, value),
            )

    # -- score ---------------------------------------------------------------------------------

    def score(
        self,
        pod: Pod,
        nodes: Iterable[str],
        *,
        mode: FilterMode = FilterMode.KUBE_SCHEDULER,
    ) -> ScoreResult:
        """Normalized scores of the given (feasible) nodes, as the default profile ranks them.

        In PHYSICAL mode only host-level inter-pod terms score; the other plugins are
        kube-scheduler's job. The raw scores are computed for the nodes that have one and kept
        sparse (scoring.SparseScores), so a call costs about the matching pods, not the nodes.
        """
        known = self.index.all_nodes()
        names = list(nodes)
        asked = set(names)
        if not asked <= known:  # set operations first: unknown nodes are rare
            names = [n for n in names if n in known]
            asked.intersection_update(known)
        inter_pod, groups = self._inter_pod_scores(pod, asked, mode)
        prescored = self.spread_prescore(pod, asked, mode)
        spread = None if prescored is None else prescored.scores()
        unscored = SparseScores(0)
        if mode is FilterMode.PHYSICAL:
            if spread is None:
                return ScoreResult(names, unscored, unscored, inter_pod, inter_pod, MAX_NODE_SCORE)
            total = combine(
                lambda inter, spreads: inter + spreads,
                inter_pod,
                spread,
                grouped=None if groups is None else (0, groups),
            )
            return ScoreResult(
                names, unscored, unscored, inter_pod, total, 2 * MAX_NODE_SCORE, spread
            )
        taints = normalize_default(self._taint_raw(pod, asked), len(asked), reverse=True)
        node_affinity = normalize_default(
            self._node_affinity_raw(pod, asked), len(asked), reverse=False
        )
        spread_weight = 0 if spread is None else POD_TOPOLOGY_SPREAD_WEIGHT
        total = combine(
            lambda taint, node, inter, spreads: TAINT_TOLERATION_WEIGHT * taint
            + NODE_AFFINITY_WEIGHT * node
            + INTER_POD_AFFINITY_WEIGHT * inter
            + spread_weight * spreads,
            taints,
            node_affinity,
            inter_pod,
            unscored if spread is None else spread,
            grouped=None if groups is None else (2, groups),
        )
        weights = TAINT_TOLERATION_WEIGHT + NODE_AFFINITY_WEIGHT + INTER_POD_AFFINITY_WEIGHT
        weights += spread_weight
        return ScoreResult(
            names,
            taints,
            node_affinity,
            inter_pod,
            total,
            weights * MAX_NODE_SCORE,
            unscored if spread is None else spread,
        )

    def _taint_raw(self, pod: Pod, asked: Set[str]) -> SparseScores:
        raw: dict[str, int] = {}
        for taints, group in self.index.taint_groups().items():
            count = intolerable_preferences(pod.spec.tolerations, taints)
            if count:
                raw.update(dict.fromkeys(group & asked, count))
        return SparseScores(0, raw)

    def _node_affinity_raw(self, pod: Pod, asked: Set[str]) -> SparseScores:
        raw: dict[str, int] = {}
        for weight, term in preferred_node_terms(pod):
            for node in term_nodes(term, self.index):
                if node in asked:
                    raw[node] = raw.get(node, 0) + weight
        return SparseScores(0, raw)

    def _inter_pod_scores(
        self, pod: Pod, asked: Set[str], mode: FilterMode
    ) -> tuple[SparseScores, Groups | None]:
        """InterPodAffinity's normalized scores of the asked nodes, with the node groups they
        list when the scores come by topology domain (for `combine(grouped=...)`).

        A domain's nodes share their raw score, so with one topology key (the usual case) the
        domains are normalized as groups before any node is listed; asked about every node, a
        domain's group is the index's own set of its nodes, not a copy.
        """
        credits = self._inter_pod_credits(pod, mode)
        keys = {key for key, _ in credits}
        if len(keys) != 1:
            return normalize_min_max(self._inter_pod_raw(credits, asked), len(asked)), None
        (key,) = keys
        by_value = self.index.domains(key)
        everyone = len(asked) == len(self.index.all_nodes())  # `asked` holds known nodes only
        groups = []
        for (_, value), weight in credits.items():
            domain = by_value.get(value, _NONE)
            members = domain if everyone else asked & domain
            if members:
                groups.append((weight, members))
        others = len(asked) - sum(len(members) for _, members in groups)
        return normalize_min_max_groups(groups, others)

    def _inter_pod_credits(self, pod: Pod, mode: FilterMode) -> dict[tuple[str, str], int]:
        """Sum of term weights per (topology key, domain) (scoring.go PreScore): the pod's
        preferred terms over the pods they select, and existing pods' terms that select it."""
        index = self.index
        terms = self.terms(pod, mode)
        physical_only = mode is FilterMode.PHYSICAL
        topology: dict[tuple[str, str], int] = {}

        def credit(record: PodRecord, term: AffinityTerm, weight: int) -> None:
            value = index.domain(record.node, term.topology_key)
            if value is not None:
                pair = (term.topology_key, value)
                topology[pair] = topology.get(pair, 0) + weight

        for sign, kind in ((1, terms.preferred_affinity), (-1, terms.preferred_anti)):
            for term in kind:
                scope = incoming_scope(term, index.namespaces)
                for record in index.matching_pods(scope, term.selector):
                    if record.key != pod.key:
                        credit(record, term, sign * term.weight)
        existing: tuple[tuple[TermKind, int], ...] = (
            ("required_affinity", 0),
            ("preferred_affinity", 1),
            ("preferred_anti", -1),
        )
        meta = pod.metadata
        for kind_name, sign in existing:
            for record, term in index.terms_matching(kind_name, meta.namespace, meta.labels):
                if record.key == pod.key or (physical_only and not term.physical):
                    continue
                credit(record, term, HARD_POD_AFFINITY_WEIGHT if sign == 0 else sign * term.weight)
        return topology

    def _inter_pod_raw(self, credits: dict[tuple[str, str], int], asked: Set[str]) -> SparseScores:
        """The raw score (scoring.go Score) of the asked nodes in a domain some term credits."""
        index = self.index
        # One key's domains do not overlap: set operations fill its part, with no per-node loop.
        by_key: dict[str, dict[str, int]] = {}
        for (key, value), weight in credits.items():
            members = asked & index.domains(key).get(value, _NONE)
            by_key.setdefault(key, {}).update(dict.fromkeys(members, weight))
        parts = [SparseScores(0, part) for part in by_key.values()]
        if len(parts) == 1:
            return parts[0]
        return combine(lambda *weights: sum(weights), *parts)
