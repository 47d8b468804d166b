"""Placement by simulation (``vifusion plan``): ``model`` describes the cluster, ``calibrate``
measures the stages, ``simulate`` and ``search`` pick a placement, ``planner`` writes it;
``replan`` and ``follow`` make it again, in the ingest pool, when a link changes for good."""

__all__ = [
    "calibrate",
    "follow",
    "model",
    "planner",
    "replan",
    "search",
    "simulate",
]
