"""Ending a server start: stop the server (or kill its process group on its node when the actor is gone), the
actors, and the placement group; nothing outlives its segment."""

from __future__ import annotations

from typing import Any, Callable, Optional, Sequence, Union

import ray
from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError
from ray.util.placement_group import PlacementGroup, remove_placement_group
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from cluster.kernel.run_facts import ServerFacts
from cluster.distributed.actors import cleanup_task
from cluster.distributed.handles import EngineHandle, LoadHandle


def kill_actors(handles: Sequence[Union[EngineHandle, LoadHandle, Any, None]]) -> None:
    """ray.kill each actor (a handle's, or an actor handle itself), whatever state it is in."""
    for h in handles:
        if h is not None:
            try:
                ray.kill(h.actor if isinstance(h, (EngineHandle, LoadHandle)) else h)
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
        if server is not None and server.launched:  # an endpoint is never killed
            # an actor that is gone (or every process, when the stop failed): kill each process group on its node
            # so nothing outlives the segment (a group already stopped is gone: the task finds nothing)
            for proc in server.process_facts() if not stopped or server.processes else ():
                f = proc.facts
                try:
                    ray.get(cleanup_task.options(scheduling_strategy=NodeAffinitySchedulingStrategy(
                        f.node_id, soft=False)).remote(f.pgid), timeout=60)
                except Exception as e:  # noqa: BLE001
                    log(f"cleanup of {proc.name} pgid {f.pgid} failed: {e}")
    kill_actors([*(engine.actors() if engine is not None else []), *loads])
    try:
        remove_placement_group(pg)
    except Exception:  # noqa: BLE001
        pass
