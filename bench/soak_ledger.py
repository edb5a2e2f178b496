"""The soak's books: each invariant checked against the upstream's own counts, the
database and what the clients saw, printed as PASS/FAIL with the counts behind it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from bench.soak_faults import Faults, Window
from bench.soak_load import Books, Exchange

FINAL = {"completed", "failed", "denied"}
P99_STABLE_FACTOR = 2.0  # the last steady stretch's p99 against the earlier ones' median
P99_SLACK_S = 0.025  # below this a difference is noise on a shared machine
RSS_GROWTH_LIMIT = 0.10
MIN_SAMPLES = 50  # a stretch with fewer exchanges has no p99 worth comparing


@dataclass
class Check:
    name: str
    passed: bool
    lines: list[str] = field(default_factory=list)
    skipped: bool = False  # nothing to judge (a run too short for it); not a failure

    @property
    def verdict(self) -> str:
        return "SKIP" if self.skipped else "PASS" if self.passed else "FAIL"


@dataclass
class Facts:
    """What the run left behind, read after the drain."""

    upstream: dict[str, Any]
    approvals: list[dict[str, Any]]  # id, status, request_id, attempt, answered_id
    decisions_audited: Counter[str]  # approval id -> approval.approved/denied audit rows
    deliveries: list[dict[str, Any]]  # webhook_id, approval_id, event, status, attempts
    rss: dict[str, list[tuple[float, int]]]  # replica -> (at, bytes)
    kills: list[tuple[str, float]]  # (replica, at) of each SIGKILL
    cpu: list[tuple[float, float, float, bool]]  # (at, rate, gateway cores, load saturated)
    log_times: dict[str, list[float]]  # gateway log event -> when (s since the run started)


def approvals_decided_once(books: Books, facts: Facts) -> Check:
    by_id = {a["id"]: a for a in facts.approvals}
    statuses = Counter(a["status"] for a in facts.approvals)
    unknown = [i for i in books.approvals if i not in by_id]
    open_ = [a["id"] for a in facts.approvals if a["status"] not in FINAL]
    audited_wrong = [i for i in by_id if facts.decisions_audited.get(i, 0) != 1]
    twice = [i for i, n in books.decided_ok.items() if n > 1]
    mismatched = [
        a["id"]
        for a in facts.approvals
        if a["id"] in books.decisions
        and (books.decisions[a["id"]] == "deny") != (a["status"] == "denied")
    ]
    lost_answers = sum(1 for i in books.decided_conflict if books.decided_ok.get(i, 0) == 0)
    check = Check(
        "every approval decided exactly once",
        not (unknown or open_ or audited_wrong or twice or mismatched),
    )
    check.lines = [
        f"approvals: {len(facts.approvals)} in the database, {len(books.approvals)} answered to "
        f"clients ({books.approval_requests_abandoned} requests gave up); "
        + ", ".join(f"{s} {n}" for s, n in sorted(statuses.items())),
        f"decision audit rows: exactly one for {len(by_id) - len(audited_wrong)}, "
        f"otherwise {len(audited_wrong)}; approver 200s twice for one id: {len(twice)}; "
        f"409 after a lost answer: {lost_answers}",
        f"not final: {len(open_)}; unknown to the database: {len(unknown)}; "
        f"status against the approver's decision wrong: {len(mismatched)}",
    ]
    _examples(check, open_ + unknown + audited_wrong + twice + mismatched)
    return check


def approvals_executed_at_most_once(facts: Facts) -> Check:
    """Per call (its ``request_id``, the upstream's key): executed at most once, never when
    every approval of it was denied, and a completed one recorded the upstream's answer.
    A call has two approvals when the outcome of its first went to an answer the client
    lost (the next repeat asks anew, docs/architecture.md, "Approval outcomes")."""
    orders = facts.upstream["keys"]["orders"]
    calls: dict[str, list[dict[str, Any]]] = {}
    for a in facts.approvals:
        calls.setdefault(a["request_id"], []).append(a)
    denied_ran, completed_missing, wrong_id = [], [], []
    resent = Counter(orders[key]["requests"] for key in calls if key in orders)
    for key, approvals in calls.items():
        seen = orders.get(key)
        if seen is not None and all(a["status"] == "denied" for a in approvals):
            denied_ran.append(key)
        for a in approvals:
            if a["status"] == "completed" and seen is None:
                completed_missing.append(a["id"])
            elif a["status"] == "completed" and a["answered_id"] != seen["id"]:
                wrong_id.append(a["id"])
    conflicts = sum(k["conflicts"] for k in orders.values())
    strays = [key for key in orders if key not in calls]
    unkeyed = facts.upstream["unkeyed"]["orders"]
    check = Check(
        "every approval executed at most once (the upstream's count)",
        not (denied_ran or completed_missing or wrong_id or conflicts or strays or unkeyed),
    )
    asked_twice = sum(1 for approvals in calls.values() if len(approvals) > 1)
    check.lines = [
        f"calls: {len(calls)} ({asked_twice} asked for a second approval); executed upstream: "
        f"{sum(1 for key in calls if key in orders)} (once per key: the upstream honours "
        f"Idempotency-Key); requests per executed key: "
        + ", ".join(f"{n}x {count}" for n, count in sorted(resent.items())),
        f"denied but executed: {len(denied_ran)}; completed but not executed: "
        f"{len(completed_missing)}; result not the upstream's: {len(wrong_id)}; a key sent "
        f"with another body: {conflicts}; keys of no approval: {len(strays)}; "
        f"requests without a key: {unkeyed}",
    ]
    _examples(check, denied_ran + completed_missing + wrong_id + strays)
    return check


def approval_outcomes_delivered(books: Books, facts: Facts, exchanges: list[Exchange]) -> Check:
    """The repeat call gets each finished approval's outcome, the right one, once. An
    outcome may go to an answer the client lost (a dropped connection); the next repeat
    then opens a second approval, which the flow leaves undelivered."""
    orders = facts.upstream["keys"]["orders"]
    by_id = {a["id"]: a for a in facts.approvals}
    wrong = []
    for approval_id, (meta_id, outcome, answered) in books.outcomes.items():
        a = by_id.get(approval_id)
        expected = {"completed": "ok", "denied": "approval_denied"}.get(a["status"] if a else "")
        right = (
            a is not None
            and meta_id == approval_id
            and a["delivered"]
            and (outcome == expected if expected else outcome not in ("ok", "approval_denied"))
            and (outcome != "ok" or answered == orders.get(a["request_id"], {}).get("id"))
        )
        if not right:
            wrong.append(approval_id)
    undelivered = [a["id"] for a in facts.approvals if not a["delivered"]]
    dropped = sum(1 for e in exchanges if e.kind == "approval" and e.status == 0)
    check = Check(
        "every approval's outcome delivered once, and the right one",
        not wrong
        and len(undelivered) == books.outcomes_waiting + books.outcomes_lost
        and books.outcomes_lost <= dropped,
    )
    outcomes = Counter(outcome for _, outcome, _ in books.outcomes.values())
    check.lines = [
        f"delivered to the repeat call: {len(books.outcomes)} ("
        + ", ".join(f"{o} {n}" for o, n in outcomes.most_common())
        + f"); wrong approval, outcome or result: {len(wrong)}",
        f"delivered to an answer the client lost (its next repeat got a new approval): "
        f"{books.outcomes_lost}, against {dropped} approval-gated calls dropped; not delivered: "
        f"{len(undelivered)} (those second approvals, and flows still waiting at their "
        f"deadline: {books.outcomes_waiting})",
    ]
    _examples(check, wrong + undelivered)
    return check


def idempotent_calls_once(books: Books, facts: Facts, faults: Faults) -> Check:
    """A repeat after success is a replay of the same id. The one exception the gateway
    documents: a record whose write failed because PostgreSQL went away at that instant
    (``idempotency_record_not_saved``) stays locked, then the key goes upstream again
    with the same Idempotency-Key (the upstream acts once)."""
    payments = facts.upstream["keys"]["payments"]
    missing = [k for k in books.accepted if k not in payments]
    wrong = [k for k, i in books.accepted.items() if k in payments and payments[k]["id"] != i]
    conflicts = sum(k["conflicts"] for k in payments.values())
    not_saved = facts.log_times.get("idempotency_record_not_saved", [])
    in_db_window = [
        at for at in not_saved if "database restart" in {w.name for w in faults.active(at)}
    ]
    bad_replays = sum(n for label, n in books.replays.items() if label != "same_id")
    explained = min(books.replays["not_replayed"], len(in_db_window))
    resent = Counter(k["requests"] for k in payments.values())
    check = Check(
        "every accepted idempotent call executed once",
        not (
            missing
            or wrong
            or conflicts
            or bad_replays > explained
            or len(in_db_window) < len(not_saved)
            or facts.upstream["unkeyed"]["payments"]
        ),
    )
    abandoned = Counter(books.abandoned.values())
    check.lines = [
        f"accepted: {len(books.accepted)}; executed upstream: of those {len(books.accepted) - len(missing)}, "
        f"in all {len(payments)} keys; requests per key: "
        + ", ".join(f"{n}x {count}" for n, count in sorted(resent.items())),
        f"answered id not the upstream's: {len(wrong)}; a key sent with another body: {conflicts}; "
        f"repeats after success: {dict(books.replays)}",
        f"gave up after the flow's deadline (not accepted, at most once): {len(books.abandoned)}"
        + (f" {dict(abandoned)}" if abandoned else ""),
        f"records not saved (the gateway's idempotency_record_not_saved): {len(not_saved)}, "
        f"{len(in_db_window)} while PostgreSQL restarted; repeats not replayed for that reason: "
        f"{explained}",
    ]
    _examples(check, missing + wrong)
    return check


def confirmations_single_use(books: Books, facts: Facts) -> Check:
    deletes = facts.upstream["deletes"]
    unsent = [o for o in books.confirmed if o not in deletes]
    check = Check(
        "every DELETE confirmation token used once",
        not (books.token_reuse["accepted"] or books.token_reuse["other"] or unsent),
    )
    check.lines = [
        f"confirmed DELETEs: {len(books.confirmed)}, reached the upstream: "
        f"{len(books.confirmed) - len(unsent)}; a used token sent again: {dict(books.token_reuse)}"
    ]
    return check


def webhooks_delivered(facts: Facts) -> Check:
    received = facts.upstream["webhooks"]
    statuses = Counter(d["status"] for d in facts.deliveries)
    not_delivered = [d["webhook_id"] for d in facts.deliveries if d["status"] != "delivered"]
    never_received = [d["webhook_id"] for d in facts.deliveries if d["webhook_id"] not in received]
    events: dict[str, set[str]] = {}
    for d in facts.deliveries:
        events.setdefault(d["approval_id"], set()).add(d["event"])
    missing_events = []
    for a in facts.approvals:
        wanted = {"approval.created", "approval.decided"}
        if a["status"] in ("completed", "failed"):
            wanted.add(f"approval.{a['status']}")
        if not wanted <= events.get(a["id"], set()):
            missing_events.append(a["id"])
    repeats = sum(1 for r in received.values() if r["count"] > 1)
    check = Check(
        "every webhook delivered at least once",
        not (
            not_delivered
            or never_received
            or missing_events
            or facts.upstream["webhooks_unverified"]
        ),
    )
    check.lines = [
        f"outbox rows: {len(facts.deliveries)} ("
        + ", ".join(f"{s} {n}" for s, n in sorted(statuses.items()))
        + f"); received with a valid signature: {len(received)} ids, {repeats} more than once "
        f"(same webhook-id: at least once); bad signatures: {facts.upstream['webhooks_unverified']}",
        f"not delivered: {len(not_delivered)}; never received: {len(never_received)}; "
        f"approvals missing an event: {len(missing_events)}",
    ]
    _examples(check, not_delivered + never_received + missing_events)
    return check


def no_unexplained_failures(exchanges: list[Exchange], faults: Faults) -> Check:
    """5xx only as the database restart's 503s; dropped connections only when a replica
    was killed; no internal_error tool result outside the database restart."""
    allowed, flagged = Counter[str](), Counter[str]()
    examples: list[str] = []
    for e in exchanges:
        if e.status >= 500 or e.status == 0 or e.outcome == "internal_error":
            names = {w.name for w in faults.active(e.at, e.at + e.latency_s)}
            name = " + ".join(sorted(names))
            label = f"{e.kind} {e.outcome}"
            if (e.status == 503 or e.outcome == "internal_error") and "database restart" in names:
                allowed[f"{label} (database restart)"] += 1
            elif e.outcome.startswith("dropped") and "replica killed" in names:
                allowed[f"{label} (replica killed)"] += 1
            else:
                flagged[f"{label} ({name or 'no fault'})"] += 1
                if len(examples) < 5:
                    examples.append(f"at {e.at:.1f} s: {label} in {name or 'no fault'}")
    by_status = Counter(e.status for e in exchanges if e.status >= 500)
    check = Check("no 5xx other than the database restart's 503s", not flagged)
    check.lines = [
        f"5xx answers by status: {dict(sorted(by_status.items())) or 'none'}",
        f"explained: {dict(allowed) or 'none'}",
        f"unexplained: {dict(flagged) or 'none'}",
        *examples,
    ]
    return check


def steady_stretches(faults: Faults, end: float, warmup_s: float) -> list[tuple[float, float]]:
    """The stretches with no fault (nor its recovery), at least 10 s long."""
    edges = sorted(
        (w.start, (w.end if w.end >= 0 else end) + faults.recovery_s) for w in faults.windows
    )
    stretches, at = [], warmup_s
    for start, stop in edges:
        if start - at >= 10:
            stretches.append((at, start))
        at = max(at, stop)
    if end - at >= 10:
        stretches.append((at, end))
    return stretches


def p99_stable(exchanges: list[Exchange], faults: Faults, end: float, warmup_s: float) -> Check:
    rows = []
    for start, stop in steady_stretches(faults, end, warmup_s):
        latencies = sorted(
            e.latency_s
            for e in exchanges
            if start <= e.at and e.at + e.latency_s < stop and e.kind != "approver"
        )
        if len(latencies) >= MIN_SAMPLES:
            rows.append(
                (start, stop, len(latencies), _quantile(latencies, 0.5), _quantile(latencies, 0.99))
            )
    check = Check("p99 outside the fault windows stable", True, skipped=len(rows) < 2)
    if len(rows) >= 2:
        earlier = sorted(row[4] for row in rows[:-1])
        reference, last = earlier[len(earlier) // 2], rows[-1][4]
        check.passed = last <= max(reference * P99_STABLE_FACTOR, reference + P99_SLACK_S)
        check.lines.append(
            f"the last steady stretch's p99 {1000 * last:.1f} ms against the median of the "
            f"earlier ones, {1000 * reference:.1f} ms (limit: x{P99_STABLE_FACTOR:g} or "
            f"+{1000 * P99_SLACK_S:.0f} ms)"
        )
    else:
        check.lines.append(
            "fewer than two steady stretches with enough exchanges to compare: the run is "
            "too short for this check (the default schedule leaves several)"
        )
    for start, stop, n, p50, p99 in rows:
        check.lines.append(
            f"  {start:6.0f}-{stop:4.0f} s: {n:6d} exchanges, p50 {1000 * p50:6.1f} ms, p99 {1000 * p99:7.1f} ms"
        )
    return check


def rss_growth(facts: Facts, survivor: str, warmup_s: float, end: float) -> Check:
    samples = [(at, b) for at, b in facts.rss.get(survivor, []) if warmup_s <= at <= end and b > 0]
    check = Check("RSS growth under 10% (the replica never killed)", len(samples) >= 2)
    if len(samples) >= 2:
        (t0, first), (t1, last) = samples[0], samples[-1]
        growth = (last - first) / first
        check.passed = growth < RSS_GROWTH_LIMIT
        check.lines.append(
            f"{survivor}: {first / 2**20:.1f} MiB at {t0:.0f} s -> {last / 2**20:.1f} MiB at "
            f"{t1:.0f} s ({100 * growth:+.1f}%); peak {max(b for _, b in samples) / 2**20:.1f} MiB"
        )
    for replica, series in facts.rss.items():
        if replica == survivor:
            continue
        killed = [at for name, at in facts.kills if name == replica]
        after = [
            (at, b) for at, b in series if b > 0 and (not killed or at > killed[-1] + warmup_s)
        ]
        if len(after) >= 2:
            check.lines.append(
                f"{replica} (killed at {', '.join(f'{k:.0f}' for k in killed)} s; since its restart, "
                f"not judged): {after[0][1] / 2**20:.1f} -> {after[-1][1] / 2**20:.1f} MiB"
            )
    return check


def summary(
    exchanges: list[Exchange],
    books: Books,
    facts: Facts,
    faults: Faults,
    end: float,
    cpu_s: dict[str, float],
) -> list[str]:
    kinds = Counter(e.kind for e in exchanges)
    outcomes = Counter(e.outcome for e in exchanges)
    steady = [c for at, _, c, _ in facts.cpu if not faults.active(at)]
    rates = [r for at, r, _, _ in facts.cpu if not faults.active(at)]
    saturated = sum(1 for at, _, _, full in facts.cpu if full and not faults.active(at))
    lines = [
        f"exchanges: {len(exchanges)} in {end:.0f} s ({len(exchanges) / max(end, 1):.0f}/s); "
        + ", ".join(f"{k} {n}" for k, n in sorted(kinds.items())),
        "outcomes: " + ", ".join(f"{o} {n}" for o, n in outcomes.most_common()),
        f"flows started: {dict(books.flows)}; shed (too many in flight): {books.shed}",
    ]
    if steady:
        lines.append(
            f"gateways' CPU outside faults: mean {sum(steady) / len(steady):.2f} cores "
            f"(both replicas), arrival rate mean {sum(rates) / len(rates):.0f}/s; the load "
            f"saturated (shed or p50 > 100 ms) in {saturated} of {len(steady)} 5 s steps"
        )
    for label, seconds in cpu_s.items():
        lines.append(
            f"  CPU {label}: {seconds:.0f} s ({seconds / max(end, 1):.2f} cores over the run)"
        )
    lines.append(
        f"fault windows (s since start; attributed until +recovery {faults.recovery_s:g} s):"
    )
    for w in faults.windows:
        lines.append(f"  {w.name:20s} {w.start:6.1f} - {w.end:6.1f}")
    lines.append(f"upstream faulted answers: {facts.upstream['faulted']}")
    return lines


def _quantile(sorted_values: list[float], q: float) -> float:
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


def _examples(check: Check, ids: Iterable[str]) -> None:
    some = list(ids)[:5]
    if some:
        check.lines.append("e.g. " + ", ".join(some))


def windows_of(faults: Faults, name: str) -> list[Window]:
    return [w for w in faults.windows if w.name == name]
