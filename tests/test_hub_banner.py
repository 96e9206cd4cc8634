"""The hub pages' banner shows a user's notices from the service's last
snapshot (taken with the non-blocking client, never while a page renders),
escaped, and nothing at all when the service does not answer."""
from __future__ import annotations

import asyncio
import types

import pytest

from gpuspawner.client.aio import AsyncApi
from gpuspawner.client.errors import ApiError
from gpuspawner.hub.banner import NoticeBanner


class Notices(AsyncApi):
    def __init__(self, answers):
        self.answers, self.asked = list(answers), []

    async def _send(self, request):
        self.asked.append(request.target)
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, Exception):
            raise answer
        return {"notices": [{"user": u, "message": m} for u, m in answer]}


ALICE, BOB = types.SimpleNamespace(name="alice"), types.SimpleNamespace(name="bob")


@pytest.mark.parametrize("answer, alice_sees, bob_sees", [
    ([("alice", "idle: culled in 10 min")], "idle: culled in 10 min", ""),
    ([("alice", "a <b>"), ("alice", "two"), ("bob", "yours")], "a &lt;b&gt;<br>two", "yours"),
    ([], "", ""),
    (ApiError(0, "cannot reach the service"), "", ""),
    (ApiError(403, "forbidden"), "", ""),
])
def test_the_banner_shows_each_users_notices_or_nothing(answer, alice_sees, bob_sees):
    banner = NoticeBanner("unused", "tok", client=Notices([[("alice", "stale")], answer]))
    asyncio.run(banner.refresh())
    assert banner(ALICE) == "stale"
    asyncio.run(banner.refresh())
    assert (banner(ALICE), banner(BOB), banner(None)) == (alice_sees, bob_sees, "")


def test_a_page_never_waits_for_the_service_and_the_snapshot_follows_it():
    async def pages():
        service = Notices([[], [("alice", "warned")]])
        banner = NoticeBanner("unused", "tok", refresh_seconds=0.01, client=service)
        first = banner(ALICE)  # renders from the (empty) snapshot, starts the refresher
        assert service.asked == []
        for _ in range(200):
            await asyncio.sleep(0.01)
            if banner(ALICE):
                break
        banner._task.cancel()
        return first, banner(ALICE), service.asked[0]

    assert asyncio.run(pages()) == ("", "warned", "/notices")


def test_without_a_running_loop_the_page_still_renders():
    assert NoticeBanner("unused", "tok", client=Notices([[]]))(ALICE) == ""
