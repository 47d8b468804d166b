"""deploy/cluster.yaml, cluster-local.yaml and serve.yaml: Ray's own validators accept them,
and they say what a user relies on (node types, bounds, token auth, private dashboard,
shared data dir, the app's deployments). No network, no cloud account, no Ray started.

The start and setup commands run for real in bash, with `ray`, `hostname`, `nvidia-smi`
and `mountpoint` replaced by shell functions that record what they were given.
"""

from __future__ import annotations

import copy
import ipaddress
import json
import stat
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import jsonschema
import pytest
import yaml
from click import ClickException
from ray.autoscaler._private.util import prepare_config, validate_config

from deploy import serve_config as sc
from vifusion.runtime import RAY_TUNED

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
CLUSTERS = ["cluster.yaml", "cluster-local.yaml"]
TOKEN = "~/.ray/auth_token"
CA = ("~/.vifusion/tls/ca.crt", "~/.vifusion/tls/ca.key")  # from `deploy/tls.py ca`, once
TLS_ENV = {
    "RAY_USE_TLS": "1",
    "RAY_TLS_SERVER_CERT": f"{sc.CLUSTER_TLS_DIR}/node.crt",
    "RAY_TLS_SERVER_KEY": f"{sc.CLUSTER_TLS_DIR}/node.key",
    "RAY_TLS_CA_CERT": f"{sc.CLUSTER_TLS_DIR}/ca.crt",
}
PRIVATE_IP, OTHER_IP, HEAD_IP = "10.0.1.5", "172.17.0.1", "10.0.1.1"
TUNED = (
    "RAY_SERVE_ENABLE_HA_PROXY",
    "RAY_SERVE_RUN_USER_CODE_IN_SEPARATE_THREAD",
)  # single-node only


def raw(name: str) -> dict:
    return yaml.safe_load((DEPLOY / name).read_text())


def prepared(name: str) -> dict:
    """The config as `ray up` sees it: defaults filled in, then Ray's schema check."""
    config = prepare_config(raw(name))
    validate_config(config)
    return config


# -- running the commands with stand-ins ------------------------------------------------

_STUBS = f"""
ray() {{ printf 'CALL'; printf '\\t%s' "$@"; printf '\\n'; env | grep -E '^(RAY|VIFUSION)_' | sed 's/^/ENV\\t/'; }}
hostname() {{ echo "{PRIVATE_IP} {OTHER_IP}"; }}
nvidia-smi() {{ return "$HAS_GPU"; }}
mountpoint() {{ return "$MOUNTED"; }}
sudo() {{ echo "SUDO $*"; }}
ulimit() {{ :; }}
"""


@dataclass
class Call:
    args: list[str]
    env: dict[str, str]

    def flag(self, name: str) -> str | None:
        return next((a.split("=", 1)[1] for a in self.args if a.startswith(f"--{name}=")), None)


def run(
    cmd: str, tmp_path: Path, gpu: bool = False, mounted: bool = True
) -> subprocess.CompletedProcess:
    """One command as the launcher runs it (its own shell; RAY_HEAD_IP exported on workers),
    in a clean environment: nothing inherited from this machine's Ray."""
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "RAY_HEAD_IP": HEAD_IP,
        "HAS_GPU": "0" if gpu else "1",
        "MOUNTED": "0" if mounted else "1",
    }
    return subprocess.run(
        ["bash", "-c", _STUBS + cmd],
        check=False,
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )


def ray_calls(cmds: list[str], tmp_path: Path, gpu: bool = False) -> list[Call]:
    calls: list[Call] = []
    for cmd in cmds:
        out = run(cmd, tmp_path, gpu=gpu)
        assert out.returncode == 0, out.stderr
        for line in out.stdout.splitlines():
            kind, _, rest = line.partition("\t")
            if kind == "CALL":
                calls.append(Call(rest.split("\t"), {}))
            elif kind == "ENV":
                key, _, value = rest.partition("=")
                calls[-1].env[key] = value
    return calls


def ray_start(cmds: list[str], tmp_path: Path, gpu: bool = False) -> Call:
    starts = [c for c in ray_calls(cmds, tmp_path, gpu) if c.args[0] == "start"]
    assert len(starts) == 1
    return starts[0]


# -- cluster configs -------------------------------------------------------------------


@pytest.mark.parametrize("name", CLUSTERS)
def test_rays_validator_accepts_the_cluster_config(name):
    config = prepared(name)
    assert config["cluster_name"] == "vifusion"
    assert config["head_node_type"] in config["available_node_types"]


