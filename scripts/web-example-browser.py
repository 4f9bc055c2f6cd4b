#!/usr/bin/env python3
"""The Web Push example (Examples/web) in a real browser: headless Chromium from Debian, driven by
Selenium and the Chrome DevTools Protocol, against a live `herald serve` and `herald sim`. Run by
.ci/run through scripts/web-example-browser.sh:

    scripts/web-example-browser.sh [path-to-herald-binary]

A browser's own push service cannot be reached here, so the simulator plays it:
  1. the page (served from another origin than Herald's: CORS) registers its service worker and
     fetches the app's VAPID key from Herald (GET /webpush/key);
  2. the page's code registers a subscription the simulator made (as a push service would make
     one for pushManager.subscribe) as a `webpush` device;
  3. a typed SyncWell notification (PN-02) is sent to the user; Herald encrypts and signs it, the
     simulator checks VAPID and decrypts it;
  4. the decrypted message is handed to the service worker (CDP ServiceWorker.deliverPushMessage),
     which shows it (registration.getNotifications(): title, body and tag as Herald rendered
     them) and reports it received (the delivery's received_at);
  5. the page opens the notification through the service worker, which reports the open (the
     notification's opened count).
Each failure names the step.
"""
import functools
import http.server
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request

import live_herald
import websocket
from selenium import webdriver
from selenium.webdriver.chrome.service import Service

SERVER_KEY = "web-demo-server-key-0123456789abcdef"
CLIENT_KEY = "web-demo-client-key-0123456789abcdef"
CHECK = "web-example-browser"


def fail(message):
    sys.exit(f"{CHECK}: FAILED: {message}")


def api(base, method, path, body=None, key=SERVER_KEY):
    request = urllib.request.Request(
        base + path, method=method, data=None if body is None else json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read() or b"{}")


def until(what, probe, seconds=15, final=True):
    """`probe()` until it returns something truthy; after `seconds`, fails naming `what` (or,
    when not `final`, returns None)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = probe()
        if value:
            return value
        time.sleep(0.1)
    if final:
        fail(f"{what} (waited {seconds} s)")
    return None


def page_call(driver, script, *arguments):
    """Runs `script` (an expression giving a promise) in the page; its value, or a failure."""
    answer = driver.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        f"Promise.resolve().then(() => {script}).then(value => done({{value}}), error => done({{error: String(error)}}));",
        *arguments)
    if "error" in answer:
        fail(f"{script}: {answer['error']}")
    return answer.get("value")


class QuietFiles(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


class DevTools:
    """A Chrome DevTools Protocol session of its own to the page's target (Selenium's
    execute_cdp_cmd cannot wait for events, and ServiceWorker's registration ids come as one)."""

    def __init__(self, driver, page_url):
        address = driver.capabilities["goog:chromeOptions"]["debuggerAddress"]
        targets = json.loads(urllib.request.urlopen(f"http://{address}/json", timeout=5).read())
        target = next((t for t in targets if t.get("type") == "page" and t.get("url", "").startswith(page_url)), None)
        if target is None:
            fail(f"no DevTools target for {page_url}: {[t.get('url') for t in targets]}")
        self.socket = websocket.create_connection(target["webSocketDebuggerUrl"], timeout=10, suppress_origin=True)
        self.next_id = 0
        self.events = []

    def call(self, method, params=None):
        self.next_id += 1
        self.socket.send(json.dumps({"id": self.next_id, "method": method, "params": params or {}}))
        while True:
            message = json.loads(self.socket.recv())
            if message.get("id") == self.next_id:
                if "error" in message:
                    fail(f"DevTools {method}: {message['error']}")
                return message.get("result", {})
            self.events.append(message)

    def event(self, method, matches, seconds=10):
        """The first event `method` whose params satisfy `matches` (read until `seconds` pass)."""
        deadline = time.monotonic() + seconds
        while True:
            for message in self.events:
                if message.get("method") == method and matches(message.get("params", {})):
                    return message["params"]
            self.events.clear()
            if time.monotonic() > deadline:
                fail(f"no DevTools event {method} within {seconds} s")
            self.socket.settimeout(max(0.1, deadline - time.monotonic()))
            try:
                self.events.append(json.loads(self.socket.recv()))
            except websocket.WebSocketTimeoutException:
                pass


