"""Sites of different owners in the lab (`tools/testbed up --owners a:x,b:y,c:z [--wan-owner w]
--agents`, docs/testbed.md "Owners", docs/federation.md).

Each owner (domain) runs its own detwan-agent with its own topology file, journal, CA,
certificate and tokens; the agents talk to each other over mutual TLS and reserve across
domains with the two-phase protocol of docs/federation.md. What each domain's topology holds:

  * its sites (with their gateways) and, per WAN path that leaves a site of the domain, a
    border point "<site>.<port>" (e.g. "a.ac1") where the site's gateway port meets the WAN;
  * with --wan-owner W: every WAN path belongs to W. A site's domain has an access link
    "<site>-<port>" from the site to its border (delay 0, the port's line rate and slot
    schedule: the gateway port is the site owner's resource); W has the border points of both
    ends and the WAN link "<port>" between them (delay, jitter, loss of the path);
  * with --wan-owner W,V: two carriers in a row on every WAN path (a path across four
    domains): W owns the half from the first site's border to the mid-point border
    "<port>.mid", V the half from there to the second site's border (each half: the path's
    capacity, half its delay and jitter, and a loss that composes to the path's);
  * without --wan-owner: a path between two sites of one owner is that owner's link, as in a
    single-domain lab; a path between owners X (the first site of the pair) and Y belongs to X:
    X has the link "<port>" from its site to the border "<far site>.<port>", and Y the access
    link "<far site>-<port>" from its site to the same border.
  * the gateway's peers toward another domain's gateway name it with `remote:`.

Pure functions first (tested without root in tests/lab/test_federation_lab.py); the PKI is made
with stock `openssl` commands (the ones docs/trust.md shows).
"""
from __future__ import annotations

import dataclasses
import os
import pathlib
import re
import secrets
import subprocess

from lab import agent as lab_agent
from lab import gateway
from lab.netns import LabError
from lab.state import RUN_DIR
from lab.topology import Topology, WanPath
from lab.units import format_duration, parse_duration_ns

DOMAIN_RE = re.compile(r"[a-z][a-z0-9-]{0,15}")
PKI_DIR = RUN_DIR / "pki"
CERT_DAYS = 30
# Cross-domain tunnels take their ids from this range; the agents' own ids stay below it.
FEDERATED_TUNNEL_IDS = "40000-65535"
LOCAL_TUNNEL_IDS = "1000-39999"  # agent.tunnel_ids: the domain's own tunnels
FEDERATION_HOLD_TIMEOUT = "10s"
FEDERATION_CALL_TIMEOUT = "2s"


@dataclasses.dataclass(frozen=True)
class Owners:
    site_domain: dict[str, str]  # site name -> domain
    wan: str = ""                # the carrier's domain ("" = the sites' owners own the WAN)
    wan2: str = ""               # a second carrier after it on every path ("" = none)

    @property
    def domains(self) -> list[str]:
        """Every domain, sites' owners first (in site order), then the carrier."""
        seen: list[str] = []
        for d in self.site_domain.values():
            if d not in seen:
                seen.append(d)
        for carrier in (self.wan, self.wan2):
            if carrier and carrier not in seen:
                seen.append(carrier)
        return seen

    def sites_of(self, domain: str, topo: Topology) -> list:
        return [s for s in topo.sites if self.site_domain.get(s.name) == domain]

    def path_owner(self, path: WanPath) -> str:
        """The domain that owns the WAN link of `path` (with two carriers: the first half)."""
        if self.wan:
            return self.wan
        return self.site_domain[path.a.name]

    def carrier_at(self, path: WanPath, site) -> str:
        """The domain whose link meets `site`'s border on `path`."""
        if self.wan2 and site.name == path.b.name:
            return self.wan2
        return self.path_owner(path)


