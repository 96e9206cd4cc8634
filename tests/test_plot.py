"""Tests for the per-team GPU usage plot."""

import pytest

from gpuspawner.sim import plot
from gpuspawner.sim.plot import plot_usage

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def busy_timeline(samples, teams=("nlp", "speech", "vision"), step_s=60.0):
    """A deterministic, wavy usage timeline: team i uses a different periodic share of 64 GPUs."""
    return [
        (k * step_s, {team: (k // (7 + 5 * i)) % (8 + 4 * i) + 2 * i for i, team in enumerate(teams)})
        for k in range(samples)
    ]


@pytest.mark.parametrize("samples", [5, 50_000])
def test_plot_usage_writes_png_for_two_policies(tmp_path, samples):
    series = {"fifo": busy_timeline(samples), "fair-share": busy_timeline(samples // 2, step_s=120.0)}
    out = plot_usage(tmp_path / "usage.png", series, capacity=64)
    data = out.read_bytes()
    assert out == tmp_path / "usage.png"
    assert data.startswith(PNG_SIGNATURE)
    assert 10_000 < len(data) < 2_000_000


@pytest.mark.parametrize(
    "series, capacity, message",
    [
        ({"fifo": busy_timeline(3), "drf": []}, 64, "timeline for policy 'drf' is empty"),
        ({}, 64, "series is empty"),
        ({"fifo": [(10.0, {"a": 1}), (5.0, {"a": 2})]}, 64, "not sorted"),
        ({"fifo": busy_timeline(3)}, 0, "capacity must be > 0"),
    ],
)
def test_plot_usage_rejects_bad_input(tmp_path, series, capacity, message):
    with pytest.raises(ValueError, match=message):
        plot_usage(tmp_path / "usage.png", series, capacity=capacity)
    assert not (tmp_path / "usage.png").exists()


@pytest.mark.parametrize(
    "timeline, end, expected_times, expected_values, downsampled",
    [
        ([(0.0, {"a": 1}), (10.0, {"a": 3})], 30.0, [0.0, 10.0, 30.0], [1, 3, 3], False),
        ([(0.0, {"a": 5})], 0.0, [0.0, 0.0], [5, 5], False),
    ],
)
def test_step_samples_keeps_short_timelines_and_extends_to_end(
    timeline, end, expected_times, expected_values, downsampled
):
    times, usages, was_downsampled = plot._step_samples(timeline, end)
    assert times == expected_times
    assert [usage["a"] for usage in usages] == expected_values
    assert was_downsampled is downsampled


def test_step_samples_reads_the_value_in_effect_not_an_average():
    # A square wave: 0 GPUs on even seconds, 10 on odd ones; an average would read 5.
    timeline = [(float(t), {"a": 10 * (t % 2)}) for t in range(10 * plot.MAX_POINTS)]
    times, usages, downsampled = plot._step_samples(timeline, timeline[-1][0])
    assert downsampled and len(times) == plot.MAX_POINTS
    assert times[0] == 0.0 and times[-1] == pytest.approx(timeline[-1][0])
    assert {usage["a"] for usage in usages} <= {0, 10}
    for t, usage in zip(times, usages):
        assert usage["a"] == 10 * (int(t) % 2)
