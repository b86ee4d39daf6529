"""Sites of different owners in the lab (tools/lab/federation.py): the topology file each
domain's agent gets, the owners' option, and the PKI made with stock openssl commands.
Pure parts first (no root); the lab with an agent per owner is test_federation.py.
"""
from __future__ import annotations

import pathlib
import subprocess
import sys

import pytest
import yaml

import labutil

sys.path.insert(0, str(labutil.REPO / "tools"))
from lab import federation, topology  # noqa: E402
from lab.netns import LabError  # noqa: E402

SPEC = "delay=10ms,jitter=1ms,rate=200mbit"


def _render(owners_text: str, wan: str, sites: int = 3):
    topo = topology.build(sites, 1)
    owners = federation.parse_owners(owners_text, wan, topo)
    files = {d: federation.DomainFiles(d, 7900 + i) for i, d in enumerate(owners.domains)}
    return owners, {d: yaml.safe_load(federation.render_domain_topology(
        d, topo, owners, lambda _p: SPEC, files, pathlib.Path(f"/tmp/j-{d}.db")))
        for d in owners.domains}


def _links(doc) -> dict:
    return {link["name"]: link for link in doc.get("links", [])}


def test_with_a_carrier_each_owner_holds_only_its_site_and_access_links():
    owners, docs = _render("a:x,b:y,c:z", "w")
    assert owners.domains == ["x", "y", "z", "w"]
    x = docs["x"]
    assert [s["name"] for s in x["sites"]] == ["a"]
    assert [g["name"] for g in x["gateways"]] == ["a"]
    # The site's ports sit on access links to its borders with the carrier.
    assert set(_links(x)) == {"a-ab1", "a-ac1"}
    assert _links(x)["a-ac1"]["ends"] == ["a", "a.ac1"]
    assert _links(x)["a-ac1"]["delay"] == "0s"
    assert {b["name"]: b["domain"] for b in x["borders"]} == {"a.ab1": "w", "a.ac1": "w"}
    # Peers toward other owners' gateways are named by `remote`, never by a local gateway.
    assert {p["name"]: p.get("remote") for p in x["gateways"][0]["peers"]} == {"b": "b", "c": "c"}
    assert all("gateway" not in p for p in x["gateways"][0]["peers"])
    # Nothing of the other sites: no site, gateway or link of theirs.
    text = yaml.safe_dump(x)
    assert "gw-b" not in text and "10.20.2." not in text and "10.20.3." not in text
    # The carrier owns only links, border to border, with the path's delay.
    w = docs["w"]
    assert "sites" not in w and "gateways" not in w
    assert set(_links(w)) == {"ab1", "ac1", "bc1"}
    assert _links(w)["ac1"]["ends"] == ["a.ac1", "c.ac1"]
    assert _links(w)["ac1"]["delay"] == "10ms"
    assert {b["name"]: b["domain"] for b in w["borders"]}["c.bc1"] == "z"


def test_two_carriers_each_own_half_of_every_path_meeting_at_its_mid_point():
    owners, docs = _render("a:x,b:y,c:z", "w,v")
    assert owners.domains == ["x", "y", "z", "w", "v"]
    w, v = docs["w"], docs["v"]
    assert _links(w)["ac1"]["ends"] == ["a.ac1", "ac1.mid"]
    assert _links(v)["ac1"]["ends"] == ["ac1.mid", "c.ac1"]
    assert _links(w)["ac1"]["delay"] == _links(v)["ac1"]["delay"] == "5ms"  # halves of 10 ms
    assert {b["name"]: b["domain"] for b in w["borders"]} == {
        "a.ab1": "x", "ab1.mid": "v", "a.ac1": "x", "ac1.mid": "v", "b.bc1": "y", "bc1.mid": "v"}
    assert {b["name"]: b["domain"] for b in v["borders"]}["c.ac1"] == "z"
    # Each site's border faces the carrier whose half reaches it: a's w, c's v.
    assert {b["name"]: b["domain"] for b in docs["x"]["borders"]}["a.ac1"] == "w"
    assert {b["name"]: b["domain"] for b in docs["z"]["borders"]}["c.ac1"] == "v"


