#!/usr/bin/env python3
"""The dashboard in a real browser (headless Chromium from Debian, driven by Selenium)
against a live `herald serve` and `herald sim`. Run by .ci/run through scripts/dashboard-browser.sh:

    scripts/dashboard-browser.sh [path-to-herald-binary] [--screenshots docs/images]

What it checks, in order (each failure names the step and keeps the page's text):
  1. sign in with the demo app's server key from the login form;
  2. find a user on Users and see a deferred delivery's decision-trace text (SyncWell's quiet
     hours, the user in a zone where it is night now) and its timeline on the notification page;
  3. compose a typed notification (PN-02, sync_error), preview it, send it, and watch its page
     turn the delivery to "sent" without a reload (the live poll); the simulator's inbox has it;
  4. Analytics and Catalog render (CTR, the lock-screen preview);
  5. the demo app's server key cannot see the other app (404 "No such app.");
  6. a form posted without its CSRF token is refused with 403;
  7. every page fits 375 px without sideways scrolling, and light and dark render;
  8. sign-out ends the session.
Herald serves HTTPS itself here (server.tls, a self-signed certificate made with openssl) and
the dashboard on a listener of its own (dashboard.port): the session cookie is __Host-, Secure,
and the API's listener serves no dashboard page.
With --screenshots DIR it saves PNGs at 1440 and 375 px wide (dark for one) into DIR.
"""
import argparse
import json

import live_herald
from live_herald import free_port
import os
import shutil
import ssl
import subprocess
import sys
import tempfile
import urllib.request

from selenium import webdriver
from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException, TimeoutException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select, WebDriverWait

ADMIN = "browser-admin-key-0123456789abcdef"
DEMO_SERVER = "browser-demo-server-key-0123456789"
DEMO_CLIENT = "browser-demo-client-key-0123456789"
OTHER_SERVER = "browser-other-server-key-0123456789"
TOKEN = "a1b2c3d4" + "0123456789abcdef" * 3 + "01234567"
BOB_TOKEN = "b0b0b0b0" + "fedcba9876543210" * 3 + "76543210"


# Trusts the run's self-signed certificate (set once it is made).
TLS = None


def wait_for(url, what, process, log):
    live_herald.wait_for(url, what, process, log, "dashboard-browser", TLS if url.startswith("https") else None)


def api(base, method, path, body=None, key=DEMO_SERVER):
    request = urllib.request.Request(
        base + path, method=method, data=None if body is None else json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10, context=TLS) as response:
        return json.loads(response.read() or b"{}")


def inbox(control):
    """What the simulator accepted for Ana's iPhone."""
    return json.loads(urllib.request.urlopen(f"{control}/inbox/{TOKEN}", timeout=10).read())["notifications"]


def night_zone():
    """An IANA zone where it is 03:00–04:00 now: SyncWell's quiet hours (22:00–09:00) hold a PN-03."""
    return live_herald.zone_at(3)


