"""A Counter actor served with the sigx Python SDK (see sdk/python/README.md)."""

import asyncio

import sigx


@sigx.actor("Counter")
class Counter:
    def __init__(self, ctx: sigx.ActorContext) -> None:
        self.count = 0

    @sigx.method
    async def incr(self, payload: bytes) -> bytes:
        self.count += int(payload or b"1")
        return str(self.count).encode()


async def main() -> None:
    async with sigx.App(actors=[Counter], app_name="counter-python") as app:
        await app.wait()  # until SIGTERM/SIGINT has drained the app


if __name__ == "__main__":
    asyncio.run(main())
