"""The agent's operator console (docs/console.md) in headless Chromium (Debian's `chromium` and
`chromium-driver`, driven by `python3-selenium`).

A 2-site lab with the uring gateways and the agent, restarted with a tokens file (a read token
and a write token). The page at the agent's `/`:
  * loads without a token and asks for one; with the read token it shows the state and no
    reserve/release forms, and the browser's console has no error;
  * shows a reservation made with `detwanctl` within 2 s, and its tunnel's delay (from the
    gateways' stats through the agent) changes while pings cross the tunnel;
  * with the write token it shows the forms, and releasing through the release form works;
  * refuses a wrong token (and says so).
A screenshot is kept as a test artefact: $DETWAN_BUILD_DIR/test-results/lab/console.png.
The new read endpoints' answers are checked against the OpenAPI document.

Without namespaces (an agent on loopback whose gateways do not exist): the page says the
gateways are unreachable, and the reserve form and the row buttons work; screenshot
console-no-gateways.png beside the other.
"""
from __future__ import annotations

import importlib.util
import json
import os
import secrets
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

import labutil
from labutil import tb

sys.path.insert(0, str(labutil.REPO / "tools"))
from lab import agent  # noqa: E402
from agent_lab import WAN, ctl, openapi, validate  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
READ_TOKEN = "console-read-" + secrets.token_hex(8)
WRITE_TOKEN = "console-write-" + secrets.token_hex(8)
SHOWN_WITHIN_S = 2.0


def _browser_problem() -> str | None:
    if os.geteuid() != 0:
        return "the console lab test needs root (network namespaces)"
    for path, package in ((CHROMIUM, "chromium"), (CHROMEDRIVER, "chromium-driver")):
        if not shutil.which(path):
            return f"{path} not found: install Debian's {package} (tools/install-deps)"
    if importlib.util.find_spec("selenium") is None:
        return "selenium not importable: install Debian's python3-selenium (tools/install-deps)"
    return None


pytestmark = pytest.mark.skipif(_browser_problem() is not None, reason=_browser_problem() or "")


def screenshot_path(name: str = "console.png"):
    directory = labutil.build_dir() / "test-results" / "lab"
    directory.mkdir(parents=True, exist_ok=True)
    return directory / name


@pytest.fixture(scope="module")
def consolelab(wanem_ready, tmp_path_factory):
    """2 sites, the agent restarted with a tokens file; DETWAN_AGENT(_TOKEN) for detwanctl."""
    tokens = tmp_path_factory.mktemp("console") / "tokens"
    tokens.write_text(f"read {READ_TOKEN}\n"
                      f"token={WRITE_TOKEN} tenant=* verbs=admin name=operator\n",
                      encoding="utf-8")
    tokens.chmod(0o600)
    with labutil.lab("--sites", "2", "--dataplane", "uring", "--agents", "--wan", WAN) as st:
        topology = agent.topology_file()
        text = topology.read_text(encoding="utf-8")
        assert "  allow: [" in text
        topology.write_text(text.replace("  allow: [", f"  tokens_file: {tokens}\n  allow: [", 1),
                            encoding="utf-8")
        tb("agent", "lab", "restart", check=True)
        url = st["agents"][0]["url"]
        os.environ["DETWAN_AGENT"] = url
        os.environ["DETWAN_AGENT_TOKEN"] = WRITE_TOKEN
        try:
            yield {"url": url, "sites": st["sites"]}
        finally:
            os.environ.pop("DETWAN_AGENT", None)
            os.environ.pop("DETWAN_AGENT_TOKEN", None)


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    from selenium import webdriver  # pylint: disable=import-outside-toplevel
    from selenium.webdriver.chrome.service import Service  # pylint: disable=import-outside-toplevel
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1500,1300", "--no-first-run", "--disable-extensions",
                f"--user-data-dir={tmp_path_factory.mktemp('chromium')}"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


