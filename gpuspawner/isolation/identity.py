"""Which hub this is, for a host that runs more than one (a production hub
beside a test suite's, two teams' hubs): each hub's cgroups and system
accounts carry its own tag, so one hub never removes, signals or adopts
another's.

The tag is ``HubIdentity.name`` where one is configured (the same in the
hub's and the service's config, or ``$GPUHUB_HUB_NAME`` for both), else
the first 6 hex digits of the SHA-256 of the data directory's real path:
the same hub started again on the same data directory keeps its tag.
It goes into

- the default cgroup parent, ``gpuhub-<tag>`` (``GpuEnforcement.cgroup_parent``);
- the default account prefix, ``gpuhub-<tag>-`` (``alice`` -> ``gpuhub-1a2b3c-alice``);
- every account's GECOS mark, ``gpuhub <tag> <hash of the hub name>``, so
  two hubs given the same prefix still refuse each other's accounts.

A hub from before tags (accounts ``gpuhub-<user>`` marked ``gpuhub <hash>``)
keeps its accounts: such an account whose home is the home this hub gives
that user is this hub's; it is re-marked with the tag at first use
(``accounts.Accounts``).
"""
from __future__ import annotations

import hashlib
import os
import re

from traitlets import Unicode, default, validate
from traitlets.config import Configurable

ENV = "GPUHUB_HUB_NAME"
TAG_DIGITS = 6
MAX_TAG = 10      # the account prefix gpuhub-<tag>- leaves 15 characters for a user name
LEGACY_PREFIX = "gpuhub-"   # account names of hubs from before tags
_TAG = re.compile(r"[a-z0-9][a-z0-9_]*\Z")


def check_name(name: str) -> str:
    if name and (not _TAG.match(name) or len(name) > MAX_TAG):
        raise ValueError(f"hub name {name!r}: lower case letters, digits and '_', starting "
                         f"with a letter or digit, {MAX_TAG} characters at most")
    return name


def hub_tag(data_dir: str, name: str = "") -> str:
    """This hub's tag: ``name`` if given, else a short hash of the data directory."""
    if check_name(name):
        return name
    real = os.path.realpath(data_dir)
    return hashlib.sha256(real.encode()).hexdigest()[:TAG_DIGITS]


def account_prefix(tag: str) -> str:
    return f"gpuhub-{tag}-"


def cgroup_parent(tag: str) -> str:
    return f"gpuhub-{tag}"


class HubIdentity(Configurable):
    """The one name that tells this hub's cgroups and accounts from another's."""

    name = Unicode(help="""
        A short name for this hub (lower case letters, digits and '_', at most
        10 characters), used in its cgroup parent (``gpuhub-<name>``), its
        users' account names (``gpuhub-<name>-alice``) and their account
        marks, so that two hubs on one host never touch each other's
        processes or accounts. Set the same in the hub's and the service's
        config (or ``$GPUHUB_HUB_NAME``, which ``gpuhub up`` passes to both).
        Default: a hash of the real path of the data directory.
        """).tag(config=True)

    @default("name")
    def _name_default(self):
        return os.environ.get(ENV, "")

    @validate("name")
    def _check(self, proposal):
        return check_name(proposal["value"])

    def tag(self, data_dir: str) -> str:
        return hub_tag(data_dir, self.name)
