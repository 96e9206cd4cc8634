"""The authorize page (NativeAuthenticator's /hub/authorize) without its
one-click lock-out: an admin cannot unauthorize themselves (the first
admin would lose the hub with one click, and nobody could let them back
in), and unauthorizing another admin asks for a confirmation first.

Both the page (templates/authorization-area.html: no Unauthorize link on
one's own row, admins' rows marked) and the toggle behind it
(/hub/authorize/NAME, a GET link) are guarded: a bookmarked or typed URL
meets the same rules.
"""
from __future__ import annotations

from nativeauthenticator.handlers import (AuthorizationAreaHandler, ToggleAuthorizationHandler,
                                          admin_users_scope)
from nativeauthenticator.orm import UserInfo

SELF = ("You cannot unauthorize yourself: you could no longer log in, and no one could "
        "authorize you again unless another admin does. Another admin can unauthorize you.")


def admin_names(handler) -> set[str]:
    from jupyterhub import orm
    return {u.name for u in handler.db.query(orm.User).filter(orm.User.admin.is_(True))}


class GuardedAuthorizationArea(AuthorizationAreaHandler):
    """The list of users, knowing who is looking and who the admins are."""

    @admin_users_scope
    async def get(self):
        html = await self.render_template(
            "authorization-area.html",
            ask_email=self.authenticator.ask_email_on_signup,
            users=self.db.query(UserInfo).all(),
            me=self.current_user.name, admins=admin_names(self))
        self.finish(html)


class GuardedToggle(ToggleAuthorizationHandler):
    """Authorize or unauthorize NAME; never oneself, an admin only once confirmed."""

    @admin_users_scope
    async def get(self, slug):
        info = UserInfo.find(self.db, slug)
        if info is not None and info.is_authorized:
            if slug == self.current_user.name:
                self.log.warning("admin %s tried to unauthorize themselves: refused", slug)
                return await self._answer(403, refused=True, message=SELF, target=slug)
            if slug in admin_names(self) and self.get_argument("confirm", "") != "yes":
                return await self._answer(200, refused=False, target=slug, message=(
                    f"{slug} is an admin. Unauthorized, {slug} can no longer log in, "
                    f"and their notebook servers stop being reachable."))
            self.log.info("admin %s unauthorizes %s", self.current_user.name, slug)
        UserInfo.change_authorization(self.db, slug)
        self.redirect(self.hub.base_url + "authorize#" + slug)

    async def _answer(self, status: int, **page) -> None:
        self.set_status(status)
        self.finish(await self.render_template("authorize-confirm.html", **page))


HANDLERS = {r"/authorize": GuardedAuthorizationArea, r"/authorize/([^/]*)": GuardedToggle}