def test_rays_validator_is_strict_where_we_rely_on_it():
    # The check above means something: the schema rejects a misspelt field and a
    # fractional custom resource, and the local provider refuses node types of its own.
    config = raw("cluster.yaml")
    bad = copy.deepcopy(config)
    bad["available_node_types"]["extract_gpu"]["min_worker"] = 1
    with pytest.raises(jsonschema.ValidationError):
        validate_config(prepare_config(bad))
    bad = copy.deepcopy(config)
    bad["available_node_types"]["shard_mem"]["resources"] = {"shard": 0.5}
    with pytest.raises(jsonschema.ValidationError):
        validate_config(prepare_config(bad))
    local = raw("cluster-local.yaml")
    local["available_node_types"] = config["available_node_types"]
    with pytest.raises(ClickException):
        prepare_config(local)


def test_aws_node_types_resources_and_bounds():
    from vifusion.config import Config

    config = prepared("cluster.yaml")
    types = config["available_node_types"]
    assert set(types) == {"head", "extract_gpu", "shard_mem"}
    assert config["head_node_type"] == "head"
    assert (
        types["head"]["min_workers"] == types["head"]["max_workers"] == 0
    )  # the head is not a worker
    gpu, shard = types["extract_gpu"], types["shard_mem"]
    assert gpu["node_config"]["InstanceType"] == "g5.xlarge" and gpu["resources"] == {"extract": 1}
    assert shard["node_config"]["InstanceType"] == "r6i.2xlarge" and shard["resources"] == {
        "shard": 1
    }
    # The extractor only asks for a GPU when one is already up, and shards ask for no CPU:
    # neither creates demand, so the nodes they need must be kept by min_workers.
    defaults = Config()
    assert gpu["min_workers"] >= 1
    assert shard["min_workers"] >= defaults.num_shards * defaults.shard_replicas
    for t in (gpu, shard):
        assert 0 < t["min_workers"] <= t["max_workers"]
    # The global cap neither blocks the minimums nor cuts a type short of its maximum.
    assert config["max_workers"] == gpu["max_workers"] + shard["max_workers"]


def test_local_hosts_and_bounds():
    config = prepared("cluster-local.yaml")
    provider = config["provider"]
    workers = [ipaddress.ip_address(ip) for ip in provider["worker_ips"]]
    head = ipaddress.ip_address(provider["head_ip"])
    assert workers and head not in workers and len(set(workers)) == len(workers)
    assert config["auth"]["ssh_user"] and config["auth"]["ssh_private_key"]
    (node,) = config["available_node_types"].values()  # Ray's single on-prem type
    assert node["min_workers"] == node["max_workers"] == config["max_workers"] == len(workers)


@pytest.mark.parametrize("gpu", [True, False])
def test_local_worker_advertises_the_aws_types_resource(gpu, tmp_path):
    aws = raw("cluster.yaml")["available_node_types"]
    start = ray_start(raw("cluster-local.yaml")["worker_start_ray_commands"], tmp_path, gpu=gpu)
    want = aws["extract_gpu" if gpu else "shard_mem"]["resources"]
    assert json.loads(start.flag("resources")) == want


@pytest.mark.parametrize("name", CLUSTERS)
def test_head_start_token_auth_private_dashboard_autoscaler(name, tmp_path):
    start = ray_start(raw(name)["head_start_ray_commands"], tmp_path)
    assert "--head" in start.args
    assert start.env["RAY_AUTH_MODE"] == "token"
    assert TLS_ENV.items() <= start.env.items()  # mutual TLS with the node's own certificate
    assert RAY_TUNED.items() <= start.env.items()  # as a local ViFusion Ray runs
    assert not set(TUNED) & set(start.env)  # Serve's default ingress on clusters
    # The node's first (private) address, never all interfaces.
    assert start.flag("dashboard-host") == PRIVATE_IP
    assert start.flag("autoscaling-config") is not None  # without it the head starts no workers


@pytest.mark.parametrize("name", CLUSTERS)
def test_worker_start_token_auth_joins_head(name, tmp_path):
    start = ray_start(raw(name)["worker_start_ray_commands"], tmp_path)
    assert start.flag("address") == f"{HEAD_IP}:6379"
    assert start.env["RAY_AUTH_MODE"] == "token"
    assert TLS_ENV.items() <= start.env.items()  # mutual TLS with the node's own certificate
    assert RAY_TUNED.items() <= start.env.items()  # as a local ViFusion Ray runs
    assert not set(TUNED) & set(start.env)  # Serve's default ingress on clusters


def test_the_single_node_serve_tuning_is_what_clusters_leave_out():
    from serve.app import SERVE_TUNED

    assert set(SERVE_TUNED) == set(TUNED)


