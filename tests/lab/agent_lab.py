"""What the agent's lab tests share (test_agent.py, test_agent_faults.py): detwanctl, the HTTP
API, the gateways' tunnels and the OpenAPI document. Their lab is conftest.py's `agentlab`."""
from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.request

import labutil
from labutil import tb

sys.path.insert(0, str(labutil.REPO / "tools"))
from lab import agent  # noqa: E402

WAN = "delay=5ms,rate=200mbit"


def ctl(*args: str, check: bool = False) -> subprocess.CompletedProcess:
    res = subprocess.run([str(labutil.build_dir() / agent.CTL_BINARY), *args], capture_output=True,
                         text=True, timeout=60, stdin=subprocess.DEVNULL)
    if check and res.returncode != 0:
        raise AssertionError(f"detwanctl {' '.join(args)} exited {res.returncode}:\n"
                             f"{res.stdout}\n{res.stderr}")
    return res


def ping(site: str, addr: str, count: int = 3) -> bool:
    return tb("exec", site, "--", "ping", "-n", "-q", "-c", str(count), "-W", "1", addr).returncode == 0


def http(url: str, method: str = "GET", body: str | None = None) -> tuple[int, dict]:
    req = urllib.request.Request(url, method=method, data=body.encode() if body else None,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read().decode())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read().decode())


def gw_tunnels(site: str) -> list[dict]:
    res = tb("gw", site, "--", "tunnels", "--json", check=True)
    return json.loads(res.stdout)["tunnels"]


# ------------------------------------------------------------------------ the OpenAPI document

OPENAPI = labutil.REPO / "docs" / "control-api.yaml"


def openapi() -> dict:
    import yaml  # python3-yaml (tools/install-deps)
    return yaml.safe_load(OPENAPI.read_text())


def validate(doc: dict, schema_name: str, instance) -> None:
    """`instance` against components.schemas[schema_name] (OpenAPI 3.0 schemas are JSON Schema
    with $refs into the same document)."""
    import jsonschema  # python3-jsonschema (tools/install-deps)
    schema = {"$ref": f"#/components/schemas/{schema_name}", **doc}
    jsonschema.validate(instance, schema)
