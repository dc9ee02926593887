"""Prometheus metrics of the service (``serve --metrics``: ``GET /metrics``).

What an operator graphs and alerts on, with no account name, key, query text or document
in any label:

* ``ragprivacy_requests_total{route, status}`` and ``ragprivacy_request_seconds{route}``
  — by route *template* (``/v1/audit/windows/{window_id}/records``), never a raw path;
* ``ragprivacy_refusals_total{reason}`` — refusals by their error code
  (``budget_exhausted``, ``authentication``, ``account_busy``, ``malformed_request``, …);
* ``ragprivacy_charged_total{route}`` and ``ragprivacy_epsilon_spent_total{route}`` —
  requests that spent privacy (answers, and failures charged like answers) and the ε
  they spent, summed over accounts;
* ``ragprivacy_ledger_records`` and ``ragprivacy_window_age_seconds`` — the open window,
  read at scrape time.

Off by default: request counts over time tell whoever can read them how busy the
service is. With ``--workers N`` the workers share one multiprocess directory
(``PROMETHEUS_MULTIPROC_DIR``, which ``serve`` creates), so any worker's ``/metrics``
reports them all.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

__all__ = ["CONTENT_TYPE_LATEST", "ServiceMetrics"]

#: what a scrape reads of the open window: (ledger records, age in seconds), or None
WindowProbe = Callable[[], tuple[int, float] | None]


class _WindowCollector(Collector):
    """The open window's ledger size and age, read when scraped."""

    def __init__(self, probe: WindowProbe) -> None:
        self.probe = probe

    def collect(self) -> Iterable[Metric]:
        seen = self.probe()
        records = GaugeMetricFamily(
            "ragprivacy_ledger_records", "Records in the open window's ledger."
        )
        age = GaugeMetricFamily("ragprivacy_window_age_seconds", "Age of the open window.")
        if seen is not None:
            records.add_metric([], seen[0])
            age.add_metric([], seen[1])
        yield records
        yield age


class ServiceMetrics:
    """The service's metrics in a registry of their own (one per app)."""

    def __init__(self, probe: WindowProbe) -> None:
        self.registry = CollectorRegistry()
        self.multiprocess = bool(os.environ.get("PROMETHEUS_MULTIPROC_DIR"))
        # in multiprocess mode the counters are kept in the shared directory, and the
        # scrape's registry reads them from there (below)
        own = None if self.multiprocess else self.registry
        self.requests = Counter(
            "ragprivacy_requests",
            "Requests by route template and status.",
            ["route", "status"],
            registry=own,
        )
        self.seconds = Histogram(
            "ragprivacy_request_seconds",
            "Request time by route template.",
            ["route"],
            registry=own,
        )
        self.refusals = Counter(
            "ragprivacy_refusals", "Refusals by reason.", ["reason"], registry=own
        )
        self.charged = Counter(
            "ragprivacy_charged",
            "Requests that spent privacy (answers and charged failures).",
            ["route"],
            registry=own,
        )
        self.epsilon = Counter(
            "ragprivacy_epsilon_spent",
            "Privacy (ε) spent by answered requests, summed over accounts.",
            ["route"],
            registry=own,
        )
        self._window = _WindowCollector(probe)
        if not self.multiprocess:
            self.registry.register(self._window)

    def observe(self, route: str, status: int, seconds: float) -> None:
        self.requests.labels(route, str(status)).inc()
        self.seconds.labels(route).observe(seconds)

    def refused(self, reason: str) -> None:
        self.refusals.labels(reason).inc()

    def spent(self, route: str, epsilon: float | None) -> None:
        self.charged.labels(route).inc()
        if epsilon is not None and epsilon > 0:
            self.epsilon.labels(route).inc(epsilon)

    def refusal_counts(self) -> dict[str, float]:
        """Refusals by reason so far (every worker's, in multiprocess mode)."""
        registry = self._scrape_registry()
        out: dict[str, float] = {}
        for metric in registry.collect():
            for sample in metric.samples:
                if sample.name == "ragprivacy_refusals_total":
                    reason = sample.labels.get("reason", "?")
                    out[reason] = out.get(reason, 0.0) + float(sample.value)
        return out

    def _scrape_registry(self) -> CollectorRegistry:
        if not self.multiprocess:
            return self.registry
        from prometheus_client import multiprocess

        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
        registry.register(self._window)
        return registry

    def render(self) -> bytes:
        """The exposition text of every metric (every worker's, in multiprocess mode)."""
        return generate_latest(self._scrape_registry())
