"""Reading the process's Prometheus registry in tests."""

from __future__ import annotations

import httpx
from prometheus_client.parser import text_string_to_metric_families

from shared.metrics import REGISTRY


def background_failures(task: str) -> float:
    """``crank_background_failures_total`` of one background loop (shared.periodic)."""
    return REGISTRY.get_sample_value("crank_background_failures_total", {"task": task}) or 0.0


async def served_counts(port: int, name: str, label: str) -> dict[str, float]:
    """The samples of counter ``name`` a gateway serves on its metrics ``port``, by the
    value of ``label`` (a child never incremented is absent)."""
    async with httpx.AsyncClient() as http:
        text = (await http.get(f"http://127.0.0.1:{port}/metrics")).text
    return {
        sample.labels[label]: sample.value
        for family in text_string_to_metric_families(text)
        if family.name == name.removesuffix("_total")
        for sample in family.samples
        if sample.name == name and label in sample.labels
    }


async def served_gauge(port: int, name: str) -> float:
    """The value of an unlabelled gauge ``name`` a gateway serves on its metrics ``port``."""
    async with httpx.AsyncClient() as http:
        text = (await http.get(f"http://127.0.0.1:{port}/metrics")).text
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name:
                return float(sample.value)
    raise AssertionError(f"{name} is not served")


Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def parse_samples(text: str) -> Samples:
    """Every sample of a Prometheus text exposition, keyed by (name, labels)."""
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


async def scrape(port: int) -> Samples:
    """``parse_samples`` of what a gateway serves on its metrics ``port``."""
    async with httpx.AsyncClient() as http:
        answer = await http.get(f"http://127.0.0.1:{port}/metrics")
    answer.raise_for_status()
    return parse_samples(answer.text)


def labels(**values: str) -> frozenset[tuple[str, str]]:
    """The label set of one sample, as ``parse_samples`` keys it."""
    return frozenset(values.items())
