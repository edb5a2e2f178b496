"""The observability files match what a gateway serves: every metric named in the
Prometheus alert rules (deploy/prometheus/alerts.yaml) and in the Grafana
dashboard (deploy/grafana/crank-dashboard.json) is in a real gateway's /metrics,
and the metrics table of docs/operations.md lists exactly the families it serves,
with their types and labels. The files' structure is checked too (no promtool:
Prometheus is not a dependency)."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.support.db import database_url_for
from tests.support.gateway import run_gateway

ROOT = Path(__file__).resolve().parents[2]
ALERTS = ROOT / "deploy" / "prometheus" / "alerts.yaml"
DASHBOARD = ROOT / "deploy" / "grafana" / "crank-dashboard.json"
OPERATIONS = ROOT / "docs" / "operations.md"

# The series a family of each type exposes (``_created`` is left out: nothing should
# query it); a histogram's bare name is no series at all.
SERIES_SUFFIXES = {
    "counter": ("_total",),
    "gauge": ("",),
    "histogram": ("_bucket", "_sum", "_count"),
}
KEYWORDS = {
    "by", "without", "on", "ignoring", "group_left", "group_right",
    "and", "or", "unless", "bool", "offset", "le", "inf", "nan",
}  # fmt: skip
GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
IDENTIFIER = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
DURATION = re.compile(r"^\d+[smhdwy]$")


@dataclass(frozen=True)
class Family:
    name: str
    type: str
    labels: frozenset[str]

    @property
    def series(self) -> set[str]:
        return {self.name + suffix for suffix in SERIES_SUFFIXES[self.type]}


@pytest.fixture(scope="module")
def served(pg_server_url: str, run_database: str, tmp_path_factory: pytest.TempPathFactory) -> str:
    """What a freshly started gateway serves on its metrics port."""

    async def scrape() -> str:
        url = database_url_for(pg_server_url, run_database)
        async with (
            run_gateway(url, tmp_path_factory.mktemp("gateway")) as gateway,
            httpx.AsyncClient() as http,
        ):
            answer = await http.get(f"http://127.0.0.1:{gateway.metrics_port}/metrics")
        answer.raise_for_status()
        return answer.text

    return asyncio.run(scrape())


@pytest.fixture(scope="module")
def families(served: str) -> dict[str, Family]:
    """The served families by name, with the label names their series carry."""
    found: dict[str, Family] = {}
    for family in text_string_to_metric_families(served):
        labels = {name for sample in family.samples for name in sample.labels} - {"le"}
        found[family.name] = Family(family.name, family.type, frozenset(labels))
    # The parser may read a counter's or a histogram's ``_created`` series as a
    # family of its own: it belongs to that family, and nothing should query it.
    for name in [n for n in found if n.endswith("_created")]:
        if found.get(name.removesuffix("_created"), Family("", "gauge", frozenset())).type in (
            "counter",
            "histogram",
        ):
            del found[name]
    return found


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression reads: identifiers that are neither
    functions, keywords, label names nor durations."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # strings (label values, regexes)
    text = re.sub(r"\{[^}]*\}", "", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", "", text)  # ranges and subqueries
    text = GROUPING.sub("", text)  # by (...), on (...): label names
    text = re.sub(r"\$__\w+", "", text)  # Grafana's variables
    names = set()
    for match in IDENTIFIER.finditer(text):
        name = match.group()
        following = text[match.end() :].lstrip()
        if following.startswith("(") or name.lower() in KEYWORDS or DURATION.match(name):
            continue
        names.add(name)
    return names


def alert_rules() -> Iterator[dict[str, Any]]:
    document = yaml.safe_load(ALERTS.read_text())
    for group in document["groups"]:
        yield from group["rules"]


def dashboard_expressions() -> Iterator[str]:
    def walk(panels: list[dict[str, Any]]) -> Iterator[str]:
        for panel in panels:
            for target in panel.get("targets", []):
                yield target["expr"]
            yield from walk(panel.get("panels", []))

    yield from walk(json.loads(DASHBOARD.read_text())["panels"])


def documented_rows() -> dict[str, tuple[str, frozenset[str]]]:
    """The metrics table of docs/operations.md: name -> (type, label names)."""
    text = OPERATIONS.read_text()
    table = text.split("<!-- metrics table -->", 2)[1]
    rows: dict[str, tuple[str, frozenset[str]]] = {}
    for line in table.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) < 4 or not cells[0].startswith("`crank_"):
            continue
        labels = frozenset(re.findall(r"`(\w+)`", cells[2]))
        rows[cells[0].strip("`")] = (cells[1], labels)
    return rows


def series_of(families: dict[str, Family]) -> set[str]:
    return {series for family in families.values() for series in family.series}


def test_the_metric_name_extraction_skips_functions_labels_and_durations() -> None:
    expr = (
        'histogram_quantile(0.99, sum by (le, method) (rate(crank_a_bucket{method!="x"}[5m])))'
        " / on (instance) group_left max without (job) (crank_b)"
        ' and min_over_time(max(crank_c{status=~"a|b"})[10m:1m]) > bool 0'
    )
    assert metric_names(expr) == {"crank_a_bucket", "crank_b", "crank_c"}


def test_every_metric_the_alert_rules_read_is_served(families: dict[str, Family]) -> None:
    served = series_of(families)
    used = {name for rule in alert_rules() for name in metric_names(rule["expr"])}
    assert used, "no metric found in the alert rules"
    assert used - served == set()


def test_every_metric_the_dashboard_reads_is_served(families: dict[str, Family]) -> None:
    served = series_of(families)
    expressions = list(dashboard_expressions())
    used = {name for expr in expressions for name in metric_names(expr)}
    assert len(expressions) >= 20
    assert used - served == set()


def test_the_operations_page_lists_exactly_the_served_metrics(
    families: dict[str, Family],
) -> None:
    documented = documented_rows()
    # Counters are listed as queried (with _total); gauges and histograms by family name.
    expected = {
        (f"{f.name}_total" if f.type == "counter" else f.name): f.type for f in families.values()
    }
    assert {name: kind for name, (kind, _) in documented.items()} == expected
    for family in families.values():
        name = f"{family.name}_total" if family.type == "counter" else family.name
        # A family with no series yet shows no labels in a scrape: only those that do are checked.
        assert family.labels <= documented[name][1], name


def test_the_alert_rules_are_well_formed() -> None:
    document = yaml.safe_load(ALERTS.read_text())
    assert set(document) == {"groups"}
    names: list[str] = []
    anchors = _anchors()
    for group in document["groups"]:
        assert set(group) == {"name", "rules"}, group.get("name")
        assert group["rules"], group["name"]
        for rule in group["rules"]:
            assert set(rule) == {"alert", "expr", "for", "labels", "annotations"}, rule
            assert re.fullmatch(r"Crank[A-Z][A-Za-z0-9]+", rule["alert"])
            assert re.fullmatch(r"\d+[smh]", rule["for"]), rule["alert"]
            assert rule["labels"]["severity"] in {"warning", "critical"}
            assert {"summary", "runbook_url"} <= set(rule["annotations"])
            page, _, anchor = rule["annotations"]["runbook_url"].partition("#")
            assert anchor in anchors[page], rule["annotations"]["runbook_url"]
            assert _balanced(rule["expr"]), rule["alert"]
            names.append(rule["alert"])
    assert len(names) == len(set(names))


def test_the_dashboard_is_a_grafana_dashboard() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    assert {"title", "uid", "panels", "schemaVersion", "templating"} <= set(dashboard)
    (variable,) = dashboard["templating"]["list"]
    assert (variable["type"], variable["query"]) == ("datasource", "prometheus")
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    for panel in dashboard["panels"]:
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24, panel["title"]
        if panel["type"] == "row":
            continue
        assert panel["datasource"]["uid"] == "${datasource}"
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert _balanced(target["expr"]), panel["title"]


def _anchors() -> dict[str, set[str]]:
    """GitHub-style heading anchors of the docs pages the runbook links point to."""
    pages: dict[str, set[str]] = {}
    for page in ("docs/operations.md", "docs/scaling.md"):
        headings = re.findall(r"^#+ (.+)$", (ROOT / page).read_text(), re.MULTILINE)
        pages[page] = {
            re.sub(r"[^a-z0-9 _-]", "", heading.lower()).replace(" ", "-") for heading in headings
        }
    return pages


def _balanced(expr: str) -> bool:
    depth = {"(": 0, "[": 0, "{": 0}
    closing = {")": "(", "]": "[", "}": "{"}
    for char in re.sub(r'"(?:[^"\\]|\\.)*"', "", expr):
        if char in depth:
            depth[char] += 1
        elif char in closing:
            depth[closing[char]] -= 1
            if depth[closing[char]] < 0:
                return False
    return not any(depth.values())
