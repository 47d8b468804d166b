"""Deployment helpers: `deploy.netbed` builds a multi-host network test bed on one machine."""