class Run:
    def __init__(self, base, driver, shots):
        self.base = base
        self.driver = driver
        self.shots = shots
        self.step = ""
        self.checks = 0

    def check(self, condition, message):
        self.checks += 1
        if not condition:
            body = self.driver.find_element(By.TAG_NAME, "body").text[:3000]
            sys.exit(f"dashboard-browser: FAILED at '{self.step}': {message}\nURL: {self.driver.current_url}\nPage text:\n{body}")

    def go(self, path):
        self.driver.get(self.base + path)

    def text(self):
        return self.wait().until(lambda d: d.find_element(By.TAG_NAME, "body").text)

    def wait(self, seconds=10):
        """A wait that looks again when a navigation replaced the element it held."""
        return WebDriverWait(self.driver, seconds, poll_frequency=0.1,
                             ignored_exceptions=(NoSuchElementException, StaleElementReferenceException))

    def wait_text(self, needle, seconds=10):
        try:
            self.wait(seconds).until(lambda d: needle in d.find_element(By.TAG_NAME, "body").text)
        except TimeoutException:
            self.check(False, f"'{needle}' did not appear within {seconds} s")

    def fits(self, width):
        """No sideways scrolling of the page itself (wide tables scroll inside their card)."""
        overflow = self.driver.execute_script("return document.documentElement.scrollWidth - window.innerWidth")
        self.check(overflow <= 0, f"the page is {overflow} px wider than a {width} px window")

    def viewport(self, width, height):
        self.driver.execute_cdp_cmd(
            "Emulation.setDeviceMetricsOverride", {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": width < 600})

    def shoot(self, name, width, dark=False):
        """The page at `width` px (a phone below 600): it must fit; with --screenshots, saved whole (up to 2400 px tall)."""
        driver = self.driver
        self.viewport(width, 900)
        if dark:
            driver.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": [{"name": "prefers-color-scheme", "value": "dark"}]})
        driver.refresh()
        self.fits(width)
        if self.shots:
            height = driver.execute_script("return Math.min(document.documentElement.scrollHeight, 2400)")
            self.viewport(width, max(600, height))
            driver.save_screenshot(os.path.join(self.shots, f"dashboard-{name}-{width}{'-dark' if dark else ''}.png"))
        if dark:
            driver.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": [{"name": "prefers-color-scheme", "value": "light"}]})
        driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("herald", nargs="?", default=".build/debug/herald")
    parser.add_argument("--screenshots", help="save PNGs here (docs/images to refresh README's)")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    args = parser.parse_args()
    herald = os.path.abspath(args.herald)
    checkout = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    shots = os.path.abspath(args.screenshots) if args.screenshots else None
    if shots:
        os.makedirs(shots, exist_ok=True)
    work = tempfile.mkdtemp(prefix="herald-browser-")
    processes = []
    try:
        sim, sim_port, control = live_herald.start_sim(herald, work, "dashboard-browser")
        processes.append(sim)
        apns = live_herald.apns_settings(sim_port)
        global TLS
        cert, key = os.path.join(work, "cert.pem"), os.path.join(work, "key.pem")
        subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                        "-keyout", key, "-out", cert, "-days", "1", "-subj", "/CN=herald-browser",
                        "-addext", "subjectAltName=IP:127.0.0.1"], check=True, capture_output=True)
        TLS = ssl.create_default_context(cafile=cert)
        # Ports are chosen before herald serve binds them: another process may take one in
        # between, so a clash is tried again with new ports.
        for attempt in range(3):
            port, dashboard_port = free_port(), free_port()
            with open(os.path.join(work, "herald.yaml"), "w") as f:
                f.write(f"""server: {{ host: 127.0.0.1, port: {port}, tls: {{ cert_file: cert.pem, key_file: key.pem }} }}
dashboard: {{ host: 127.0.0.1, port: {dashboard_port} }}
database: {{ url: "sqlite://{work}/herald.sqlite" }}
admin_key: "{ADMIN}"
apps:
  - id: demo
    keys: {{ server: "{DEMO_SERVER}", client: "{DEMO_CLIENT}" }}
    user_token_secret: "browser-user-token-secret-0123456789abcdef"
    catalog: "{checkout}/Examples/syncwell.yaml"
    apns: {apns}
  - id: other
    keys: {{ server: "{OTHER_SERVER}" }}
    catalog: "{checkout}/Examples/lucid.yaml"
    apns: {apns}
""")
            serve_log = os.path.join(work, f"serve-{attempt}.log")
            serve = subprocess.Popen([herald, "serve", "--config", "herald.yaml"], cwd=work, stdout=open(serve_log, "w"), stderr=subprocess.STDOUT,
                                     env={**os.environ, "HERALD_LOG_LEVEL": "notice"})
            processes.append(serve)
            base = f"https://127.0.0.1:{port}"
            board = f"https://127.0.0.1:{dashboard_port}"
            retry = attempt < 2
            if (live_herald.wait_for(base + "/healthz", "herald serve", serve, serve_log, "dashboard-browser", TLS, retry)
                    and live_herald.wait_for(board + "/livez", "the dashboard listener", serve, serve_log,
                                             "dashboard-browser", TLS, retry)):
                break
        try:
            urllib.request.urlopen(base + "/dashboard/login", timeout=5, context=TLS)
            sys.exit("dashboard-browser: FAILED: the API's listener serves the dashboard though dashboard.port is set")
        except urllib.error.HTTPError as error:
            if error.code != 404:
                sys.exit(f"dashboard-browser: FAILED: the API's listener answered /dashboard/login with {error.code}, not 404")

        # Ana's iPhone in a zone where it is night; Bob's iPhone too, to fill the pages.
        zone = night_zone()
        api(base, "POST", "/v1/apps/demo/devices",
            {"device_id": "ana-iphone", "user_id": "ana", "token": TOKEN, "environment": "sandbox", "locale": "en-GB",
             "name": "Ana's iPhone", "authorization_status": "authorized", "app_version": "3.2"})
        api(base, "POST", "/v1/apps/demo/devices",
            {"device_id": "bob-iphone", "user_id": "bob", "token": BOB_TOKEN, "environment": "sandbox", "locale": "fr-FR",
             "authorization_status": "denied", "app_version": "3.1"})
        api(base, "PUT", "/v1/apps/demo/users/ana", {"time_zone": zone})
        api(base, "PUT", "/v1/apps/demo/users/ana/preferences", {"types": {"sync_success": True}})
        api(base, "POST", "/v1/apps/demo/users/ana/badges", {"counter": "sync_errors", "delta": 2})
        deferred = api(base, "POST", "/v1/apps/demo/notifications",
                       {"to": {"user_ids": ["ana"]}, "type": "PN-03", "data": {"New Provider": "Oura", "provider_id": "oura"}})["id"]
        api(base, "POST", "/v1/apps/demo/notifications", {"to": {"user_ids": ["bob"]}, "type": "PN-02",
                                                          "data": {"Source": "Garmin", "source_id": "garmin"}})

        options = webdriver.ChromeOptions()
        options.binary_location = shutil.which("chromium") or "/usr/bin/chromium"
        for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", "--hide-scrollbars",
                     "--window-size=1440,900", "--force-device-scale-factor=1", "--ignore-certificate-errors"):
            options.add_argument(flag)
        driver = webdriver.Chrome(service=Service(shutil.which("chromedriver") or "/usr/bin/chromedriver"), options=options)
        run = Run(board, driver, shots)
        try:
            exercise(run, control, zone, deferred)
        except Exception as error:  # Selenium's: no such element, a timeout
            run.check(False, f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}")
        finally:
            driver.quit()
        print(f"dashboard-browser: {run.checks} checks passed (Chromium {driver.capabilities.get('browserVersion', '?')})")
    finally:
        live_herald.stop(processes)
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
        else:
            print(f"dashboard-browser: work directory kept at {work}")


