"""Placement by simulation (``vifusion plan``): ``model`` describes the cluster, ``calibrate``
measures the stages, ``simulate`` and ``search`` pick a placement, ``planner`` writes it."""

__all__ = [
    "calibrate",
    "model",
    "planner",
    "search",
    "simulate",
]
