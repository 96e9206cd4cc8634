"""Datasets on the spawn page: which ones a user's teams may read (from the
service's ``GET /datasets``), the form's checkboxes, and the names a spawn
asks for (the form's ``datasets`` checkboxes or ``user_options["datasets"]``
from the hub's REST API). Pure; who may read what is checked again by the
service when the server's workload is submitted and when it starts."""
from __future__ import annotations

import html
from typing import Any, Iterable, Optional

from gpuspawner.vocab.datasets import (MOUNT_ROOT, may_read, mount_point, parse_names,
                                       readers, residency_refusal)
from gpuspawner.vocab.specs import SpecError

from .options import OptionsError


def parse_datasets(options: Any) -> tuple[str, ...]:
    """The dataset names a spawn asks for: a list (form data or the API's
    user_options); none when not given."""
    value = options.get("datasets") if isinstance(options, dict) else None
    if isinstance(value, str):  # one name sent as text (a single-value form field)
        value = [value]
    if isinstance(value, list):
        value = [v for v in value if v != ""]  # the form's empty placeholder
    try:
        return parse_names(value or None)
    except SpecError as e:
        raise OptionsError(e.field, e.message) from None


def readable(datasets: list[dict], teams: Iterable[str]) -> list[dict]:
    """Those of ``datasets`` (as ``GET /datasets`` shows them) a workload of
    one of ``teams`` may read: its own team's and those shared with it."""
    mine = set(teams)
    return [d for d in datasets if mine & readers(d["team"], d.get("shared_with") or ())]


def render_choices(datasets: list[dict], teams: Iterable[str], chosen: Iterable[str] = ()) -> str:
    """The spawn form's datasets: a checkbox each, saying whose it is, which
    of the user's teams may read it, and where it may be read (residency)."""
    if not datasets:
        return ""
    esc = html.escape
    mine, picked = set(teams), set(chosen)
    rows = []
    for d in datasets:
        reading = sorted(mine & readers(d["team"], d.get("shared_with") or ()))
        where = (f"; only in pool{'s' if len(d['pools']) > 1 else ''} {', '.join(d['pools'])}"
                 if d.get("pools") else "")
        rows.append(
            f'<label class="form-check gpuhub-dataset" data-teams="{esc(" ".join(reading))}">'
            f'<input class="form-check-input" type="checkbox" name="datasets" '
            f'value="{esc(d["name"])}"{" checked" if d["name"] in picked else ""}> '
            f'<b>{esc(d["name"])}</b> <span class="small text-secondary">team '
            f'{esc(d["team"])}\'s, read by {esc(", ".join(reading))}{esc(where)} · at '
            f'<code>{esc(mount_point(d["name"]))}</code></span></label>')
    return (f'<fieldset class="gpuhub-datasets mt-2"><legend class="fs-6 mb-1">Datasets '
            f'<span class="small text-secondary">(read-only at {MOUNT_ROOT}/NAME)</span>'
            f'</legend>{"".join(rows)}</fieldset>')


def refusal(names: Iterable[str], seen: list[dict], team: str, pool: str) -> Optional[str]:
    """Why a server of ``team`` in ``pool`` may not read one of ``names``,
    by the listing the form was made from (the service's rules; it checks
    again at the submit): None when it may. ``pool`` "": the service's
    default pool, whose residency the service checks."""
    by_name = {d["name"]: d for d in seen}
    for name in names:
        d = by_name.get(name)
        if d is None:
            return f"no dataset {name} that you may read"
        if not may_read(team, d["team"], d.get("shared_with") or ()):
            return (f"team {team} may not read dataset {name} (it is team {d['team']}'s and "
                    f"not shared with {team}: ask a lead of {d['team']})")
        refused = residency_refusal(name, d.get("pools") or (), pool) if pool else None
        if refused:
            return refused
    return None
