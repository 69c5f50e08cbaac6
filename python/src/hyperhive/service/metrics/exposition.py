"""Prometheus's text exposition format 0.0.4, written (pure): families of samples → the bytes a scraper reads.

The format is a few lines of text per family (`# HELP`, `# TYPE`, then one line per sample), so it is written
here rather than with prometheus_client: the service needs no registry, no global state and no dependency to
say two dozen numbers (the tests parse what this writes with prometheus_client's own parser, and
benchmarks/metrics.py measures both side by side).

https://prometheus.io/docs/instrumenting/exposition_formats/#text-based-format
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

CONTENT_TYPE = b"text/plain; version=0.0.4; charset=utf-8"

Kind = Literal["counter", "gauge", "histogram"]
Labels = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Sample:
    """One line: the family's name with `suffix` (a histogram's `_bucket`, `_count`, `_sum`), labels, value."""

    labels: Labels
    value: float
    suffix: str = ""


@dataclass(frozen=True)
class Family:
    """Samples of one metric: its name (a counter's ends in `_total`), type and help text."""

    name: str
    kind: Kind
    help: str
    samples: list[Sample] = field(default_factory=list)

    def add(self, value: float, **labels: str) -> None:
        self.samples.append(Sample(tuple(labels.items()), value))


def histogram(
    name: str, help: str, bounds: Sequence[float], series: Iterable[tuple[Labels, Sequence[int], int, float]]
) -> Family:
    """A histogram family: for each series its labels, cumulative counts per bound of `bounds`, its count (the
    `+Inf` bucket) and its sum."""
    family = Family(name, "histogram", help)
    for labels, counts, count, total in series:
        for bound, n in zip(bounds, counts, strict=True):
            family.samples.append(Sample((*labels, ("le", number(bound))), n, "_bucket"))
        family.samples.append(Sample((*labels, ("le", "+Inf")), count, "_bucket"))
        family.samples.append(Sample(labels, count, "_count"))
        family.samples.append(Sample(labels, total, "_sum"))
    return family


def number(value: float) -> str:
    """A value as the format writes it: integers without a fraction, `+Inf`, `-Inf`, `NaN`."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if float(value).is_integer() and abs(value) < 1e15:
        return str(int(value))
    return repr(float(value))


def _label_value(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def render(families: Iterable[Family]) -> bytes:
    """The exposition of `families`, in their order, as UTF-8."""
    out: list[str] = []
    for family in families:
        out.append(f"# HELP {family.name} {_help(family.help)}\n# TYPE {family.name} {family.kind}\n")
        for sample in family.samples:
            labels = ",".join(f'{k}="{_label_value(v)}"' for k, v in sample.labels)
            out.append(f"{family.name}{sample.suffix}{'{' + labels + '}' if labels else ''} {number(sample.value)}\n")
    return "".join(out).encode()