def test_without_a_carrier_the_first_site_owner_holds_the_link():
    _owners, docs = _render("a:x,b:y,c:z", "")
    assert _links(docs["x"])["ac1"]["ends"] == ["a", "c.ac1"]
    assert _links(docs["x"])["ac1"]["delay"] == "10ms"
    assert _links(docs["z"])["c-ac1"]["ends"] == ["c", "c.ac1"]
    assert {b["name"]: b["domain"] for b in docs["z"]["borders"]}["c.ac1"] == "x"


def test_two_sites_of_one_owner_share_their_link_directly():
    _owners, docs = _render("a:x,b:x,c:z", "")
    x = docs["x"]
    assert _links(x)["ab1"]["ends"] == ["a", "b"]
    peers = {g["name"]: {p["name"]: p for p in g["peers"]} for g in x["gateways"]}
    assert peers["a"]["b"]["gateway"] == "b"
    assert peers["a"]["c"]["remote"] == "c"


def test_every_domain_lists_every_other_as_a_peer_with_its_ca():
    owners, docs = _render("a:x,b:y,c:z", "w")
    for d, doc in docs.items():
        peers = {p["domain"]: p for p in doc["federation"]["peers"]}
        assert set(peers) == set(owners.domains) - {d}
        for other, p in peers.items():
            assert p["url"].startswith("https://127.0.0.1:")
            assert p["ca"].endswith(f"ca-{other}.pem")
        assert doc["agent"]["tls"]["client_ca"].endswith(f"peers-of-{d}.pem")


@pytest.mark.parametrize("text, wan, problem", [
    ("a:x,b:y", "", r"no owner for site\(s\) c"),
    ("a:x,b:y,c:z,a:q", "", "site a is given twice"),
    ("a:X,b:y,c:z", "", "expected SITE:DOMAIN"),
    ("a:x,q:y,c:z", "", "expected SITE:DOMAIN"),
    ("a:x,b:y,c:z", "x", "also owns a site"),
    ("a:x,b:x,c:z", "w", "two sites of one owner"),
    ("a:x,b:y,c:z", "w,w", "two distinct"),
    ("a:x,b:y,c:z", "w,v,u", "two distinct"),
    ("a:x,b:y,c:z", "w,z", "also owns a site"),
])
def test_bad_owners_are_refused_with_the_cause(text, wan, problem):
    with pytest.raises(LabError, match=problem):
        federation.parse_owners(text, wan, topology.build(3, 1))


def test_pki_certificates_name_their_domain_and_verify_only_against_their_ca(tmp_path,
                                                                               monkeypatch):
    monkeypatch.setattr(federation, "PKI_DIR", tmp_path / "pki")
    files = {d: federation.DomainFiles(d, 7900 + i) for i, d in enumerate(["x", "y"])}
    federation.make_pki(files, ["10.99.1.1"])
    x, y = files["x"], files["y"]
    text = subprocess.run(["openssl", "x509", "-in", str(x.cert), "-noout", "-ext",
                           "subjectAltName"], capture_output=True, text=True, check=True).stdout
    assert "URI:detwan://domain/x" in text and "IP Address:127.0.0.1" in text
    ok = subprocess.run(["openssl", "verify", "-CAfile", str(x.ca), str(x.cert)],
                        capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    wrong = subprocess.run(["openssl", "verify", "-CAfile", str(y.ca), str(x.cert)],
                           capture_output=True, text=True)
    assert wrong.returncode != 0
    # The bundle x accepts clients from holds y's CA, not its own.
    assert x.peer_cas.read_text() == y.ca.read_text()
    # Keys and tokens are private to their owner.
    for f in (x.key, x.ca_key, x.tokens, x.admin_token, x.tenant_token("x-job1")):
        assert f.stat().st_mode & 0o077 == 0, f
    lines = [line for line in x.tokens.read_text().splitlines() if not line.startswith("#")]
    assert any("tenant=* verbs=read,reserve,admin" in line for line in lines)
    assert any("tenant=x-job1 verbs=read,reserve" in line for line in lines)