@pytest.mark.parametrize("name", CLUSTERS)
def test_token_and_source_are_mounted(name):
    config = prepared(name)
    mounts = raw(name)["file_mounts"]
    for secret in (TOKEN, *CA):  # from the user's home to each node's
        assert mounts[secret] == secret
    sources = {remote: local for remote, local in mounts.items() if remote not in (TOKEN, *CA)}
    for local in sources.values():
        assert (ROOT / local).exists(), local
    assert not {".", "./", ".venv"} & set(sources.values())  # no 7 GB venv on the wire
    # The install runs where pyproject.toml and requirements.txt land.
    home = {r for r, local in sources.items() if local == "pyproject.toml"}.pop().rsplit("/", 1)[0]
    assert sources[f"{home}/requirements.txt"] == "requirements.txt"
    (install,) = [c for c in config["setup_commands"] if "pip install" in c]
    assert install.startswith(f"cd {home} && ")
    assert "pip install -r requirements.txt && pip install --no-deps -e ." in install


def test_cloud_and_local_share_setup_and_head_start():
    aws, local = raw("cluster.yaml"), raw("cluster-local.yaml")
    for key in ("setup_commands", "head_start_ray_commands", "file_mounts", "rsync_exclude"):
        assert aws[key] == local[key], key


def test_setup_writes_the_login_environment_once(tmp_path):
    # Drivers and `serve deploy` run through `ray exec` / `ray attach` login shells:
    # they get token mode and the shared data dir from ~/.vifusion-env.
    cmd = raw("cluster.yaml")["setup_commands"][1]
    for _ in range(2):  # `ray up` again runs setup again
        assert run(cmd, tmp_path).returncode == 0
    env = (tmp_path / ".vifusion-env").read_text().splitlines()
    assert "export RAY_AUTH_MODE=token" in env
    assert f"export VIFUSION_DATA_DIR={sc.CLUSTER_DATA_DIR}" in env
    assert (tmp_path / ".bashrc").read_text().count("source ~/.vifusion-env") == 1


def test_setup_gives_each_node_a_certificate_from_the_clusters_ca(tmp_path):
    """The setup's TLS step, run as on a node (its folder and python put here): a certificate
    for this host that the cluster's CA vouches for, and the exports the start commands use."""
    from deploy import tls

    tls.make_ca(tmp_path / ".vifusion" / "tls")
    (step,) = [c for c in raw("cluster.yaml")["setup_commands"] if "tls.py node" in c]
    folder = tmp_path / "etc-tls"
    folder.mkdir()
    step = step.replace(sc.CLUSTER_TLS_DIR, str(folder)).replace(
        "python ~/vifusion/", f"{sys.executable} {ROOT}/"
    )
    for _ in range(2):  # `ray up` again runs setup again
        done = run(step, tmp_path)
        assert done.returncode == 0, done.stderr
    check = subprocess.run(
        ["openssl", "verify", "-CAfile", folder / "ca.crt", folder / "node.crt"],
        capture_output=True,
        text=True,
    )
    assert check.returncode == 0, check.stdout + check.stderr
    assert oct((folder / "node.key").stat().st_mode & 0o777) == "0o600"
    exports = (tmp_path / ".vifusion-env").read_text().replace(str(folder), sc.CLUSTER_TLS_DIR)
    assert all(f"export {k}={v}" in exports for k, v in TLS_ENV.items()), exports


@pytest.mark.parametrize("name", CLUSTERS)
def test_every_node_makes_its_own_data_dir_and_the_head_its_catalog(name, tmp_path):
    """No shared file system: each node's data dir is a local folder (the one serve uses),
    and the catalog is the head's PostgreSQL."""
    config = raw(name)
    (init,) = config["initialization_commands"]
    assert "mount" not in init
    made = run(init, tmp_path)
    assert made.returncode == 0
    assert f"SUDO mkdir -p {sc.CLUSTER_DATA_DIR} {sc.CLUSTER_TLS_DIR}" in made.stdout
    assert "SUDO chown" in made.stdout and sc.CLUSTER_DATA_DIR in made.stdout
    (app,) = yaml.safe_load((DEPLOY / "serve.yaml").read_text())["applications"]
    assert app["args"]["data_dir"] == sc.CLUSTER_DATA_DIR
    assert "bash ~/vifusion/deploy/head_postgres.sh" in config["head_setup_commands"]


# -- serve.yaml ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def serve_yaml() -> dict:
    return yaml.safe_load((DEPLOY / "serve.yaml").read_text())


def test_serve_yaml_is_generated_from_the_app():
    # On failure: python -m deploy.serve_config -o deploy/serve.yaml
    assert (DEPLOY / "serve.yaml").read_text() == sc.render()


