"""The HTML report's timeline: step phases, device utilization and power on one time axis.

One SVG, lanes stacked over a shared time axis (seconds since the recording started):

- one lane of steps per rank (up to ``MAX_RANK_LANES``), each step drawn where it ran,
  split into its phases, and its compute split into forward / backward / optimizer where
  those were measured; a long run draws bins of consecutive steps, each bin split in
  proportion to its phases' summed time;
- per device, utilization (0-100 %) and, where the device reports it, power (W).

Every segment and point carries a ``<title>`` (the browser's hover text) with its value.
A finding about a phase or a device gets a marked region (``id="finding-<n>"``) on the
lane it is about, so the report can link from the finding's evidence to the picture.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from html import escape

import numpy as np

from gpuwise.records import Finding, Run, Step
from gpuwise.report import svg
from gpuwise.report.units import DEVICE_COLORS, PHASE_COLORS, format_seconds
from gpuwise.telemetry.summary import Series

SPLIT_COLORS = {"forward": "#8cb8e0", "backward": "#2c5582", "optimizer": "#b07aa1"}
"""The compute phase's parts: light and dark shades of the compute colour, the optimizer
apart; compute outside the three keeps the compute colour."""
MAX_RANK_LANES = 8
MAX_SEGMENT_GROUPS = 400
"""Step groups drawn per rank lane; longer runs bin consecutive steps."""
MAX_POINTS = 160
"""Hover points per line (the line itself keeps its min/max decimation)."""
STEP_LANE, UTIL_LANE, POWER_LANE, LANE_GAP = 26, 64, 46, 14
LABEL_W = svg.MARGIN_LEFT

PHASE_REGIONS = {
    "input_bound": "data_wait",
    "transfer_bound": "h2d",
    "pageable_h2d": "h2d",
    "model_bound": "compute",
    "optimizer_bound": "optimizer",
    "backward_heavy": "backward",
    "small_batch": "compute",
    "host_sync": "post",
}
"""Findings about a step phase: the phase whose longest occurrence they mark."""
DEVICE_REGIONS = {
    "gpu_idle_between_phases": "util",
    "idle_reserved": "util",
    "memory_headroom": "util",
    "thermal_throttle": "power",
}
"""Findings about a device: the lane they mark."""


@dataclass
class Timeline:
    """The drawn timeline and where each finding points on it.

    Attributes:
        svg: The ``<svg>`` element, or a one-line note when there is nothing to draw.
        anchors: Finding position in ``run.findings`` to the id of its marked region.
    """

    svg: str
    anchors: dict[int, str] = field(default_factory=dict)


@dataclass
class _Layout:
    x0: float
    x1: float
    y: float = svg.MARGIN_TOP

    def px(self, t: float) -> float:
        span = (self.x1 - self.x0) or 1.0
        return LABEL_W + (t - self.x0) / span * (svg.WIDTH - svg.MARGIN_RIGHT - LABEL_W)


def step_segments(step: Step) -> list[tuple[str, float]]:
    """The step's parts in the order they ran: ``(name, seconds)``, compute split if known."""
    parts = [("data_wait", step.data_wait_s), ("h2d", step.h2d_s)]
    if step.forward_s is None:
        parts.append(("compute", step.compute_s))
    else:
        split = [
            ("forward", step.forward_s),
            ("backward", step.backward_s or 0.0),
            ("optimizer", step.optimizer_s or 0.0),
        ]
        rest = max(step.compute_s - sum(v for _, v in split), 0.0)
        parts += [*split, ("compute", rest)]
    parts.append(("post", step.post_s))
    return parts


def _color(part: str) -> str:
    return SPLIT_COLORS.get(part) or PHASE_COLORS[part]


def time_range(run: Run) -> tuple[float, float] | None:
    """First and last time the Run's steps and samples cover (``None``: neither)."""
    steps = [s for s in run.steps if s.total_s > 0]
    times = [s.t_s for s in run.samples if s.event is None] + [s.start_s for s in steps]
    times += [s.start_s + s.total_s for s in steps]
    return (min(times), max(times)) if times else None


