"""``python -m gpuspawner.culler [idle-culler flags] [--gpu-timeout ...]``: run
the GPU-aware culler (as a hub-managed service)."""
from __future__ import annotations

import asyncio
import json
import logging
import os
import sys

from tornado.httpclient import AsyncHTTPClient, HTTPRequest

from ..hub.lifeline import exit_with_parent
from .cli import parse_args
from .service import Culler


def make_fetch(hub_token: str, gpuhub_token: str, gpuhub_api: str):
    client = AsyncHTTPClient()

    async def fetch(method: str, url: str, body=None):
        token = gpuhub_token if url.startswith(gpuhub_api) else hub_token
        headers = {"Authorization": f"token {token}", "Content-Type": "application/json",
                   "Accept": "application/jupyterhub-pagination+json"}
        resp = await client.fetch(HTTPRequest(
            url, method=method, headers=headers, body=None if body is None else json.dumps(body),
            allow_nonstandard_methods=True, request_timeout=30))
        return json.loads(resp.body) if resp.body else None

    return fetch


async def run(argv) -> None:
    policy, rules, options = parse_args(argv)
    hub_api = options.url or os.environ["JUPYTERHUB_API_URL"]
    token = os.environ["JUPYTERHUB_API_TOKEN"]
    gpuhub_api = os.environ.get("GPUHUB_API_URL", "")
    if not gpuhub_api:
        sys.exit("gpuhub culler: set GPUHUB_API_URL to the scheduler service's API")
    culler = Culler(policy, rules, hub_api=hub_api, gpuhub_api=gpuhub_api,
                    fetch=make_fetch(token, token, gpuhub_api), cull_every=options.cull_every,
                    concurrency=options.concurrency, page_size=options.api_page_size,
                    dry_run=options.dry_run)
    log = logging.getLogger("gpuhub.culler")
    log.info("culling every %ss%s", options.cull_every, " (dry run)" if options.dry_run else "")
    done = asyncio.Event()
    watch = asyncio.ensure_future(exit_with_parent(done.set))
    restored = False
    while not done.is_set():
        try:
            if not restored:  # warnings given before a restart still count
                await culler.restore_warnings()
                restored = True
            decisions = await culler.cycle()
            if options.dry_run:
                for label, d in decisions:
                    print(f"{d.action:5s} {label}: {d.reason}", flush=True)
        except Exception:
            log.exception("culler pass failed")
        try:  # sleep until the next pass, or until the hub is gone
            await asyncio.wait_for(done.wait(), options.cull_every)
        except asyncio.TimeoutError:
            pass
    watch.cancel()


def main(argv=None) -> None:
    logging.basicConfig(level=logging.INFO, format="[%(levelname)1.1s %(asctime)s culler] %(message)s")
    asyncio.run(run(sys.argv[1:] if argv is None else argv))


if __name__ == "__main__":
    main()
