"""`Client.call(..., locality=...)` sends the placement preference in `CallRequest.locality`: a
known one places (on one host here), an unknown one is refused as invalid, naming it — which it
could not be if the field were never sent."""

from __future__ import annotations

import pytest

import sigx
from conftest import Sidecar, run


@sigx.actor("Near")
class Near:
    def __init__(self, ctx: sigx.ActorContext) -> None:
        self.ctx = ctx

    @sigx.method
    async def hello(self, payload: bytes) -> bytes:
        return b"hi " + payload


def test_a_locality_preference_travels_on_the_call(sidecar: Sidecar) -> None:
    async def main() -> None:
        async with sigx.App(actors=[Near], socket=str(sidecar.socket), handle_signals=False,
                            reconnect=False) as app:
            await app.registered()
            out = await app.client.call("Near", "a", "hello", b"zone", timeout=10,
                                        locality=sigx.LOCALITY_SAME_ZONE)
            assert out == b"hi zone"
            with pytest.raises(sigx.errors.InvalidError) as e:
                await app.client.call("Near", "a", "hello", timeout=10, locality=9)
        assert e.value.name == "invalid" and "locality 9" in e.value.message, e.value

    run(main())

