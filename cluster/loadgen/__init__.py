"""Load generator: seeded arrivals, prompt sources, streaming client and window runner (asyncio + aiohttp, no Ray)."""
