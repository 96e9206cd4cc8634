"""What every admin panel page shares: login through the hub (OAuth cookie),
who may see which page, rendering inside the hub's own page template, and
turning a form's domain error into the page again with the message.

Admins (``custom:gpuhub:admin``) see every page and every team. Team leads
(``custom:gpuhub:team-admin``) see the Teams, Queue and Usage pages limited
to their teams, without the admin actions. Anyone else gets 403. A token
with only ``custom:gpuhub:invoke`` (made for a client of the model
endpoints) gets 403 on every page, the overview included.
"""
from __future__ import annotations

import inspect
import json
import os
from typing import Any, Optional, Sequence
from urllib.parse import urlencode

import jinja2
from jupyterhub._data import DATA_FILES_PATH
from jupyterhub.services.auth import HubOAuth, HubOAuthenticated, UserNotAllowed
from tornado import web

from gpuspawner.store import AuditEntry
from gpuspawner.service.access import job_scope
from gpuspawner.service.access.job_tokens import PREFIX as JOB_TOKEN_PREFIX
from gpuspawner.service.errors import Conflict, Forbidden, NotFound
from gpuspawner.service.api.base import INVOKE_ONLY_REFUSAL, ServiceAccess, hub_user
from gpuspawner.service.access.identity import Identity
from gpuspawner.vocab.specs import SpecError
from gpuspawner.isolation.resources import human_memory
from gpuspawner.service.panel.units import gpus_text, units_text

TEMPLATES = os.path.join(os.path.dirname(__file__), "templates")
HUB_TEMPLATES = os.path.join(DATA_FILES_PATH, "templates")
# (path under the panel, title, who may see it: "admin" or "lead")
PAGES = [("cluster", "Cluster", "admin"), ("teams", "Teams & quotas", "lead"),
         ("queue", "Queue", "lead"), ("usage", "Usage & cost", "lead"),
         ("datasets", "Datasets", "lead"), ("audit", "Audit", "admin")]
# Set once per browser session: the panel login is audited once, not per page.
SESSION_COOKIE = "gpuhub-panel-session"
FORM_ERRORS = {SpecError: 400, Forbidden: 403, NotFound: 404, Conflict: 409}


def environment() -> jinja2.Environment:
    """The panel's templates, which extend the hub's ``page.html`` (as
    ``hub/page.html``) so the panel looks like the rest of the hub."""
    env = jinja2.Environment(
        loader=jinja2.ChoiceLoader([
            jinja2.FileSystemLoader(TEMPLATES),
            jinja2.PrefixLoader({"hub": jinja2.FileSystemLoader(HUB_TEMPLATES)}),
        ]),
        autoescape=True)
    env.filters.update(units=units_text, gpus=gpus_text, memory=human_memory)
    return env


class HubUser:
    """The little of a hub user the hub's page template reads."""

    def __init__(self, name: str):
        self.name = name
        self.json_escaped_name = json.dumps(name)[1:-1]


