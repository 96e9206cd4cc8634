"""What a user may ask for on the spawn page: pure functions over the pools
and teams the scheduler service reports.

The same ``parse_options`` checks the spawn form and ``user_options`` sent to
the hub's REST API, so both refuse the same requests with the same message.
"""
from __future__ import annotations

import html
import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Optional

# The service's own rules for a share, so the form refuses what it would.
from gpuspawner.vocab.shares import PoolSharing, parse_share, resolve_share
from gpuspawner.vocab.specs import SpecError

# Said of a sharing pool whose service does not say how it enforces shares:
# what the local backend does without an MPS daemon.
DEFAULT_ENFORCEMENT = "memory watched; compute time-sliced (not enforced)"


class OptionsError(ValueError):
    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


def units_text(units: float) -> str:
    """GPU units as people read them: "2", "0.25", "3.75"."""
    return f"{units:.4f}".rstrip("0").rstrip(".") if units != int(units) else str(int(units))


@dataclass(frozen=True)
class GpuRequest:
    team: str
    pool: str
    gpus: int
    # Part of one GPU (gpus is then 1): a multiple of the pool's smallest share.
    share: Optional[Fraction] = None

    @property
    def cpu_only(self) -> bool:
        return self.gpus == 0

    def wanted(self) -> str:
        """"1/4 of one h200 GPU", "2 × h200 GPUs": the progress page's words."""
        if not self.gpus:
            return "CPUs and memory (no GPU)"
        if self.share:
            return f"{self.share} of one {self.pool} GPU"
        return f"{self.gpus} × {self.pool} GPU{'s' if self.gpus > 1 else ''}"


@dataclass(frozen=True)
class PoolOffer:
    """One pool as one team sees it."""

    pool: str
    model: str
    memory_mib: int
    largest_node: int
    nominal: int
    ceiling: Optional[int]   # nominal + borrowing limit; None: no limit
    used: float              # GPU units the team holds in the pool now (four 1/4 shares: 1.0)
    free_in_pool: int
    notebook_limit: Optional[int]
    # 0: whole GPUs only; N: a GPU may be shared in N equal slots.
    share_units: int = 0
    shared_gpu_mib: int = 0  # the memory a share is part of (the pool's smallest GPU)
    enforcement: str = ""    # how shares are held to their part, as the service says it
    # GPUs here that other teams guarantee and may lend (their nominal, capped by
    # their lending limits): with none, going past the team's own quota borrows nothing.
    lenders: int = 0
    unowned: int = 0         # GPUs here no team guarantees

    def shares(self) -> list[Fraction]:
        """The shares one may ask for here: 1/N up to (N-1)/N."""
        if not self.share_units or self.most < 1:
            return []
        return [Fraction(k, self.share_units) for k in range(1, self.share_units)]

    def share_text(self, share: Fraction) -> str:
        """"1/4 NVIDIA H200 · 35.2 GiB"."""
        return f"{share} {self.model} · {float(share) * self.shared_gpu_mib / 1024:.1f} GiB"

    @property
    def most(self) -> int:
        """Most GPUs one server of the team may ask for here."""
        bounds = [self.largest_node]
        if self.ceiling is not None:
            bounds.append(self.ceiling)
        if self.notebook_limit is not None:
            bounds.append(self.notebook_limit)
        return max(0, min(bounds))

    def within_nominal(self, units: float) -> bool:
        return self.used + units <= self.nominal

    def summary(self) -> str:
        """The team's quota in this pool, said once on the spawn page."""
        limit = "no borrowing limit" if self.ceiling is None \
            else f"may borrow {self.ceiling - self.nominal}"
        gpus = "GPU" if self.nominal == 1 else "GPUs"
        return (f"{units_text(max(0, self.nominal - self.used))} of its {self.nominal} "
                f"{self.pool} {gpus} free in its quota ({limit}), {self.free_in_pool} idle in "
                f"the pool")

    def note(self, units: float) -> str:
        """What asking for ``units`` GPUs (a share: its fraction) here means, if
        anything. "Borrows" only when past the team's free nominal quota and
        some other team guarantees GPUs here to borrow."""
        if self.ceiling is not None and self.used + units > self.ceiling:
            return "the team's quota is in use: waits in the queue until it frees up"
        if self.within_nominal(units):
            return ""
        if self.lenders > 0:
            return "borrows idle GPUs of other teams, so it may be preempted"
        if self.unowned > 0:
            return "more than the team's quota: uses idle GPUs that no team is guaranteed"
        free = units_text(max(0, self.nominal - self.used))
        return (f"more than the team's {free} free {self.pool} GPU{'' if free == '1' else 's'}"
                f" and no other team's to borrow: waits in the queue until they free up")

    def now(self, units: float) -> bool:
        """Would ``units`` start at once: within the team's free quota, on idle GPUs."""
        return not self.note(units) and math.ceil(units) <= self.free_in_pool