def build_timeline(run: Run, span_s: float | None = None, title: str | None = None) -> Timeline:
    """Draw the Run's timeline (see the module docstring).

    Args:
        run: The Run.
        span_s: Seconds the axis covers from the Run's start (default: the Run's own
            duration); two Runs drawn with the same span share one scale.
        title: The picture's title (default: what it shows).

    Returns:
        The timeline; without steps and samples, a one-line note instead of a picture.
    """
    steps = [s for s in run.steps if s.total_s > 0]
    samples = [s for s in run.samples if s.event is None]
    covered = time_range(run)
    if covered is None:
        return Timeline('<p class="note" id="timeline">no steps or device samples recorded</p>')
    lay = _Layout(covered[0], covered[0] + span_s if span_s else covered[1])
    body: list[str] = []
    marks: list[tuple[int, str, str]] = []  # finding index, lane kind, region key
    for i, finding in enumerate(run.findings):
        if finding.kind in PHASE_REGIONS:
            marks.append((i, "phase", PHASE_REGIONS[finding.kind]))
        elif finding.kind in DEVICE_REGIONS:
            marks.append((i, "device", DEVICE_REGIONS[finding.kind]))
    anchors: dict[int, str] = {}
    ranks = sorted({s.rank for s in steps})
    for n, rank in enumerate(ranks[:MAX_RANK_LANES]):
        label = f"rank {rank}" if len(ranks) > 1 else "steps"
        lane = [s for s in steps if s.rank == rank]
        body += _step_lane(lay, lane, label, marks if n == 0 else [], anchors)
    if len(ranks) > MAX_RANK_LANES:
        body.append(_note(lay, f"{len(ranks) - MAX_RANK_LANES} more ranks not drawn"))
    devices = list(dict.fromkeys(s.device for s in samples))
    for n, device in enumerate(devices):
        series = Series.from_samples(samples, device)
        colour = DEVICE_COLORS[n % len(DEVICE_COLORS)]
        body += _device_lanes(lay, device, series, colour, marks if n == 0 else [], anchors)
    height = int(lay.y + 22)
    head = svg.open_svg(title or "timeline: step phases, utilization and power over time", height)
    head[0] = head[0].replace('class="plot"', 'class="plot timeline" id="timeline"')
    axis = _time_axis(lay, height)
    legend = svg.legend(_legend_items(steps))
    return Timeline("".join([*head, *body, axis, legend, "</svg>"]), anchors)


def _legend_items(steps: Sequence[Step]) -> list[tuple[str, str]]:
    parts = dict.fromkeys(p for s in steps[:50] for p, _ in step_segments(s))
    return [(p, _color(p)) for p in parts]


def _note(lay: _Layout, text: str) -> str:
    y = lay.y + 12
    lay.y += 18
    return f'<text x="{LABEL_W}" y="{y:.1f}">{escape(text)}</text>'


