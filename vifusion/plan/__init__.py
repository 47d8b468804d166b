"""Placement by simulation (``vifusion plan``): describe the cluster (``model``), measure each
stage on each node type (``calibrate``), simulate the ingest pipeline for candidate
placements (``simulate``), search them with pruning (``search``), and write the chosen one
where the runtime reads it (``vifusion.placement``)."""