def exercise(run, control, zone, deferred):
    driver = run.driver

    run.step = "sign in"
    run.go("/dashboard")
    run.check("/dashboard/login" in driver.current_url, "an anonymous visit goes to the login page")
    run.shoot("login", 375)
    driver.find_element(By.ID, "key").send_keys(DEMO_SERVER)
    driver.find_element(By.CSS_SELECTOR, "form button[type=submit]").click()
    run.wait_text("Overview")
    run.check(driver.current_url.endswith("/dashboard/apps/demo"), "a server key lands on its app")
    run.check("app demo" in run.text(), "the header names who is signed in")
    cookie = driver.get_cookie("__Host-herald_session")
    run.check(cookie is not None and cookie.get("httpOnly") and cookie.get("secure") and cookie.get("sameSite") == "Strict"
              and cookie.get("path") == "/", f"session cookie {cookie}")
    run.check(DEMO_SERVER not in driver.page_source, "the key is not in the page")
    run.shoot("overview", 1440)

    run.step = "find a user, see the deferred delivery's trace"
    driver.find_element(By.LINK_TEXT, "Users").click()
    box = driver.find_element(By.ID, "user_id")
    box.send_keys("ana")
    box.submit()
    run.wait_text("Ana's iPhone")
    text = run.text()
    run.check(TOKEN[:8] + "…" in text and TOKEN not in driver.page_source, "the token is shown by its first 8 characters only")
    run.check(f"Due ({zone})" in text, "due times are in the user's zone")
    run.check("deferred: quiet hours until" in text and "09:00" in text and zone in text, "the waiting delivery says why, in the user's zone")
    run.check("sync_errors: 2" in text, "badges")
    run.shoot("users", 1440)
    run.shoot("users", 375)
    driver.find_element(By.LINK_TEXT, "new_provider").click()
    run.wait_text("Device ana-iphone")
    run.check(deferred in driver.current_url, "the link opens the deferred notification")
    timeline = driver.find_element(By.CSS_SELECTOR, "ol.timeline").text
    run.check("deferred: quiet hours until" in timeline, f"the trace's timeline: {timeline}")

    run.step = "compose, preview and send a typed notification"
    driver.find_element(By.LINK_TEXT, "Compose").click()
    Select(driver.find_element(By.ID, "type")).select_by_value("sync_error")
    driver.find_element(By.ID, "data").send_keys("Source=Strava\nsource_id=strava")
    driver.find_element(By.ID, "user_ids").send_keys("ana")
    driver.find_element(By.CSS_SELECTOR, "button[value=preview]").click()
    run.wait_text("Preview")
    preview = driver.find_element(By.CSS_SELECTOR, "section.preview").text
    run.check("SyncWell Action Required" in preview and "Your connection to Strava has an issue" in preview, f"rendered copy: {preview[:400]}")
    run.check("of 4096 bytes" in preview and '"category" : "SYNC_ERROR"' in preview, "the payload and its size against 4 KB")
    run.check(len(inbox(control)) == 1, "a preview sends nothing (the inbox holds the badge push only)")
    run.shoot("compose", 1440)
    run.shoot("compose", 375)
    driver.find_element(By.ID, "send").click()
    run.wait_text("Device ana-iphone")
    run.check("/notifications/" in driver.current_url, "Send lands on the notification's page")
    # The live poll turns the delivery's state without a reload (PN-02 is transactional: no quiet hours).
    try:
        run.wait(15).until(lambda d: d.find_element(By.CSS_SELECTOR, "[data-delivery-status]").text == "sent")
    except TimeoutException:
        run.check(False, "the delivery did not turn 'sent' on the page")
    received = json.dumps(inbox(control)[-1], ensure_ascii=False)
    run.check("SyncWell Action Required" in received and "Strava" in received, f"the simulator's inbox has it: {received[:300]}")
    driver.refresh()
    run.check("1 sent" in run.text(), "after a reload the counts say the same")
    timeline = driver.find_element(By.CSS_SELECTOR, "ol.timeline").text
    run.check("accepted by the provider after 1 attempt" in timeline, f"the timeline ends with the provider's answer: {timeline}")
    run.shoot("notification", 1440)

    run.step = "analytics and catalog"
    driver.find_element(By.LINK_TEXT, "Analytics").click()
    run.wait_text("Opt-in")
    text = run.text()
    run.check("sync_error" in text and "goal 15.0%" in text and "50.0%" in text, "CTR goal and the opt-in rate (1 of 2 devices)")
    run.check(len(driver.find_elements(By.CSS_SELECTOR, "svg.chart.daily rect.accepted")) >= 1, "the per-day chart draws the sends")
    run.shoot("analytics", 1440)
    run.shoot("analytics", 1440, dark=True)
    driver.find_element(By.LINK_TEXT, "Catalog").click()
    run.wait_text("Catalog")
    card = driver.find_element(By.ID, "type-sync_error").text
    run.check("SyncWell : action requise" in card and "‹Source›" in card and "Fix now" in card, f"lock-screen previews: {card[:300]}")
    run.shoot("catalog", 1440)
    run.shoot("catalog", 375)

    run.step = "a server key cannot see another app"
    run.go("/dashboard/apps/other")
    run.check("No such app." in run.text(), "another app's overview is not shown")
    run.go("/dashboard/apps/other/users?user_id=ana")
    run.check("No such app." in run.text(), "another app's users are not shown")
    status = driver.execute_script("return fetch('/dashboard/apps/other/catalog').then(r => r.status)")
    run.check(status == 404, f"another app's page answers 404, got {status}")

    run.step = "CSRF: a form without its token is refused"
    run.go("/dashboard/apps/demo/compose")
    status = driver.execute_script("""
        return fetch('/dashboard/apps/demo/compose', {method: 'POST', headers: {'Content-Type': 'application/x-www-form-urlencoded'},
            body: 'type=sync_error&user_ids=ana&action=send'}).then(r => r.status)""")
    run.check(status == 403, f"a POST without the token answers 403, got {status}")
    driver.execute_script("document.querySelector('form.compose input[name=csrf]').remove()")
    driver.find_element(By.ID, "user_ids").send_keys("ana")
    driver.find_element(By.ID, "send").click()
    run.wait_text("Refused")
    run.check("CSRF" in run.text(), "the refusal says why")
    run.check(len(inbox(control)) == 2, f"nothing more was sent ({len(inbox(control))} in the inbox)")

    run.step = "every page fits a 375 px phone"
    for name, path in [("overview", "/dashboard/apps/demo"), ("notifications", "/dashboard/apps/demo/notifications"),
                       ("notification", f"/dashboard/apps/demo/notifications/{deferred}"), ("analytics", "/dashboard/apps/demo/analytics")]:
        run.go(path)
        run.shoot(name, 375)

    run.step = "sign out"
    run.go("/dashboard/apps/demo")
    driver.find_element(By.CSS_SELECTOR, "form.signout button").click()
    run.wait_text("Sign in")
    run.go("/dashboard/apps/demo/users")
    run.check("/dashboard/login" in driver.current_url, "signed out: pages go to the login form")


if __name__ == "__main__":
    main()
