"""The what-if preview on the admin panel: started from the Teams & quotas
page (``start_from_form``), shown at ``admin/whatif/<id>`` with a progress
bar while it runs (the page fetches its fragment again), then current vs
proposed as a table and charts, the fidelity and the assumptions; Cancel
and Apply are form posts."""
from __future__ import annotations

import datetime as dt

from markupsafe import Markup

from gpuspawner.sim.whatif import ChangeError, duration, parse_setting, percent
from gpuspawner.vocab.specs import SpecError
from gpuspawner.service.panel import charts
from gpuspawner.service.panel.base import PanelHandler
from gpuspawner.service.panel.charts_lines import lines

# The periods the form offers (any other is typed in the API or the CLI).
PERIODS = (("1d", "last day"), ("7d", "last 7 days"), ("14d", "last 14 days"),
           ("30d", "last 30 days"))


def settings_from_form(text: str) -> dict:
    """The form's ``set`` box: one KEY=VALUE a line (blank lines ignored)."""
    out = {}
    for line in (text or "").splitlines():
        if line.strip():
            try:
                key, value = parse_setting(line)
            except ChangeError as e:
                raise SpecError("set", str(e)) from None
            out[key] = value
    return out


async def start_from_form(handler: PanelHandler, typed: dict) -> str:
    """Start the preview the Teams page's form asks for; its id."""
    row = await handler.gpuhub.previews.start(handler.identity, typed.get("since", ""),
                                              settings_from_form(typed.get("set", "")))
    return row.id


def bucket_labels(since: float, bucket_s: float, n: int) -> list[str]:
    """Each bucket's start as the charts name it (UTC)."""
    fmt = "%H:%M:%S" if bucket_s < 60 else "%m-%d %H:%M" if bucket_s < 86400 else "%Y-%m-%d"
    return [dt.datetime.fromtimestamp(since + k * bucket_s, dt.timezone.utc).strftime(fmt)
            for k in range(n)]


def preview_charts(view: dict, since: float) -> dict:
    """The done preview's charts: waits over time per team (current solid,
    proposed dashed, one colour per team) and GPU-hours received against
    nominal."""
    r = view["result"]
    teams = sorted(r["proposed"]["teams"])
    team_colours = charts.colours_for(teams)
    series, colours, dashed = {}, {}, set()
    for team in teams:
        for side in ("current", "proposed"):
            name = f"{team} · {side}"
            series[name] = r[side]["waits_over_time"].get(team, [])
            colours[name] = team_colours[team]
            if side == "proposed":
                dashed.add(name)
    n = max((len(v) for v in series.values()), default=0)
    waits = lines(bucket_labels(since + r["bucket_start_s"], r["bucket_s"], n), series,
                  colours=colours, dashed=dashed,
                  unit="mean wait", title="Mean wait by submit time, current vs proposed",
                  fmt=duration)
    items, bar_colours, notes = [], {}, {}
    for team in teams:
        for side in ("current", "proposed"):
            fig = r[side]["teams"][team]
            label = f"{team} · {side}"
            items.append((label, fig["gpu_hours"]))
            bar_colours[label] = team_colours[team]
            notes[label] = f"nominal {fig['nominal_gpu_hours']:.3g}"
    hours = charts.bars(items, colours=bar_colours, note=notes, unit="GPU-h",
                        title="GPU-hours received in the period, current vs proposed")
    return {"waits": Markup(waits), "hours": Markup(hours)}


class PreviewPage(PanelHandler):
    """``admin/whatif/<id>``: one preview; ``?fragment=1`` its card alone."""

    page, audience = "teams", "lead"

    async def get(self, pid: str):
        await self.show(pid)

    async def show(self, pid: str, status: int = 200, **extra):
        previews = self.gpuhub.previews
        row = previews.get(self.identity, pid)
        view = previews.view(self.identity, row)
        figures = preview_charts(view, row.since) if view["result"] else {}
        template = "_whatif.html" if self.get_argument("fragment", "") else "whatif.html"
        self.render_page(template, status, title=f"What-if preview {pid}", preview=view,
                         charts=figures, duration=duration, pct=percent, **extra)

    async def post(self, pid: str):
        """Cancel or Apply, then back to the Teams page with what happened."""
        action = self.form("action", "")
        warnings: list[tuple[str, str]] = []

        def act():
            if action == "cancel":
                self.gpuhub.previews.cancel(self.identity, pid)
                return f"preview {pid} cancelled"
            if action == "apply":
                done = self.gpuhub.previews.apply(self.identity, pid)
                warnings.extend(("warning", w) for w in done["warnings"])
                return (f"preview {pid} applied: team(s) {', '.join(done['applied'])} saved; the "
                        f"next scheduling cycle uses the new settings")
            raise SpecError("action", f"unknown action {action!r}")

        async def again(**kw):
            await self.show(pid, **kw)

        await self.form_action(act, again, warnings)