def parse_owners(text: str, wan_owner: str, topo: Topology) -> Owners:
    """--owners a:x,b:y,c:z (every site of the lab, once) and --wan-owner w (or w,v: two
    carriers in a row)."""
    site_domain: dict[str, str] = {}
    names = {s.name for s in topo.sites}
    for item in [t.strip() for t in text.split(",") if t.strip()]:
        site, sep, domain = item.partition(":")
        if not sep or site not in names or not DOMAIN_RE.fullmatch(domain):
            raise LabError(f"--owners '{item}': expected SITE:DOMAIN with SITE one of "
                           f"{', '.join(sorted(names))} and DOMAIN lower-case letters, digits "
                           "and dashes (at most 16), e.g. --owners a:x,b:y,c:z")
        if site in site_domain:
            raise LabError(f"--owners: site {site} is given twice")
        site_domain[site] = domain
    missing = sorted(names - site_domain.keys())
    if missing:
        raise LabError(f"--owners: no owner for site(s) {', '.join(missing)} (every site needs "
                       "one)")
    carriers = [c.strip() for c in wan_owner.split(",") if c.strip()]
    if len(carriers) > 2 or len(set(carriers)) != len(carriers):
        raise LabError(f"--wan-owner '{wan_owner}': one carrier, or two distinct ones (W,V)")
    for carrier in carriers:
        per_domain: dict[str, list[str]] = {}
        for site, domain in site_domain.items():
            per_domain.setdefault(domain, []).append(site)
        shared = [f"{d} ({', '.join(v)})" for d, v in per_domain.items() if len(v) > 1]
        if shared:
            raise LabError("--wan-owner with two sites of one owner is not supported yet (their "
                           f"tunnels would leave and re-enter the domain): {'; '.join(shared)}")
        if not DOMAIN_RE.fullmatch(carrier):
            raise LabError(f"--wan-owner '{carrier}': lower-case letters, digits, dashes")
        if carrier in site_domain.values():
            raise LabError(f"--wan-owner {carrier} also owns a site: the carrier is a domain "
                           "of its own that owns only links")
    return Owners(site_domain, *(carriers + ["", ""])[:2])


def border_name(site, path: WanPath) -> str:
    return f"{site.name}.{gateway.wan_port_name(path)}"


def access_link_name(site, path: WanPath) -> str:
    return f"{site.name}-{gateway.wan_port_name(path)}"


def _link_line(name: str, ends: tuple[str, str], fields: dict[str, str], mtu: int) -> str:
    return (f"  - {{name: {name}, ends: [{ends[0]}, {ends[1]}], capacity: {fields['capacity']}, "
            f"delay: {fields['delay']}, jitter: {fields['jitter']}, loss: {fields['loss']}, "
            f"reservable: 90%, mtu: {mtu}, cycle: {format_duration(gateway.CYCLE_NS)}, "
            f"slots: {gateway.SLOT_COUNT}, guard: {format_duration(gateway.GUARD_NS)}}}")