def test_serve_yaml_passes_serves_schema(serve_yaml):
    from ray.serve.schema import ServeApplicationSchema, ServeDeploySchema

    deploy = ServeDeploySchema.model_validate(serve_yaml)
    (app,) = deploy.applications
    assert isinstance(app, ServeApplicationSchema)
    assert deploy.http_options.host == "0.0.0.0"  # the API port (key-gated), not the dashboard
    # HTTPS only, with the head's certificate from the cluster's CA (deploy/tls.py)
    assert deploy.http_options.ssl_certfile == f"{sc.CLUSTER_TLS_DIR}/node.crt"
    assert deploy.http_options.ssl_keyfile == f"{sc.CLUSTER_TLS_DIR}/node.key"
    assert [d.name for d in app.deployments] == ["ViFusionApp"]


def test_serve_yaml_deploys_the_apps_deployments(serve_yaml):
    # What `serve deploy` does with the file: import the builder, call it with `args`,
    # build the app; the YAML's deployment options are the app's own.
    from ray._common.utils import import_attr
    from ray.serve._private.api import call_user_app_builder_with_args_if_necessary
    from ray.serve._private.build_app import build_app

    from serve import app as vf

    (spec,) = serve_yaml["applications"]
    assert (spec["name"], spec["route_prefix"]) == (vf.APP_NAME, vf.ROUTE_PREFIX)
    assert "runtime_env" not in spec  # no single-node tuning (see deploy/serve_config.py)
    app = call_user_app_builder_with_args_if_necessary(
        import_attr(spec["import_path"]), spec["args"]
    )
    built = {d.name: d for d in build_app(app, name=spec["name"]).deployments}
    assert set(built) == {d["name"] for d in spec["deployments"]} == {vf.ViFusionApp.name}
    for d in spec["deployments"]:
        ours = built[d["name"]]
        # several replicas, none of which owns the shards or the ingest pool
        assert d["autoscaling_config"]["min_replicas"] >= 2
        scaling = ours._deployment_config.autoscaling_config
        assert d["autoscaling_config"]["min_replicas"] == scaling.min_replicas
        assert d["autoscaling_config"]["max_replicas"] == scaling.max_replicas
        assert d["max_ongoing_requests"] == ours.max_ongoing_requests
        assert d["ray_actor_options"] == ours.ray_actor_options
    (cfg,) = built[vf.ViFusionApp.name].init_args
    assert str(cfg.data_dir) == spec["args"]["data_dir"]
    assert cfg.shared_actors and cfg.shard_replicas >= 2


def test_serve_builder_refuses_unknown_args():
    from pydantic import ValidationError

    from serve.app import build

    with pytest.raises(ValidationError, match="data_dri"):
        build({"data_dri": "/mnt/vifusion"})


# -- the head's PostgreSQL -----------------------------------------------------------------


def test_head_setup_makes_the_catalog_database_and_exports_its_url(postgres_url, tmp_path):
    """deploy/head_postgres.sh against a real server: the role, the database, the URL in
    ~/.vifusion-env (once, however often setup runs), and a catalog opens there."""
    from urllib.parse import urlparse

    from tests._postgres import binaries
    from vifusion.catalog import open_catalog
    from vifusion.config import Config

    server = urlparse(postgres_url)
    psql = binaries() / "psql"
    env = {
        "PATH": f"{psql.parent}:/usr/bin:/bin",  # psql there: nothing is installed
        "HOME": str(tmp_path),
        "PSQL": f"{psql} -h {server.hostname} -p {server.port} -U postgres -d postgres",
        "PGHOST_URL": f"{server.hostname}:{server.port}",
    }
    (tmp_path / ".vifusion-env").write_text("export RAY_AUTH_MODE=token\n")
    for _ in range(2):  # `ray up` again runs setup again
        done = subprocess.run(
            ["bash", str(DEPLOY / "head_postgres.sh")], env=env, capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr
    lines = (tmp_path / ".vifusion-env").read_text().splitlines()
    assert lines[0] == "export RAY_AUTH_MODE=token"
    (url,) = [ln.split("=", 1)[1] for ln in lines if ln.startswith("export VIFUSION_CATALOG_URL=")]
    password = (tmp_path / ".vifusion-pg").read_text()
    assert len(password) >= 24 and stat.S_IMODE((tmp_path / ".vifusion-pg").stat().st_mode) == 0o600
    assert url == f"postgresql://vifusion:{password}@{server.hostname}:{server.port}/vifusion"
    catalog = open_catalog(Config(data_dir=tmp_path / "data", catalog_url=url))
    try:
        assert catalog.list_videos() == []
    finally:
        catalog.close()