def offers(pools: list[dict], teams: list[dict],
           every: Optional[list[dict]] = None) -> dict[str, list[PoolOffer]]:
    """team -> what it can ask for in each pool, from GET /pools and /teams
    (``teams``: the user's; ``every``: all teams, to know who could lend;
    default the user's)."""
    every = teams if every is None else every
    out: dict[str, list[PoolOffer]] = {}
    for team in teams:
        rows = []
        for pool in pools:
            devices = [d for n in pool["nodes"] for d in n.get("devices", []) if d["healthy"]]
            lenders, owned = 0, 0
            for other in every:
                oq = other.get("quotas", {}).get(pool["name"], {})
                owned += oq.get("nominal", 0)
                if other["name"] != team["name"]:
                    limit = oq.get("lending_limit")
                    lenders += min(oq.get("nominal", 0), oq.get("nominal", 0) if limit is None
                                   else limit)
            q = team["quotas"].get(pool["name"], {"nominal": 0, "borrowing_limit": 0})
            ceiling = (None if q.get("borrowing_limit") is None
                       else q["nominal"] + q["borrowing_limit"])
            sharing = pool.get("sharing") or {}
            enforcement = sharing.get("enforcement") or {}
            rows.append(PoolOffer(
                pool=pool["name"], model=devices[0]["model"] if devices else pool["name"],
                memory_mib=devices[0]["memory_mib"] if devices else 0,
                largest_node=max((n["gpus"] for n in pool["nodes"]), default=0),
                nominal=q["nominal"], ceiling=ceiling, used=pool["teams"].get(team["name"], 0),
                free_in_pool=pool["free"],
                notebook_limit=team.get("notebook_gpu_limits", {}).get(pool["name"]),
                share_units=sharing.get("share_units", 0),
                shared_gpu_mib=sharing.get("gpu_memory_mib", 0),
                enforcement=enforcement_text(enforcement) if sharing else "",
                lenders=lenders,
                unowned=max(0, sum(n["gpus"] for n in pool["nodes"]) - owned)))
        out[team["name"]] = rows
    return out


def enforcement_text(enforcement: dict) -> str:
    """How a sharing pool holds shares to their part: the service's labels
    ({"memory": ..., "compute": ...}) or, without them, the local default."""
    if not (enforcement.get("memory") or enforcement.get("compute")):
        return DEFAULT_ENFORCEMENT
    return "; ".join(f"{k} {enforcement[k]}" for k in ("memory", "compute") if enforcement.get(k))


def _one(form: dict, key: str) -> Any:
    value = form.get(key)
    if isinstance(value, list):
        value = value[0] if value else None
    return value