def _half_link(fields: dict[str, str]) -> dict[str, str]:
    """One of two carriers' halves of a WAN path: its capacity, half its delay and jitter, and
    the loss l' with (1 - l')^2 = 1 - l (the halves compose to the path)."""
    loss = float(fields["loss"])
    half_loss = 1.0 - (1.0 - loss) ** 0.5
    return {"capacity": fields["capacity"],
            "delay": format_duration(parse_duration_ns(fields["delay"]) // 2),
            "jitter": format_duration(parse_duration_ns(fields["jitter"]) // 2),
            "loss": f"{half_loss:.6g}" if loss > 0 else "0"}


@dataclasses.dataclass
class DomainFiles:
    """Where a domain's agent finds its files (all under PKI_DIR / RUN_DIR)."""
    domain: str
    port: int

    @property
    def ca(self) -> pathlib.Path:
        return PKI_DIR / f"ca-{self.domain}.pem"

    @property
    def ca_key(self) -> pathlib.Path:
        return PKI_DIR / f"ca-{self.domain}.key"

    @property
    def cert(self) -> pathlib.Path:
        return PKI_DIR / f"agent-{self.domain}.pem"

    @property
    def key(self) -> pathlib.Path:
        return PKI_DIR / f"agent-{self.domain}.key"

    @property
    def peer_cas(self) -> pathlib.Path:
        """The CAs of the domains this agent accepts client certificates from (its peers')."""
        return PKI_DIR / f"peers-of-{self.domain}.pem"

    @property
    def tokens(self) -> pathlib.Path:
        return PKI_DIR / f"tokens-{self.domain}"

    @property
    def admin_token(self) -> pathlib.Path:
        return PKI_DIR / f"token-{self.domain}-admin"

    def tenant_token(self, tenant: str) -> pathlib.Path:
        return PKI_DIR / f"token-{self.domain}-{tenant}"

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"


def tenants_of(domain: str) -> list[str]:
    """Two tenants per domain, so isolation between them can be tried: '<domain>-job1/2'."""
    return [f"{domain}-job1", f"{domain}-job2"]


def render_domain_topology(domain: str, topo: Topology, owners: Owners, spec_for,
                           files: dict[str, DomainFiles], journal: pathlib.Path,
                           mtu: int = gateway.WAN_MTU_BYTES, mgmt_net: str = "10.99",
                           public_keys: dict[str, str] | None = None) -> str:
    """The topology file of `domain`'s agent; `public_keys` (site name -> base64) registers
    its gateways' identity keys (the X25519 exchange keys their tunnels)."""
    me = files[domain]
    lines = [
        f"# detwan-agent of domain {domain}, written by tools/testbed up --owners "
        "(tools/lab/federation.py)",
        f"domain: {domain}",
        "agent:",
        f"  name: {domain}",
        f"  listen: 0.0.0.0:{me.port}",
        f"  allow: [127.0.0.0/8, {mgmt_net}.0.0/16]",
        f"  journal: {journal}",
        f"  tokens_file: {me.tokens}",
        "  hold_timeout: 60s",
        "  reconcile_interval: 500ms",
        "  provision_wait: 10s",
        f"  tunnel_ids: {LOCAL_TUNNEL_IDS}",
        "  tls:",
        f"    cert: {me.cert}",
        f"    key: {me.key}",
        f"    client_ca: {me.peer_cas}",
        "federation:",
        f"  cert: {me.cert}",
        f"  key: {me.key}",
        f"  hold_timeout: {FEDERATION_HOLD_TIMEOUT}",
        f"  call_timeout: {FEDERATION_CALL_TIMEOUT}",
        f"  tunnel_ids: {FEDERATED_TUNNEL_IDS}",
        "  peers:",
    ]
    for other in owners.domains:
        if other != domain:
            lines.append(f"    - {{domain: {other}, url: {files[other].url}, "
                         f"ca: {files[other].ca}}}")
    my_sites = owners.sites_of(domain, topo)
    borders: dict[str, str] = {}  # border name -> neighbouring domain
    links: list[str] = []
    ports_of: dict[str, list[tuple[str, str]]] = {}    # site -> [(port, link)]
    peers_of: dict[str, list[str]] = {}                # site -> peer lines
    for p in topo.paths:
        port = gateway.wan_port_name(p)
        f = lab_agent.link_fields(spec_for(p))
        access = {"capacity": f["capacity"], "delay": "0s", "jitter": "0s", "loss": "0"}
        da, db = owners.site_domain[p.a.name], owners.site_domain[p.b.name]
        owner = owners.path_owner(p)
        if da == db == owner:
            if owner == domain:  # a path inside the domain: the link joins the two sites
                links.append(_link_line(port, (p.a.name, p.b.name), f, mtu))
                for s in (p.a, p.b):
                    ports_of.setdefault(s.name, []).append((port, port))
                    peers_of.setdefault(s.name, []).append(
                        f"{{name: {gateway.peer_name(p, s)}, port: {port}, "
                        f"gateway: {p.peer(s).name}}}")
            continue
        if owners.wan2 and domain in (owners.wan, owners.wan2):
            # Two carriers in a row: each owns half the path, meeting at "<port>.mid".
            mid = f"{port}.mid"
            half = _half_link(f)
            if domain == owners.wan:
                ba = border_name(p.a, p)
                borders[ba], borders[mid] = da, owners.wan2
                links.append(_link_line(port, (ba, mid), half, mtu))
            else:
                bb = border_name(p.b, p)
                borders[mid], borders[bb] = owners.wan, db
                links.append(_link_line(port, (mid, bb), half, mtu))
            continue
        if owner == domain and da != domain and db != domain:
            # A carrier's link: border to border.
            ba, bb = border_name(p.a, p), border_name(p.b, p)
            borders[ba], borders[bb] = da, db
            links.append(_link_line(port, (ba, bb), f, mtu))
            continue
        for s, ds, dfar in ((p.a, da, db), (p.b, db, da)):
            if ds != domain:
                continue
            far = p.peer(s)
            if owner == domain:
                # Our link reaches the far site's border directly.
                b = border_name(far, p)
                borders[b] = dfar
                ports_of.setdefault(s.name, []).append((port, port))
                links.append(_link_line(port, (s.name, b), f, mtu))
            else:
                # An access link from our site to our border with the link's owner.
                b = border_name(s, p)
                borders[b] = owners.carrier_at(p, s)
                link = access_link_name(s, p)
                ports_of.setdefault(s.name, []).append((port, link))
                links.append(_link_line(link, (s.name, b), access, mtu))
            peers_of.setdefault(s.name, []).append(
                f"{{name: {gateway.peer_name(p, s)}, port: {port}, remote: {far.name}}}")
    if my_sites:
        lines.append("sites:")
        for s in my_sites:
            lines.append(f"  - {{name: {s.name}, gateway: {s.name}, "
                         f"tunnel_prefixes: [{s.tunnel_prefix}]}}")
        lines.append("gateways:")
        for s in my_sites:
            lines += [f"  - name: {s.name}",
                      f"    site: {s.name}",
                      f"    admin_socket: {gateway.admin_socket(s)}",
                      *([f'    public_key: "{public_keys[s.name]}"']
                        if public_keys and s.name in public_keys else []),
                      "    playout_error: 200us",
                      "    processing_delay: 100us",
                      "    ports: [" + ", ".join(f"{{name: {port}, link: {link}}}"
                                               for port, link in ports_of.get(s.name, [])) + "]",
                      "    peers: [" + ", ".join(peers_of.get(s.name, [])) + "]"]
    if borders:
        lines.append("borders:")
        for b in sorted(borders):
            lines.append(f"  - {{name: {b}, domain: {borders[b]}}}")
    if links:
        lines.append("links:")
        lines += links
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------------- PKI

def _openssl(*args: str) -> None:
    try:
        res = subprocess.run(["openssl", *args], stdin=subprocess.DEVNULL, capture_output=True,
                             text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise LabError(f"openssl {args[0]}: {e}") from e
    if res.returncode != 0:
        raise LabError(f"openssl {' '.join(args[:2])} failed: {res.stderr.strip()[-400:]}")


def _private(path: pathlib.Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)


def make_pki(files: dict[str, DomainFiles], mgmt_addrs: list[str]) -> None:
    """A CA per domain, the agent's certificate (server and client: SAN IP 127.0.0.1 and the
    management addresses, URI detwan://domain/<d>), the bundle of its peers' CAs, and tokens:
    an admin token and two tenants' tokens per domain. The commands are docs/trust.md's."""
    PKI_DIR.mkdir(parents=True, exist_ok=True)
    os.chmod(PKI_DIR, 0o700)
    for d, f in files.items():
        _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
                 "-nodes", "-keyout", str(f.ca_key), "-out", str(f.ca), "-days", str(CERT_DAYS),
                 "-subj", f"/O=detwan lab/CN=detwan CA of domain {d}",
                 "-addext", "basicConstraints=critical,CA:TRUE",
                 "-addext", "keyUsage=critical,keyCertSign,cRLSign")
        csr = PKI_DIR / f"agent-{d}.csr"
        _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                 "-keyout", str(f.key), "-out", str(csr), "-subj", f"/O=detwan lab/CN={d}")
        ext = PKI_DIR / f"agent-{d}.ext"
        san = ",".join([f"URI:detwan://domain/{d}", "IP:127.0.0.1",
                        *[f"IP:{a}" for a in mgmt_addrs]])
        ext.write_text(f"subjectAltName={san}\nextendedKeyUsage=serverAuth,clientAuth\n"
                       "basicConstraints=critical,CA:FALSE\n", encoding="utf-8")
        _openssl("x509", "-req", "-in", str(csr), "-CA", str(f.ca), "-CAkey", str(f.ca_key),
                 "-CAcreateserial", "-out", str(f.cert), "-days", str(CERT_DAYS),
                 "-extfile", str(ext))
        csr.unlink()
        ext.unlink()
        os.chmod(f.key, 0o600)
        os.chmod(f.ca_key, 0o600)
    for d, f in files.items():
        bundle = "".join(files[o].ca.read_text(encoding="utf-8") for o in files if o != d)
        f.peer_cas.write_text(bundle, encoding="utf-8")
        admin = secrets.token_hex(24)
        lines = [f"# tokens of domain {d} (tools/lab/federation.py)",
                 f"token={admin} tenant=* verbs=read,reserve,admin name={d}-admin"]
        _private(f.admin_token, admin + "\n")
        for t in tenants_of(d):
            tok = secrets.token_hex(24)
            lines.append(f"token={tok} tenant={t} verbs=read,reserve name={t}")
            _private(f.tenant_token(t), tok + "\n")
        _private(f.tokens, "\n".join(lines) + "\n")


def agent_record(domain: str, f: DomainFiles, topology: pathlib.Path, journal: pathlib.Path,
                 log: pathlib.Path) -> dict:
    """What `status --json` lists in agents[] for a domain's agent."""
    return {"name": domain, "domain": domain, "url": f.url, "ca": str(f.ca),
            "token_file": str(f.admin_token),
            "tenant_token_files": {t: str(f.tenant_token(t)) for t in tenants_of(domain)},
            "topology": str(topology), "journal": str(journal), "log": str(log)}