def api_get(url: str, path: str, token: str) -> tuple[int, dict]:
    request = urllib.request.Request(url + path, headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, json.loads(answer.read().decode())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read().decode() or "{}")


def severe(driver) -> list[dict]:
    return [e for e in driver.get_log("browser") if e.get("level") == "SEVERE"]


def sign_in(driver, url: str, token: str):
    from selenium.webdriver.common.by import By  # pylint: disable=import-outside-toplevel
    from selenium.webdriver.support.ui import WebDriverWait  # pylint: disable=import-outside-toplevel
    # A fresh page without the token the tab kept (sessionStorage) from an earlier sign-in.
    driver.execute_script("try { sessionStorage.clear(); } catch (e) {}")
    driver.get(url + "/")
    field = driver.find_element(By.ID, "token")
    field.clear()
    field.send_keys(token)
    driver.find_element(By.CSS_SELECTOR, "#token-form button[type=submit]").click()
    WebDriverWait(driver, 10).until(lambda d: d.find_element(By.ID, "main").is_displayed())
    # The first poll has rendered the gateways.
    WebDriverWait(driver, 10).until(
        lambda d: d.find_elements(By.CSS_SELECTOR, "#gateways tbody tr[data-gateway]"))


# The page re-renders its tables every second, so an element found a moment ago may be gone:
# read and click through one script run in the page (atomic between two renders) instead.
def texts(driver, css: str) -> list[str]:
    """The rendered text of every element matching `css`, now."""
    return driver.execute_script(
        "return Array.from(document.querySelectorAll(arguments[0])).map(e => e.innerText);", css)


def text(driver, css: str) -> str:
    found = texts(driver, css)
    return found[0] if found else ""


def click(driver, css: str) -> bool:
    """Clicks the first element matching `css`; False if there is none."""
    return driver.execute_script(
        "const e = document.querySelector(arguments[0]); if (e) e.click(); return !!e;", css)


def delay_text(driver, rid: str) -> str:
    return text(driver, f"#delay-{rid}")


