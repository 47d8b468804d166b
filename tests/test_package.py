"""The package's public names: what a caller imports from ``vifusion`` itself."""

from __future__ import annotations

import json
import subprocess
import sys


def test_the_public_names_are_the_classes_callers_use():
    import vifusion
    from vifusion.client import ApiError, Client
    from vifusion.config import Config
    from vifusion.service import NotFound, Service

    assert sorted(vifusion.__all__) == ["ApiError", "Client", "Config", "NotFound", "Service"]
    assert (vifusion.Service, vifusion.Config, vifusion.Client) == (Service, Config, Client)
    assert (vifusion.ApiError, vifusion.NotFound) == (ApiError, NotFound)
    assert set(vifusion.__all__) <= set(dir(vifusion))


def test_importing_the_package_or_its_client_loads_neither_ray_nor_torch():
    # A text search from the command line and a script that only talks to the API stay light.
    code = (
        "import json, sys; from vifusion import Client, Config; "
        "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules} & {'ray', 'torch', 'transformers'})))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert json.loads(out) == []