def _groups(steps: list[Step]) -> list[list[Step]]:
    per = max(1, -(-len(steps) // MAX_SEGMENT_GROUPS))
    ordered = sorted(steps, key=lambda s: s.start_s)
    return [ordered[i : i + per] for i in range(0, len(ordered), per)]


def _step_lane(
    lay: _Layout,
    steps: list[Step],
    label: str,
    marks: list[tuple[int, str, str]],
    anchors: dict[int, str],
) -> list[str]:
    top = lay.y
    out = [f'<g class="lane" id="lane-{escape(label.replace(" ", "-"))}">']
    out.append(f'<text class="ytick" x="{LABEL_W - 6}" y="{top + 14:.1f}">{escape(label)}</text>')
    longest: dict[str, tuple[float, float, float, str]] = {}  # part: (seconds, x0, x1, what)
    for group in _groups(steps):
        start = group[0].start_s
        span = group[-1].start_s + group[-1].total_s - start
        sums: dict[str, float] = {}
        for s in group:
            for part, value in step_segments(s):
                sums[part] = sums.get(part, 0.0) + value
        total = sum(sums.values()) or 1.0
        what = (
            f"step {group[0].index}"
            if len(group) == 1
            else (f"steps {group[0].index}-{group[-1].index}")
        )
        t = start
        for part, value in sums.items():
            width_s = value / total * span
            x0, x1 = lay.px(t), lay.px(t + width_s)
            t += width_s
            mean = value / len(group)
            if x1 - x0 >= 0.2:
                tip = f"{what}: {part} {format_seconds(mean)}" + (
                    " (mean)" if len(group) > 1 else ""
                )
                out.append(
                    f'<rect class="seg" x="{x0:.2f}" y="{top:.1f}" width="{x1 - x0:.2f}" '
                    f'height="{STEP_LANE}" fill="{_color(part)}">'
                    f"<title>{escape(tip)}</title></rect>"
                )
            if mean > longest.get(part, (-1.0,))[0]:
                longest[part] = (mean, x0, x1, what)
    out.append("</g>")
    for index, kind, key in marks:
        if kind == "phase" and key in longest:
            seconds, x0, x1, what = longest[key]
            anchors[index] = f"finding-{index}"
            tip = f"longest {key}: {what}, {format_seconds(seconds)}"
            out.append(_mark(anchors[index], x0, x1, top, STEP_LANE, tip))
    lay.y += STEP_LANE + LANE_GAP
    return out


def _mark(anchor: str, x0: float, x1: float, top: float, height: float, tip: str) -> str:
    x0, x1 = x0 - 3, max(x1, x0 + 1) + 3  # a marked region stays visible when tiny
    return (
        f'<rect class="mark" id="{anchor}" x="{x0:.1f}" y="{top - 3:.1f}" '
        f'width="{x1 - x0:.1f}" height="{height + 6:.1f}"><title>{escape(tip)}</title></rect>'
    )


def _device_lanes(
    lay: _Layout,
    device: str,
    series: Series,
    colour: str,
    marks: list[tuple[int, str, str]],
    anchors: dict[int, str],
) -> list[str]:
    out: list[str] = []
    util = series.columns["utilization_pct"]
    power = series.columns["power_w"]
    lanes = [("util", f"{device} util", util, UTIL_LANE, 100.0, "%")]
    if np.isfinite(power).any():
        top_w = float(np.nanmax(power)) * 1.1 or 1.0
        lanes.append(("power", f"{device} power", power, POWER_LANE, top_w, "W"))
    for key, label, values, height, top_value, unit in lanes:
        top = lay.y
        out.append(f'<g class="lane" id="lane-{escape(device)}-{key}">')
        out.append(
            f'<rect class="laneback" x="{LABEL_W}" y="{top:.1f}" '
            f'width="{svg.WIDTH - svg.MARGIN_RIGHT - LABEL_W}" height="{height}"/>'
        )
        out.append(
            f'<text class="ytick" x="{LABEL_W - 6}" y="{top + 12:.1f}">{escape(label)}</text>'
        )
        out.append(f'<text class="ytick" x="{LABEL_W - 6}" y="{top + height:.1f}">0</text>')
        out += _line(
            lay, series.t_s, values, top, height, top_value, colour, f"{device} {key}", unit
        )
        out.append("</g>")
        for index, kind, region in marks:
            if kind == "device" and region == key:
                anchors[index] = f"finding-{index}"
                x1 = svg.WIDTH - svg.MARGIN_RIGHT
                out.append(_mark(anchors[index], LABEL_W, x1, top, height, f"{label}: see here"))
        lay.y += height + LANE_GAP
    return out


def _line(
    lay: _Layout,
    t_s: svg.FloatArray,
    values: svg.FloatArray,
    top: float,
    height: float,
    top_value: float,
    colour: str,
    what: str,
    unit: str,
) -> list[str]:
    def py(v: float) -> float:
        return top + height - min(max(v / top_value, 0.0), 1.0) * height

    kept_t, kept_v = svg.decimate(t_s, values, svg.MAX_LINE_POINTS)
    path, run = [], []
    for t, v in zip(kept_t, kept_v, strict=True):
        if np.isfinite(v):
            run.append(f"{lay.px(float(t)):.1f} {py(float(v)):.1f}")
        elif run:
            path.append("M" + " L".join(run))
            run = []
    if run:
        path.append("M" + " L".join(run))
    out = [f'<path class="series" stroke="{colour}" d="{" ".join(path)}"/>'] if path else []
    finite = np.flatnonzero(np.isfinite(values))
    step = max(1, -(-finite.size // MAX_POINTS))
    for i in finite[::step]:
        t, v = float(t_s[i]), float(values[i])
        tip = escape(f"{what} at {t:.1f} s: {v:.0f} {unit}")
        out.append(
            f'<circle class="pt" cx="{lay.px(t):.1f}" cy="{py(v):.1f}" r="2.2" fill="{colour}">'
            f"<title>{tip}</title></circle>"
        )
    return out


def _time_axis(lay: _Layout, height: int) -> str:
    y = lay.y - LANE_GAP + 4
    parts = [
        f'<line class="grid" x1="{LABEL_W}" x2="{lay.px(lay.x1):.1f}" y1="{y:.1f}" y2="{y:.1f}"/>'
    ]
    for t in svg.nice_ticks(lay.x0, lay.x1, 8):
        parts.append(f'<text class="xtick" x="{lay.px(t):.1f}" y="{y + 14:.1f}">{t:g}</text>')
    parts.append(f'<text class="xlabel" x="{LABEL_W - 6}" y="{y + 14:.1f}">time (s)</text>')
    return "".join(parts)


def finding_link(timeline: Timeline, index: int, finding: Finding) -> str:
    """A link from a finding to its marked region, or nothing when it has none."""
    anchor = timeline.anchors.get(index)
    if anchor is None:
        return ""
    return f' <a class="region" href="#{anchor}">see it on the timeline ↑</a>'