def main():
    herald = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else ".build/debug/herald")
    checkout = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    work = tempfile.mkdtemp(prefix="herald-web-")
    processes = []
    page_server = None
    checks = 0
    try:
        sim, sim_port, control = live_herald.start_sim(herald, work, CHECK)
        processes.append(sim)
        subprocess.run([herald, "webpush", "keygen", "--out", os.path.join(work, "vapid.pem")], capture_output=True,
                       check=True)
        vapid = subprocess.run([herald, "webpush", "key", "--key-file", os.path.join(work, "vapid.pem")],
                               capture_output=True, text=True, check=True).stdout.strip()

        # The example page on an origin of its own, bound to port 0 here (no race for the port).
        page_server = http.server.ThreadingHTTPServer(
            ("127.0.0.1", 0), functools.partial(QuietFiles, directory=os.path.join(checkout, "Examples/web")))
        threading.Thread(target=page_server.serve_forever, daemon=True).start()
        page = f"http://127.0.0.1:{page_server.server_address[1]}"

        for attempt in range(3):
            port = live_herald.free_port()
            with open(os.path.join(work, "herald.yaml"), "w") as f:
                f.write(f"""server: {{ host: 127.0.0.1, port: {port} }}
database: {{ url: "sqlite://{work}/herald.sqlite" }}
apps:
  - id: demo
    keys: {{ server: "{SERVER_KEY}", client: "{CLIENT_KEY}" }}
    user_token_secret: "web-user-token-secret-0123456789abcdef"
    catalog: "{checkout}/Examples/syncwell.yaml"
    apns: {live_herald.apns_settings(sim_port)}
    webpush: {{ vapid_key_file: vapid.pem, subject: "mailto:ops@example.com", allowed_hosts: ["127.0.0.1"],
               ca_file: sim/sim-ca.pem }}
    cors_origins: ["{page}"]
""")
            log = os.path.join(work, f"serve-{attempt}.log")
            serve = subprocess.Popen([herald, "serve", "--config", "herald.yaml"], cwd=work, stdout=open(log, "w"),
                                     stderr=subprocess.STDOUT, env={**os.environ, "HERALD_LOG_LEVEL": "notice"})
            processes.append(serve)
            base = f"http://127.0.0.1:{port}"
            if live_herald.wait_for(base + "/healthz", "herald serve", serve, log, CHECK, None, attempt < 2):
                break
        token = subprocess.run([herald, "token", "--app", "demo", "--user", "ana", "--config", "herald.yaml"], cwd=work,
                               capture_output=True, text=True, check=True).stdout.strip()
        api(base, "PUT", "/v1/apps/demo/users/ana", {"time_zone": live_herald.zone_at(12)})

        options = webdriver.ChromeOptions()
        options.binary_location = shutil.which("chromium") or "/usr/bin/chromium"
        for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", "--window-size=1000,800"):
            options.add_argument(flag)
        # Notifications allowed in the profile itself (a grant over CDP alone left some
        # shown notifications out of getNotifications()).
        options.add_experimental_option("prefs", {"profile.default_content_setting_values.notifications": 1})
        driver = webdriver.Chrome(service=Service(shutil.which("chromedriver") or "/usr/bin/chromedriver"), options=options)
        try:
            driver.set_script_timeout(20)
            driver.execute_cdp_cmd("Browser.grantPermissions", {"origin": page, "permissions": ["notifications"]})
            query = urllib.parse.urlencode({"herald": base, "app": "demo", "key": CLIENT_KEY, "user": "ana", "token": token})
            driver.get(f"{page}/?{query}")

            # 1. The service worker, and the app's VAPID key read from Herald across origins.
            page_call(driver, "herald.ready()")
            key = page_call(driver, "fetch(herald.settings.herald + '/v1/apps/demo/webpush/key',"
                                    " {headers: {Authorization: 'Bearer ' + herald.settings.key}}).then(r => r.json())")
            if key.get("public_key") != vapid:
                fail(f"the page read VAPID key {key} from Herald, not {vapid}")
            checks += 1

            # 2. A subscription the simulator made, registered by the page's code.
            request = urllib.request.Request(control + "/webpush/subscriptions", method="POST",
                                             data=json.dumps({"application_server_key": vapid}).encode(),
                                             headers={"Content-Type": "application/json"})
            subscription = json.loads(urllib.request.urlopen(request, timeout=10).read())
            device = page_call(driver, "herald.registerSubscription(arguments[0], arguments[1])",
                               {"endpoint": subscription["endpoint"], "keys": subscription["keys"]}, vapid)
            if device.get("platform") != "webpush" or device.get("user_id") != "ana":
                fail(f"the registration answered {device}")
            device_id = device["device_id"]
            checks += 1

            # 3. A typed notification; the simulator decrypts what Herald encrypted.
            sent = api(base, "POST", "/v1/apps/demo/notifications",
                       {"to": {"user_ids": ["ana"]}, "type": "PN-02", "data": {"Source": "Strava", "source_id": "strava"}})
            inbox = until("the simulator's inbox for the browser's subscription", lambda: json.loads(
                urllib.request.urlopen(f"{control}/inbox/{subscription['id']}", timeout=5).read())["notifications"])
            message = inbox[0]["payload"]
            if message.get("herald", {}).get("n") != sent["id"] or "Strava" not in (message.get("title", "") + message.get("body", "")):
                fail(f"the simulator decrypted {message} for notification {sent['id']}")
            checks += 1

            # 4. The message handed to the service worker: shown, and reported received.
            devtools = DevTools(driver, page)
            devtools.call("ServiceWorker.enable")
            registration = devtools.event(
                "ServiceWorker.workerRegistrationUpdated",
                lambda params: any(r["scopeURL"] == page + "/" and not r["isDeleted"] for r in params["registrations"]))
            registration_id = next(r["registrationId"] for r in registration["registrations"] if r["scopeURL"] == page + "/")
            # `navigator.serviceWorker.ready` resolves while the worker may still be activating; a
            # push handed over before it is activated and running can be lost.
            devtools.event(
                "ServiceWorker.workerVersionUpdated",
                lambda params: any(v["registrationId"] == registration_id and v["status"] == "activated"
                                   and v["runningStatus"] == "running" for v in params["versions"]))
            def delivery():
                deliveries = api(base, "GET", f"/v1/apps/demo/notifications/{sent['id']}").get("deliveries", [])
                return next((d for d in deliveries if d.get("device_id") == device_id), None)

            # Headless Chromium sometimes loses a push handed over by DevTools (the worker's
            # showNotification resolves and getNotifications() stays empty, or its receipt call
            # never reaches Herald): the same message is handed over again, as a push service
            # redelivers; a repeated receipt is not counted twice.
            for attempt in range(1, 5):
                devtools.call("ServiceWorker.deliverPushMessage",
                              {"origin": page, "registrationId": registration_id, "data": json.dumps(message)})
                shown = until("the service worker showing the notification",
                              lambda: page_call(driver, "herald.shownNotifications()"), seconds=5, final=attempt == 4)
                received = shown and until("the delivery's receipt (received_at)",
                                           lambda: (delivery() or {}).get("received_at"), seconds=5, final=attempt == 4)
                if received:
                    break
            if (len(shown) != 1 or shown[0]["title"] != message.get("title", "") or shown[0]["body"] != message.get("body", "")
                    or shown[0]["tag"] != message["tag"]):
                fail(f"the service worker shows {shown}, Herald sent {message}")
            checks += 2
            if attempt > 1:
                print(f"{CHECK}: the push was handed to the service worker {attempt} times")

            # 5. An open through the service worker, counted by Herald.
            answer = page_call(driver, "herald.openNotification(arguments[0])", message["tag"])
            if answer.get("status") != 200:
                fail(f"the service worker's open report answered {answer}")
            until("the delivery's open (opened_at)", lambda: (delivery() or {}).get("opened_at"))
            # The analytics count the browser's receipt and open under PN-02 and the webpush platform.
            analytics = api(base, "GET", "/v1/apps/demo/analytics?by=platform")
            pn02 = next((t for t in analytics.get("types", []) if t.get("id") == "PN-02"), {})
            web = next((p for p in pn02.get("platforms", []) if p.get("platform") == "webpush"), {})
            if (web.get("opened"), web.get("received"), web.get("accepted"), pn02.get("ctr")) != (1, 1, 1, 1):
                fail(f"the analytics count for PN-02 on webpush {web}, not one receipt and one open: {analytics}")
            if page_call(driver, "herald.shownNotifications()"):
                fail("the opened notification is still shown")
            checks += 1
            print(f"{CHECK}: {checks} checks passed (Chromium {driver.capabilities.get('browserVersion', '?')})")
        finally:
            driver.quit()
    finally:
        if page_server:
            page_server.shutdown()
        live_herald.stop(processes)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
