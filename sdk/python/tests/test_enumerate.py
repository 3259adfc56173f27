"""`Client.locate` and `Client.list_actors` against a real sigx-sidecar."""

from __future__ import annotations

import sigx
from conftest import Sidecar, run


@sigx.actor("Near")
class Near:
    def __init__(self, ctx: sigx.ActorContext) -> None:
        self.ctx = ctx

    @sigx.method
    async def hello(self, payload: bytes) -> bytes:
        return b"hi " + payload


def test_locate_and_list_actors(sidecar: Sidecar) -> None:
    """Locate names this host for a called actor and nothing for an uncalled one; ListActors
    pages through exactly the called actors."""

    async def main() -> None:
        async with sigx.App(actors=[Near], socket=str(sidecar.socket), handle_signals=False,
                            reconnect=False) as app:
            await app.registered()
            for key in ("a", "b", "c"):
                await app.client.call("Near", key, "hello", b"x", timeout=10)
            where = await app.client.locate("Near", "b", timeout=10)
            assert where.active and where.host_id and where.activation_id and where.epoch > 0, where
            assert not (await app.client.locate("Near", "never", timeout=10)).active
            seen, token = [], ""
            for _ in range(10):
                page = await app.client.list_actors("Near", page_size=2, page_token=token, timeout=10)
                assert not page.incomplete, page
                seen += [(a.actor.key, a.host_id) for a in page.actors]
                token = page.next_page_token
                if not token:
                    break
            assert sorted(seen) == [(k, where.host_id) for k in ("a", "b", "c")], seen

    run(main())
