"""The built-in load shapes keep the run keys and labels points had before shapes were registered classes: each
point's identity (hashed into the run key) and label as a8528d0 produced them, and the registry's refusal of a kind
nobody registered."""

from __future__ import annotations

import pytest

from cluster.analysis.comparison import point_label, short_point_label
from cluster.kernel.load_shapes import ClosedLoop, LoadPoint, OpenLoop, load_shape, load_shapes

# (point, identity, label) as cluster/kernel/runs.py's LoadPoint gave them at a8528d0
RECORDED = [
    (LoadPoint("concurrency", 4.0), {"kind": "concurrency", "value": 4.0, "max_concurrency": None}, "c4"),
    (LoadPoint("concurrency", 4.0, read_batch_s=0.001),
     {"kind": "concurrency", "value": 4.0, "max_concurrency": None, "read_batch_s": 0.001}, "c4"),
    (LoadPoint("rate", 2.5, 8), {"kind": "rate", "value": 2.5, "max_concurrency": 8}, "r2.5"),
    (LoadPoint("rate", 2.5, None, 1.5), {"kind": "rate", "value": 2.5, "max_concurrency": None, "arrival_cv": 1.5},
     "r2.5 gamma cv 1.5"),
    (LoadPoint("rate", 2.5, 8, None, True), {"kind": "rate", "value": 2.5, "max_concurrency": 8, "trace": True},
     "r2.5 trace"),
]


@pytest.mark.parametrize("point,identity,label", RECORDED)
def test_built_in_points_keep_their_identity_and_label(point: LoadPoint, identity: dict[str, object],
                                                       label: str) -> None:
    assert point.identity() == identity
    assert point.label == label


def test_built_in_shapes_are_registered_in_plan_order_with_their_table_labels() -> None:
    assert [type(s) for s in load_shapes()][:2] == [ClosedLoop, OpenLoop]  # a plan lists concurrency points first
    assert (point_label("concurrency", 8), short_point_label("concurrency", 8)) == ("concurrency 8", "c8")
    assert (point_label("rate", 2.5), short_point_label("rate", 2.5)) == ("rate 2.5 req/s", "r2.5")
    assert load_shape("rate").axis_label() == "request rate (req/s)"
    with pytest.raises(LookupError, match="no load shape 'ramp' is registered"):
        load_shape("ramp")
