"""A Counter actor served with the sigx Python SDK (see sdk/python/README.md)."""

import asyncio

import sigx


@sigx.actor("Counter")
class Counter:
    def __init__(self, ctx: sigx.ActorContext) -> None:
        self.ctx = ctx

    @sigx.method
    async def incr(self, payload: bytes) -> bytes:
        # Kept in the sidecar's state store: the count survives deactivation and host restarts.
        count = await self.ctx.state.get("count", 0) + int(payload or b"1")
        self.ctx.state.put("count", count)
        return str(count).encode()


async def main() -> None:
    async with sigx.App(actors=[Counter], app_name="counter-python") as app:
        await app.wait()  # until SIGTERM/SIGINT has drained the app


if __name__ == "__main__":
    asyncio.run(main())
