"""Placement by simulation (``vifusion plan``): ``hardware`` describes the cluster, ``calibrate``
measures the stages, ``simulate`` predicts a placement's rate and ``placement_search`` picks
one (pruned by ``bounds``; ``terms`` holds what they share), ``planner`` writes it;
``replan`` and ``follow`` make it again, in the ingest pool, when a link changes for good."""

__all__ = [
    "bounds",
    "calibrate",
    "follow",
    "hardware",
    "placement_search",
    "planner",
    "replan",
    "simulate",
    "terms",
]
