"""The report page's model: plain dataclasses holding text (every value
already formatted, nothing escaped: the templates escape) and the charts'
data. A section is a list of blocks (``Para``, ``Table``, ``Chart``,
``Facts``, ``Heading``, ``Items``, ``Details``); each block's ``block``
names the template macro that draws it. model.py builds a ``Page``,
render.py draws it."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Dict, List, Tuple, Union


class ReportError(Exception):
    """The directory cannot be reported on. The message is one line and names the path."""


@dataclass
class Para:
    """<p class=cls>text</p>."""

    text: str
    cls: str = ""
    block: ClassVar[str] = "para"


@dataclass
class Cell:
    text: str
    num: bool  # right-aligned


@dataclass
class Table:
    cls: str
    headers: List[str]
    rows: List[List[Cell]]
    row_classes: List[str]  # one per row, "" for none
    block: ClassVar[str] = "table"


@dataclass
class Chart:
    """An empty container the page's script draws into from Page.charts[id]."""

    kind: str  # its class beside "chart": breakdown-chart, attribution-chart, ...
    id: str
    legend: List[Tuple[str, str]]  # (swatch class, text)
    block: ClassVar[str] = "chart"


@dataclass
class Facts:
    """A definition list of (term, text)."""

    items: List[Tuple[str, str]]
    block: ClassVar[str] = "facts"


@dataclass
class Heading:
    text: str
    block: ClassVar[str] = "heading"


@dataclass
class Items:
    """<ul class=cls> of texts."""

    cls: str
    items: List[str]
    block: ClassVar[str] = "items"


@dataclass
class Details:
    """A folded <pre> text."""

    summary: str
    text: str
    block: ClassVar[str] = "details"


Block = Union[Para, Table, Chart, Facts, Heading, Items, Details]


@dataclass
class Part:
    name: str  # class part-<name>
    title: str
    blocks: List[Block]


@dataclass
class Step:
    number: int
    blocks: List[Block]  # before the parts: the duration, or why there is nothing
    parts: List[Part] = field(default_factory=list)
    timeline: List[Block] = field(default_factory=list)  # <section id="timeline-step-N">


@dataclass
class StepLink:
    number: int
    detail: str


@dataclass
class Page:
    title: str
    overview: List[Block]
    links: List[StepLink]
    steps: List[Step]
    charts: Dict[str, Any]  # chart id -> the data its drawer reads
    trend: List[Block] = field(default_factory=list)  # <section id="trend">
    changes: List[Block] = field(default_factory=list)  # <section id="changes">: rlscope-ray diff --report