def parse_options(options: dict, teams: dict[str, list[PoolOffer]]) -> GpuRequest:
    """Check a request against what the user's teams can get. ``options`` is
    either form data (lists of strings) or ``user_options`` from the API."""
    if not isinstance(options, dict):
        raise OptionsError("user_options", "must be an object")
    if not teams:
        raise OptionsError("team", "you are in no team, so you cannot use GPUs; ask an admin")
    choice = _one(options, "gpu_choice")
    # An empty form field is no share.
    share, memory = (None if v == "" else v for v in (_one(options, "gpu_share"),
                                                      _one(options, "gpu_memory")))
    if choice:  # the form's radio button: "pool:gpus" or "pool:k/N" (a share)
        pool, _, gpus = str(choice).partition(":")
        if "/" in gpus:
            share, gpus = gpus, 1
    else:
        pool, gpus = _one(options, "pool"), _one(options, "gpus")
    team = _one(options, "team") or (next(iter(teams)) if len(teams) == 1 else None)
    if team is None:
        raise OptionsError("team", f"you are in teams {', '.join(sorted(teams))}: choose which "
                                   f"one pays for this server")
    if team not in teams:
        raise OptionsError("team", f"you are not in team {team!r}")
    try:
        gpus = int(gpus if gpus is not None else 0)
    except (TypeError, ValueError):
        raise OptionsError("gpus", f"must be a whole number, got {gpus!r}")
    if gpus < 0:
        raise OptionsError("gpus", f"must be 0 or more, got {gpus}")
    if gpus == 0 and share is None and memory is None:
        return GpuRequest(team, pool or "", 0)
    by_pool = {o.pool: o for o in teams[team]}
    if pool not in by_pool:
        raise OptionsError("pool", f"unknown pool {pool!r}; pools: {', '.join(sorted(by_pool))}")
    offer = by_pool[pool]
    if share is not None or memory is not None:
        if gpus not in (0, 1):
            raise OptionsError("gpu_share", "is a share of one GPU: leave gpus at 1, or ask "
                                            "for whole GPUs without it")
        fraction = share_of(offer, share, memory)
        if offer.most < 1:
            raise OptionsError("gpu_share", f"team {team} can get no {pool} GPU, nor part of one")
        return GpuRequest(team, pool, 1, fraction)
    if gpus > offer.most:
        why = []
        if offer.notebook_limit is not None and gpus > offer.notebook_limit:
            why.append(f"a notebook server of team {team} may hold at most "
                       f"{offer.notebook_limit} {pool} GPU(s)")
        if offer.ceiling is not None and gpus > offer.ceiling:
            why.append(f"team {team} may hold at most {offer.ceiling} {pool} GPUs (nominal "
                       f"{offer.nominal} + borrowing limit {offer.ceiling - offer.nominal}) and "
                       f"holds {offer.used} now")
        if gpus > offer.largest_node:
            why.append(f"no {pool} machine has more than {offer.largest_node} GPUs")
        raise OptionsError("gpus", f"{gpus} GPUs is more than you can get: {'; '.join(why)}")
    return GpuRequest(team, pool, gpus)


def share_of(offer: PoolOffer, share: Any, memory: Any) -> Fraction:
    """The share of one GPU a request gets in the offer's pool: what it asked
    (``gpu_share`` "1/4" or 0.25, ``gpu_memory`` "35GiB"), rounded up to the
    pool's slots, by the service's own rules (share_specs)."""
    sharing = (PoolSharing(offer.pool, offer.share_units, offer.shared_gpu_mib)
               if offer.share_units else None)
    try:
        asked = parse_share({"gpu_share": share, "gpu_memory": memory})
        return Fraction(resolve_share(asked, offer.pool, sharing)).limit_denominator(64)
    except SpecError as e:
        raise OptionsError(e.field, e.message) from None


def why_no_gpu(teams: dict[str, list[PoolOffer]]) -> str:
    """Why these teams can have no GPU at all ("" when one of them can)."""
    if not teams:
        return "You are in no team, so this server can have no GPU."
    if any(o.most > 0 for offers_ in teams.values() for o in offers_):
        return ""
    reasons = []
    for team in sorted(teams):
        for o in teams[team]:
            if o.largest_node == 0:
                reasons.append(f"pool {o.pool} has no GPU in service")
            elif o.ceiling == 0:
                reasons.append(f"team {team} has no quota in pool {o.pool} (nominal 0, "
                               f"borrowing limit 0)")
            elif o.notebook_limit == 0:
                reasons.append(f"a notebook server of team {team} may hold no {o.pool} GPU")
        if not teams[team]:
            reasons.append("there is no GPU pool")
    return "No GPU for this server: " + "; ".join(dict.fromkeys(reasons)) + "."


def choices_of(offer: PoolOffer) -> list[tuple[str, str, float]]:
    """A pool card's choices, smallest first: (value, text, GPU units)."""
    out = [(f"{offer.pool}:{share}", offer.share_text(share), float(share))
           for share in offer.shares()]
    return out + [(f"{offer.pool}:{n}", f'{n} GPU{"s" if n > 1 else ""}', n)
                  for n in range(1, offer.most + 1)]


def preselect(teams: dict[str, list[PoolOffer]], team: Optional[str]) -> Optional[str]:
    """The choice the form starts on for ``team`` (the team the form starts
    on): its smallest GPU choice that would start now, within its free quota
    on idle GPUs; None (CPU only) when there is none."""
    now = [(units, value) for offer in teams.get(team or "", []) if offer.most >= 1
           for value, _text, units in choices_of(offer) if offer.now(units)]
    # min() keeps the first of equals: the first pool's.
    return min(now, key=lambda c: c[0])[1] if now else None


