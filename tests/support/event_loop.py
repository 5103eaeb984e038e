"""Whether async work leaves its event loop free: a ticker counts while the work runs."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any


def ticks_while(work: Callable[[], Awaitable[Any]]) -> tuple[Any, int]:
    """``work()``'s result, and how many 10 ms ticks another task of the same loop made meanwhile (a
    call that blocks the loop for 0.3 s lets it make none)."""

    async def main() -> tuple[Any, int]:
        ticks = 0

        async def tick() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.01)
                ticks += 1

        ticker = asyncio.create_task(tick())
        out = await work()
        ticker.cancel()
        return out, ticks

    return asyncio.run(main())
