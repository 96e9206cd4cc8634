"""NativeAuthenticator that creates the first users at start.

Secure by default: nobody can sign up and log in without an admin's
approval, and the first admin (with a random password printed by ``gpuhub
up``) exists from the first start, so the hub is never open while waiting
for someone to claim the admin name.
"""
from __future__ import annotations

import json
import os

import bcrypt
from nativeauthenticator import NativeAuthenticator
from nativeauthenticator.orm import UserInfo
from traitlets import Unicode

from .authorize import HANDLERS as GUARDED


class GpuHubAuthenticator(NativeAuthenticator):
    initial_users_file = Unicode("", help="""
        A JSON file {"users": {"name": "password", ...}} of users to create
        (already approved) at start if they do not exist. ``gpuhub up``
        writes it with the first admin's random password (and the demo users
        with ``--demo``), readable by its owner only.

        Example::

            c.GpuHubAuthenticator.initial_users_file = "/var/lib/gpuhub/initial-users.json"
        """).tag(config=True)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.initial_users_file and os.path.exists(self.initial_users_file):
            with open(self.initial_users_file) as f:
                users = json.load(f).get("users", {})
            for name, password in users.items():
                if self.get_user(name) is None:
                    self.db.add(UserInfo(username=self.normalize_username(name),
                                         password=bcrypt.hashpw(password.encode(), bcrypt.gensalt()),
                                         is_authorized=True))
                    self.db.commit()
                    self.log.info("created user %s", name)

    def get_handlers(self, app):
        # nativeauthenticator 1.3's own /login page calls the hub's statsd
        # client, which JupyterHub 6 no longer has (every login would be a
        # 500). JupyterHub's login page calls the same authenticate().
        # The authorize page: no unauthorizing oneself, an admin only once
        # confirmed (authorize.py).
        return [(path, GUARDED.get(path, handler)) for path, handler in super().get_handlers(app)
                if path != r"/login"]
