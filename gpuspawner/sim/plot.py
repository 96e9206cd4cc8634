"""Plot simulated GPU usage per team, one stacked panel per scheduling policy, to compare policies.

A ``Timeline`` is a list of ``(time_s, {team: gpus_in_use})`` samples sorted by time, read as a step
function: each sample's values hold until the next sample, and the last one holds until the end of the
longest timeline in the figure, so all panels cover the same hours.

Long timelines are downsampled to at most ``MAX_POINTS`` points by reading the step function at evenly
spaced instants. Each plotted value is the exact usage in effect at that instant, never an average, but
spikes shorter than the spacing between instants can fall between two readings; panels drawn this way
say so in their title. The y axis is scaled to the true peak of the full timeline either way.

Drawing uses matplotlib's Agg canvas directly (no pyplot): no display, no global backend switch, safe
in servers and tests.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Mapping
from itertools import pairwise
from pathlib import Path

from matplotlib import colormaps
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

Timeline = list[tuple[float, dict[str, int]]]

MAX_POINTS = 2000


def plot_usage(
    path: str | Path,
    series: Mapping[str, Timeline],
    capacity: int,
    title: str = "GPUs in use per team",
) -> Path:
    """Write a PNG with one stacked step-area panel per policy in ``series``; return its path.

    Panels share both axes; each team keeps its colour and legend position in every panel; a dashed
    line marks ``capacity``.
    """
    if not series:
        raise ValueError("series is empty: give at least one policy's timeline to plot")
    if capacity <= 0:
        raise ValueError(f"capacity must be > 0, got {capacity}")
    for policy, timeline in series.items():
        if not timeline:
            raise ValueError(f"timeline for policy {policy!r} is empty: it needs at least one sample")
        if any(later[0] < earlier[0] for earlier, later in pairwise(timeline)):
            raise ValueError(f"timeline for policy {policy!r} is not sorted by time")

    teams = sorted({team for timeline in series.values() for _, usage in timeline for team in usage})
    colours = _team_colours(teams)
    end = max(timeline[-1][0] for timeline in series.values())
    peak = max(sum(usage.values()) for timeline in series.values() for _, usage in timeline)

    fig = Figure(figsize=(11, 1.2 + 2.8 * len(series)), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(len(series), 1, sharex=True, sharey=True, squeeze=False)[:, 0]
    for ax, (policy, timeline) in zip(axes, series.items()):
        times, usages, downsampled = _step_samples(timeline, end)
        hours = [t / 3600 for t in times]
        base = [0] * len(times)
        # Stack from the last team up, so the legend (alphabetical, top down) reads like the stack.
        for team in reversed(teams):
            top = [b + usage.get(team, 0) for b, usage in zip(base, usages)]
            ax.fill_between(hours, base, top, step="post", color=colours[team], linewidth=0, label=team)
            base = top
        ax.axhline(capacity, color="black", linestyle="--", linewidth=1, label=f"capacity ({capacity})")
        ax.set_title(f"{policy} (sampled at {len(times)} instants)" if downsampled else policy)
        ax.set_ylabel("GPUs")
        ax.grid(axis="y", alpha=0.3)
    axes[0].set_ylim(0, max(capacity, peak) * 1.05)
    axes[-1].set_xlabel("time (hours)")
    fig.suptitle(title)

    handles, labels = axes[0].get_legend_handles_labels()
    order = sorted(range(len(labels)), key=lambda i: (labels[i] not in colours, labels[i]))
    fig.legend([handles[i] for i in order], [labels[i] for i in order], loc="outside right upper")
    fig.savefig(path, dpi=100)
    return Path(path)


def _step_samples(timeline: Timeline, end: float) -> tuple[list[float], list[dict[str, int]], bool]:
    """Return (times, usages, downsampled): the step function's points up to ``end``.

    Short timelines are kept whole, plus a point at ``end`` carrying the last value so the final step
    is drawn. Long ones are read at ``MAX_POINTS`` evenly spaced instants from first sample to ``end``.
    """
    times = [t for t, _ in timeline]
    if len(timeline) < MAX_POINTS:
        return [*times, end], [usage for _, usage in timeline] + [timeline[-1][1]], False
    start = times[0]
    step = (end - start) / (MAX_POINTS - 1)
    instants = [start + k * step for k in range(MAX_POINTS)]
    return instants, [timeline[bisect_right(times, t) - 1][1] for t in instants], True


def _team_colours(teams: list[str]) -> dict[str, tuple[float, float, float, float]]:
    """Distinct colours by team position; qualitative palettes while they last, then a continuous map."""
    if len(teams) <= 10:
        return {team: colormaps["tab10"](i) for i, team in enumerate(teams)}
    if len(teams) <= 20:
        return {team: colormaps["tab20"](i) for i, team in enumerate(teams)}
    return {team: colormaps["turbo"](i / (len(teams) - 1)) for i, team in enumerate(teams)}