@pytest.mark.netns
def test_console_in_headless_chromium(consolelab, browser):
    from selenium.webdriver.common.by import By  # pylint: disable=import-outside-toplevel
    from selenium.webdriver.support.ui import WebDriverWait  # pylint: disable=import-outside-toplevel
    url = consolelab["url"]
    driver = browser

    # The page itself needs no token, and carries its security headers.
    with urllib.request.urlopen(url + "/", timeout=10) as page:
        assert page.status == 200
        csp = page.headers["Content-Security-Policy"]
        assert "default-src 'self'" in csp and "unsafe-inline" not in csp
        assert page.headers["X-Frame-Options"] == "DENY"
        assert page.headers["X-Content-Type-Options"] == "nosniff"
    assert api_get(url, "/v1/reservations", "")[0] == 401

    # A read token: the state, no forms, no console error.
    driver.get(url + "/")
    assert driver.find_element(By.ID, "token-form").is_displayed()
    assert not driver.find_element(By.ID, "main").is_displayed()
    sign_in(driver, url, READ_TOKEN)
    identity = driver.find_element(By.ID, "identity").text
    assert "may read" in identity and "reserve" not in identity, identity
    assert not driver.find_element(By.ID, "reserve-form").is_displayed()
    assert not driver.find_element(By.ID, "release-form").is_displayed()
    gateways = texts(driver, "#gateways tbody tr[data-gateway]")
    assert len(gateways) == 2
    assert all("yes" in g for g in gateways), gateways
    assert driver.find_elements(By.CSS_SELECTOR, "#links svg.calendar")
    assert severe(driver) == []

    # A reservation made with detwanctl appears within 2 s.
    r = json.loads(ctl("reserve", "--from", "a", "--to", "b", "--rate", "20mbit",
                       "--max-latency", "40ms", "--duration", "10m", "--provision",
                       "--request-id", "slurm-4242-a-b", "--json", check=True).stdout)
    reserved_at = time.monotonic()
    rid = r["id"]
    WebDriverWait(driver, SHOWN_WITHIN_S, poll_frequency=0.05).until(
        lambda d: d.find_elements(By.CSS_SELECTOR, f"#reservations tr[data-id='{rid}']"))
    shown_s = time.monotonic() - reserved_at
    assert shown_s <= SHOWN_WITHIN_S
    WebDriverWait(driver, 5).until(
        lambda d: "provisioned" in text(d, f"#reservations tr[data-id='{rid}'] td.state"))
    row = text(driver, f"#reservations tr[data-id='{rid}']")
    assert "slurm job 4242" in row and "20 Mbit/s" in row and "a → b" in row, row
    # The reservation's tunnel on both gateways, with its reservation.
    WebDriverWait(driver, 5).until(lambda d: len(d.find_elements(
        By.CSS_SELECTOR, f"#tunnels tr[data-tunnel='{r['tunnel_id']}']")) == 2)

    # Its delay updates while traffic crosses the tunnel (pings a -> b and back).
    b_addr = consolelab["sites"][1]["tunnel_addr"]
    pinger = subprocess.Popen([str(labutil.TESTBED), "exec", "a", "--", "ping", "-n", "-q", "-c",
                               "300", "-i", "0.05", b_addr],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        WebDriverWait(driver, 15, poll_frequency=0.2).until(
            lambda d: "pkts" in delay_text(d, rid))
        first = delay_text(driver, rid)
        WebDriverWait(driver, 10, poll_frequency=0.2).until(
            lambda d: "pkts" in delay_text(d, rid) and delay_text(d, rid) != first)
        second = delay_text(driver, rid)
        assert "ms" in second, second
    finally:
        pinger.terminate()
        pinger.wait(timeout=10)

    # The new endpoints answer as the OpenAPI document says.
    doc = openapi()
    status, who = api_get(url, "/v1/whoami", READ_TOKEN)
    assert status == 200 and who["may_reserve"] is False
    validate(doc, "Identity", who)
    status, gws = api_get(url, "/v1/gateways", READ_TOKEN)
    assert status == 200
    for g in gws["gateways"]:
        validate(doc, "Gateway", g)
        assert g["reachable"] and g["in_sync"]
    status, live = api_get(url, "/v1/gateways/b/tunnels", READ_TOKEN)
    assert status == 200
    validate(doc, "GatewayTunnels", live)
    mine = [t for t in live["tunnels"] if t["id"] == r["tunnel_id"]]
    assert mine and mine[0]["reservation"] == rid and mine[0]["rx"]["received_packets"] > 0
    status, calendar = api_get(url, "/v1/calendar?horizon_s=3600&step_s=300", READ_TOKEN)
    assert status == 200
    validate(doc, "Calendar", calendar)
    ab = next(link for link in calendar["links"] if link["name"] == r["links"][0])
    assert max(max(d["reserved_bps"]) for d in ab["directions"]) >= 20_000_000

    assert severe(driver) == []

    # A write token: the forms; release through the release form.
    sign_in(driver, url, WRITE_TOKEN)
    assert "operator" in driver.find_element(By.ID, "identity").text
    assert driver.find_element(By.ID, "reserve-form").is_displayed()
    assert driver.find_element(By.ID, "release-form").is_displayed()
    driver.save_screenshot(str(screenshot_path()))
    field = driver.find_element(By.ID, "release-id")
    field.clear()
    field.send_keys(rid)
    driver.find_element(By.CSS_SELECTOR, "#release-form button[type=submit]").click()
    WebDriverWait(driver, 10).until(
        lambda d: "released" in text(d, f"#reservations tr[data-id='{rid}'] td.state"))
    status, after = api_get(url, f"/v1/reservations/{rid}", READ_TOKEN)
    assert status == 200 and after["state"] == "released"
    assert severe(driver) == []

    # A wrong token is refused and the page says so (the browser logs that 401 itself).
    driver.find_element(By.ID, "sign-out").click()
    field = driver.find_element(By.ID, "token")
    field.clear()
    field.send_keys("not-a-token-of-this-agent")
    driver.find_element(By.CSS_SELECTOR, "#token-form button[type=submit]").click()
    WebDriverWait(driver, 5).until(
        lambda d: "refused" in d.find_element(By.ID, "token-error").text)
    assert not driver.find_element(By.ID, "main").is_displayed()
    # The only error the browser logged is that refusal.
    logged = severe(driver)
    assert logged and all("/v1/whoami" in e["message"] and "401" in e["message"]
                          for e in logged), logged
    assert ctl("terminate", rid).returncode == 0


# ------------------------------------------------------------------ without namespaces

LOOPBACK_TOPOLOGY = """domain: solo
agent:
  name: solo
  listen: 127.0.0.1:{port}
  journal: {dir}/agent.db
  tokens_file: {dir}/tokens
  hold_timeout: 60s
  provision_wait: 1s
sites:
  - {{name: a, gateway: gw-a, tunnel_prefixes: [10.20.1.0/24]}}
  - {{name: b, gateway: gw-b, tunnel_prefixes: [10.20.2.0/24]}}
  - {{name: c, gateway: gw-c, tunnel_prefixes: [10.20.3.0/24]}}
gateways:
  - name: gw-a
    site: a
    admin_socket: {dir}/gw-a.sock
    ports: [{{name: ab1, link: ab1}}, {{name: ac1, link: ac1}}]
    peers: [{{name: b, port: ab1, gateway: gw-b}}, {{name: c, port: ac1, gateway: gw-c}}]
  - name: gw-b
    site: b
    admin_socket: {dir}/gw-b.sock
    ports: [{{name: ab1, link: ab1}}]
    peers: [{{name: a, port: ab1, gateway: gw-a}}]
  - name: gw-c
    site: c
    admin_socket: {dir}/gw-c.sock
    ports: [{{name: ac1, link: ac1}}]
    peers: [{{name: a, port: ac1, gateway: gw-a}}]
links:
  - {{name: ab1, ends: [a, b], capacity: 200mbit, delay: 5ms, reservable: 90%}}
  - {{name: ac1, ends: [a, c], capacity: 100mbit, delay: 8ms, reservable: 90%}}
"""


@pytest.fixture(scope="module")
def solo_agent(tmp_path_factory):
    """An agent on loopback whose gateways' sockets do not exist (no namespace, no gateway)."""
    directory = tmp_path_factory.mktemp("solo")
    tokens = directory / "tokens"
    tokens.write_text(f"read {READ_TOKEN}\ntoken={WRITE_TOKEN} tenant=* verbs=admin "
                      "name=operator\n", encoding="utf-8")
    tokens.chmod(0o600)
    port = agent.free_port()
    topology = directory / "agent.yaml"
    topology.write_text(LOOPBACK_TOPOLOGY.format(port=port, dir=directory), encoding="utf-8")
    log = open(directory / "agent.log", "w", encoding="utf-8")  # pylint: disable=consider-using-with
    proc = subprocess.Popen([*agent.agent_command(labutil.build_dir()), "run", "--topology",
                             str(topology)], stdin=subprocess.DEVNULL, stdout=log,
                            stderr=subprocess.STDOUT)
    url = agent.url_of(port)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                agent.get_json(url, "/healthz", timeout_s=1)
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError("detwan-agent did not start:\n"
                                         + (directory / "agent.log").read_text())
                time.sleep(0.05)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        log.close()


def post(url: str, path: str, token: str, body: dict | None = None) -> tuple[int, dict]:
    request = urllib.request.Request(url + path, method="POST",
                                     data=json.dumps(body or {}).encode(),
                                     headers={"Authorization": f"Bearer {token}",
                                              "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, json.loads(answer.read().decode())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read().decode() or "{}")


@pytest.mark.netns  # root: the module skips without it (see _browser_problem)
def test_console_without_gateways(solo_agent, browser):
    from selenium.webdriver.common.by import By  # pylint: disable=import-outside-toplevel
    from selenium.webdriver.support.ui import WebDriverWait  # pylint: disable=import-outside-toplevel
    url = solo_agent
    driver = browser
    driver.get_log("browser")  # what an earlier test left
    driver.get(url + "/")
    sign_in(driver, url, READ_TOKEN)
    assert not driver.find_element(By.ID, "reserve-form").is_displayed()
    gateways = texts(driver, "#gateways tbody tr[data-gateway]")
    assert len(gateways) == 3
    assert all("nothing listens on" in g for g in gateways), gateways
    WebDriverWait(driver, 5).until(lambda d: "stats unavailable" in text(d, "#tunnels"))

    # A reservation made through the API (for Slurm job 7, committed) shows within 2 s.
    status, r = post(url, "/v1/reservations", WRITE_TOKEN,
                     {"src": "a", "dst": "b", "min_bandwidth_bps": 30_000_000,
                      "duration_ns": 3_600_000_000_000, "commit": True,
                      "client_request_id": "slurm-7-a-b"})
    assert status == 201, r
    made_at = time.monotonic()
    WebDriverWait(driver, SHOWN_WITHIN_S, poll_frequency=0.05).until(
        lambda d: d.find_elements(By.CSS_SELECTOR, f"#reservations tr[data-id='{r['id']}']"))
    assert time.monotonic() - made_at <= SHOWN_WITHIN_S
    row = text(driver, f"#reservations tr[data-id='{r['id']}']")
    assert "slurm job 7" in row and "committed" in row and "30 Mbit/s" in row, row
    # A read token has no buttons.
    assert not texts(driver, f"#reservations tr[data-id='{r['id']}'] button")
    assert severe(driver) == []

    # The write token: the reserve form (a to c, commit only) and a row's terminate button.
    from selenium.webdriver.support.ui import Select  # pylint: disable=import-outside-toplevel
    sign_in(driver, url, WRITE_TOKEN)
    assert driver.find_element(By.ID, "reserve-form").is_displayed()
    Select(driver.find_element(By.ID, "reserve-dst")).select_by_value("c")
    rate_field = driver.find_element(By.ID, "reserve-rate")
    rate_field.clear()
    rate_field.send_keys("12mbit")
    driver.find_element(By.ID, "reserve-provision").click()  # commit only: no gateway here
    driver.find_element(By.CSS_SELECTOR, "#reserve-form button[type=submit]").click()
    WebDriverWait(driver, 10).until(lambda d: "reserved r-" in text(d, "#form-result"))
    made = driver.find_element(By.ID, "form-result").text.split()[1].rstrip(":")
    status, listed = api_get(url, f"/v1/reservations/{made}", READ_TOKEN)
    assert status == 200 and listed["min_bandwidth_bps"] == 12_000_000
    assert listed["state"] == "committed" and listed["dst"] == "c"
    WebDriverWait(driver, 5).until(lambda d: d.find_elements(
        By.CSS_SELECTOR, f"#reservations tr[data-id='{made}'] button[data-action=terminate]"))
    # The links show what each reservation books now: 30 Mbit/s on ab1, 12 Mbit/s on ac1.
    WebDriverWait(driver, 10).until(lambda d: "12 Mbit/s" in text(d, "#links"))
    assert "30 Mbit/s" in text(driver, "#links")
    driver.save_screenshot(str(screenshot_path("console-no-gateways.png")))
    assert click(driver, f"#reservations tr[data-id='{made}'] button[data-action=terminate]")
    WebDriverWait(driver, 10).until(
        lambda d: "terminated" in text(d, f"#reservations tr[data-id='{made}'] td.state"))
    assert severe(driver) == []