class PanelHandler(ServiceAccess, HubOAuthenticated, web.RequestHandler):
    page = ""
    audience = "admin"

    @property
    def panel_url(self) -> str:
        return self.gpuhub.service_prefix + "admin/"

    async def prepare(self) -> None:
        token = self.hub_auth.get_token(self, in_cookie=False)
        if token and token.startswith(JOB_TOKEN_PREFIX):  # no page for a job's token
            raise web.HTTPError(403, job_scope.refusal(self.request.method, None))
        model = await hub_user(self)
        try:
            model = self.check_hub_user(model) if model else None
        except UserNotAllowed:
            raise web.HTTPError(403)
        self._hub_auth_user_cache = model
        if model is None:
            # Not logged in (or the cookie expired): through the hub's OAuth.
            if self.request.method in ("GET", "HEAD"):
                self.redirect(self.get_login_url())
                return
            raise web.HTTPError(401, "log in again")
        groups = await self.gpuhub.hub.groups_of(model) if model.get("kind") == "user" else []
        self.identity: Identity = self.gpuhub.identity(model, groups)
        self.scopes = model.get("scopes") or []
        if self.identity.invoke_only:  # a client's token: it shows no page at all
            raise web.HTTPError(403, INVOKE_ONLY_REFUSAL)
        token = self.hub_auth.get_token(self)
        if await self.gpuhub.hub.job_of_token(model, token) is not None:  # one the hub made
            raise web.HTTPError(403, job_scope.refusal(self.request.method, None))
        if not self.allowed(self.audience):
            raise web.HTTPError(403, self.refusal())
        if self.audience != "user" and not self.get_secure_cookie(SESSION_COOKIE):
            with self.facades.records.store.transaction() as s:
                s.add(AuditEntry(time=self.facades.records.clock(), actor=self.identity.name,
                                 action="panel-login", target=self.request.path,
                                 detail={"ip": self.request.remote_ip,
                                         "view": "admin" if self.identity.admin else
                                         "lead of " + ", ".join(sorted(self.identity.leads))}))
            self.set_secure_cookie(SESSION_COOKIE, self.identity.name, expires_days=None,
                                   path=self.panel_url, httponly=True)

    def allowed(self, audience: str) -> bool:
        who = self.identity
        return who.admin or audience == "user" or (audience == "lead" and bool(who.leads))

    def refusal(self) -> str:
        """Why this person may not see this page, in their terms."""
        title = next((t for p, t, _ in PAGES if p == self.page), "This page")
        leads = ", ".join(sorted(self.identity.leads))
        if leads:
            mine = ", ".join(t for p, t, who in PAGES if self.allowed(who))
            return (f"{title} is for GPU Hub admins (scope custom:gpuhub:admin). As a lead of "
                    f"{leads} you see {mine}.")
        return (f"{title} is part of the GPU Hub admin panel, for admins (scope "
                f"custom:gpuhub:admin) and team leads (custom:gpuhub:team-admin).")

    @property
    def teams(self) -> Optional[list[str]]:
        """The teams this person may see; None: all (admins)."""
        return None if self.identity.admin else sorted(self.identity.leads)

    def render_page(self, template: str, status: int = 200, **context: Any) -> None:
        auth = HubOAuth.instance()
        hub = auth.hub_prefix
        scopes = {s.partition("!")[0]: True for s in self.scopes}
        if self.gpuhub.hub.is_admin(self.identity.name):
            scopes["admin-ui"] = True  # the hub's own Admin entry in the navbar
        service = os.environ.get("JUPYTERHUB_SERVICE_NAME", "gpuhub")
        ctx = dict(
            base_url=hub, prefix=hub.rsplit("hub/", 1)[0] or "/",
            static_url=lambda path, include_version=True: f"{hub}static/{path}",
            user=HubUser(self.identity.name), parsed_scopes=scopes,
            services=[{"name": service, "href": self.gpuhub.service_prefix}],
            logout_url=f"{hub}logout", login_url=f"{hub}login", no_spawner_check=True,
            xsrf_token=self.xsrf_token.decode() if isinstance(self.xsrf_token, bytes)
            else self.xsrf_token,
            admin_access=False, version_hash="", announcement="",
            panel=self.panel_url, api=self.gpuhub.api_prefix, page=self.page,
            home=self.gpuhub.service_prefix,
            tabs=[(p, title) for p, title, who in PAGES if self.allowed(who)],
            who=self.identity, is_admin=self.identity.admin,
            done=self.get_argument("done", ""), currency=self.gpuhub.currency,
            isolation_notices=self.gpuhub.isolation_notices(),
        )
        ctx.update(context)
        self.set_status(status)
        self.set_header("Cache-Control", "no-store")
        self.finish(self.settings["panel_templates"].get_template(template).render(**ctx))

    def _handle_request_exception(self, e: BaseException) -> None:
        for kind, code in FORM_ERRORS.items():
            if isinstance(e, kind):
                self.send_error(getattr(e, "status", None) or code,
                                exc_info=(type(e), e, e.__traceback__))
                return
        super()._handle_request_exception(e)

    def write_error(self, status_code: int, **kwargs) -> None:
        """The error in the hub's page, with the navbar and a way back."""
        exc = kwargs.get("exc_info", (None, None, None))[1]
        message = {403: "This page needs the GPU Hub admin scope (custom:gpuhub:admin), or the "
                        "team-admin scope for a team lead's view.",
                   401: "Your login expired: reload the page to log in again."}.get(
            status_code, self._reason)
        if isinstance(exc, web.HTTPError) and exc.log_message and status_code != 401:
            message = exc.log_message
        elif isinstance(exc, tuple(FORM_ERRORS)):
            message = str(exc)
        if getattr(self, "identity", None) is None:
            self.set_header("Content-Type", "text/html; charset=UTF-8")
            self.finish(f"<!doctype html><title>{status_code} {self._reason}</title>"
                        f"<h1>{status_code} {self._reason}</h1>"
                        f"<p>{web.escape.xhtml_escape(message)}</p>"
                        f'<p><a href="{HubOAuth.instance().hub_prefix}home">Back to the hub</a></p>')
            return
        self.clear_header("Content-Type")
        self.render_page("error.html", status_code, message=message, status_code=status_code,
                         status_reason=self._reason, title=f"{status_code} {self._reason}",
                         page="")

    def done(self, message: str, extra: Sequence[tuple[str, str]] = ()) -> None:
        """After a successful form: back to the page (303, so a reload does
        not post again), with what happened."""
        query = urlencode([("done", message), *extra])
        self.redirect(f"{self.panel_url}{self.page}?{query}", status=303)

    async def form_action(self, action, rerender, extra: Sequence[tuple[str, str]] = ()) -> None:
        """Run ``action()`` (awaited if it is a coroutine); on a domain error
        show the page again with the error and its status code (the form
        keeps what was typed)."""
        try:
            message = action()
            if inspect.isawaitable(message):
                message = await message
        except tuple(FORM_ERRORS) as e:
            status = getattr(e, "status", None) or next(
                code for kind, code in FORM_ERRORS.items() if isinstance(e, kind))
            field = getattr(e, "field", "")
            await rerender(status=status, error=str(e), error_field=field)
            return
        self.done(message, extra)

    def form(self, name: str, default: Optional[str] = None) -> Optional[str]:
        return self.get_body_argument(name, default)