def render_form(teams: dict[str, list[PoolOffer]], chosen_team: Optional[str] = None,
                admin_fix_url: str = "") -> str:
    """The spawn page's options: which team pays, the team's quota once, then
    a card per choice (CPU only, each pool) whose select picks the GPU
    count and says what it costs the team's quota. When no choice has a
    GPU, why (and, for an admin, ``admin_fix_url``: where to fix it)."""
    esc = html.escape
    parts = []
    names = sorted(teams)
    why = why_no_gpu(teams)
    if why:
        fix = (f' <a href="{esc(admin_fix_url)}" id="gpuhub-fix">Fix it on the admin panel '
               f'(Teams &amp; quotas)</a>.' if admin_fix_url
               else " Ask an admin to add you to a team with a GPU quota.")
        parts.append(f'<div class="alert alert-info" id="gpuhub-no-gpu">{esc(why)}{fix}</div>')
    # The team the form starts on (the browser shows the select's first
    # option unless one is selected), and the choice it starts on.
    start_team = chosen_team if chosen_team in teams else (names[0] if names else None)
    start = preselect(teams, start_team)
    if len(names) > 1:
        opts = "".join(f'<option value="{esc(t)}"{" selected" if t == start_team else ""}>'
                       f'{esc(t)}</option>' for t in names)
        parts.append(f'<label for="gpuhub-team">Team that pays</label>'
                     f'<select id="gpuhub-team" name="team" class="form-control">{opts}</select>')
    elif names:
        parts.append(f'<input type="hidden" name="team" value="{esc(names[0])}">')
    # The team's quota once, then a card per choice (KubeSpawner's profile list look).
    for team in names:
        summary = "; ".join(o.summary() for o in teams[team])
        parts.append(f'<p class="gpuhub-quota small text-secondary mb-2" data-team="{esc(team)}">'
                     f'Team <b>{esc(team)}</b>: {esc(summary)}.</p>')
    parts.append('<div class="gpuhub-profiles" role="radiogroup" aria-label="GPUs">')
    parts.append('<label class="card gpuhub-profile mb-2"><div class="card-body py-2">'
                 f'<input type="radio" name="gpu_choice" value=":0"{"" if start else " checked"}>'
                 ' <b>CPU only</b> '
                 '<span class="small text-secondary">no GPU; starts at once</span>'
                 '</div></label>')
    for team in names:
        parts += [_pool_card(team, offer, start if team == start_team else None,
                             len(names) > 1) for offer in teams[team] if offer.most >= 1]
    parts.append("</div>")
    # A card's select sets (and picks) the card's choice.
    parts.append("<script>document.querySelectorAll('.gpuhub-profile select').forEach(s => "
                 "s.addEventListener('change', () => { const r = s.closest('.gpuhub-profile')"
                 ".querySelector('input[type=radio]'); r.value = s.value; r.checked = true; }));"
                 "</script>")
    return "\n".join(parts)


def _pool_card(team: str, offer: PoolOffer, start: Optional[str], show_team: bool) -> str:
    """One pool's card: its GPU model, and a select of GPU counts with what
    each costs the team's quota (``start``: the choice preselected, if it is one)."""
    esc = html.escape
    who = f' <span class="badge text-bg-secondary">{esc(team)}</span>' if show_team else ""
    choices = choices_of(offer)
    picked = start if any(v == start for v, _, _ in choices) else None
    options = "".join(
        f'<option value="{esc(value)}"{" selected" if value == picked else ""}>'
        f'{esc(text)}'
        f'{" — " + esc(offer.note(units)) if offer.note(units) else ""}</option>'
        for value, text, units in choices)
    shared = (f'<div class="small text-secondary w-100 gpuhub-sharing">Shared GPUs: '
              f'from {offer.shares()[0]} of a GPU; {esc(offer.enforcement)}.</div>'
              if offer.shares() else "")
    return (f'<label class="card gpuhub-profile mb-2" data-team="{esc(team)}" '
            f'data-pool="{esc(offer.pool)}"><div class="card-body py-2 d-flex gap-3 '
            f'align-items-center flex-wrap">'
            f'<input type="radio" name="gpu_choice" value="{esc(picked or choices[0][0])}"'
            f'{" checked" if picked else ""}>'
            f'<span><b>{esc(offer.model)} ({offer.memory_mib // 1024} GiB)</b> '
            f'<span class="small text-secondary">pool {esc(offer.pool)}</span>{who}</span>'
            f'<select class="form-select form-select-sm w-auto gpuhub-gpus" '
            f'aria-label="GPUs in pool {esc(offer.pool)}">{options}</select>{shared}'
            f'</div></label>')
