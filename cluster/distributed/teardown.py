"""Ending a server start: stop the server (or kill its process group on its node when the actor is gone), the
actors, and the placement group; nothing outlives its segment."""

from __future__ import annotations

from typing import Callable, Optional, Sequence, Union

import ray
from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError
from ray.util.placement_group import PlacementGroup, remove_placement_group
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from cluster.kernel.run_facts import ServerFacts
from cluster.distributed.actors import cleanup_task
from cluster.distributed.handles import EngineHandle, LoadHandle


def kill_actors(handles: Sequence[Union[EngineHandle, LoadHandle, None]]) -> None:
    """ray.kill each actor, whatever state it is in."""
    for h in handles:
        if h is not None:
            try:
                ray.kill(h.actor)
            except Exception:  # noqa: BLE001
                pass


def teardown(engine: Optional[EngineHandle], loads: Sequence[LoadHandle], pg: PlacementGroup,
             server: Optional[ServerFacts], log: Callable[[str], None]) -> None:
    if engine is not None:
        stopped = False
        try:
            engine.stop(timeout_s=60)
            stopped = True
        except (RayActorError, RayTaskError, GetTimeoutError):
            pass
        if not stopped and server is not None and server.launched:  # an endpoint is never killed
            # the actor is gone: kill its server's process group on that node so nothing outlives it
            try:
                ray.get(cleanup_task.options(scheduling_strategy=NodeAffinitySchedulingStrategy(
                    server.node_id, soft=False)).remote(server.pgid), timeout=60)
            except Exception as e:  # noqa: BLE001
                log(f"cleanup of server pgid {server.pgid} failed: {e}")
    kill_actors([engine, *loads])
    try:
        remove_placement_group(pg)
    except Exception:  # noqa: BLE001
        pass
