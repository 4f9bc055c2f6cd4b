#!/usr/bin/env python3
"""OpenTelemetry traces end to end: a live `herald serve` with `telemetry` set exports its spans
over OTLP/HTTP to a receiver in this script, which decodes them with the OpenTelemetry project's
own protobuf definitions (PyPI's opentelemetry-proto). Run by .ci/run through
scripts/trace-check.sh:

    scripts/trace-check.sh [path-to-herald-binary]

What it checks (each failure names the check and prints the spans received):
  1. a send with a sampled `traceparent` header: the simulator's inbox gets the notification,
     and its spans arrive in the caller's trace, linked: the request's server span (a child of
     the caller's span), herald.accept under it, herald.deliver under that, and herald.claim,
     herald.plan, herald.apns and herald.record under herald.deliver; the APNs span says
     delivered and herald.deliver says sent; GET …/notifications/{id} shows the trace id;
  2. a send scheduled eight seconds ahead, with the server restarted before it is due (so it is
     read back from the database, not from the accepting process's memory), joins its
     caller's trace the same way;
  3. a send without `traceparent` starts a trace of its own (sample_ratio 1) with the same
     shape, and its trace id is the one the API shows;
  4. a send whose `traceparent` says "not sampled" leaves no span and no trace id;
  5. the spans of a stopping server are still exported (the server is stopped before the
     spans are read).
"""
import json
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from datetime import datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from live_herald import apns_settings, free_port, start_sim, wait_for
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest, ExportTraceServiceResponse)

SERVER_KEY = "trace-check-server-key-0123456789"
TOKEN = "c0ffee00" + "0123456789abcdef" * 3 + "01234567"
SPANS = []
SPANS_LOCK = threading.Lock()
KINDS = {0: "unspecified", 1: "internal", 2: "server", 3: "client", 4: "producer", 5: "consumer"}


def value(any_value):
    kind = any_value.WhichOneof("value")
    return getattr(any_value, kind) if kind else None


class Receiver(BaseHTTPRequestHandler):
    """An OTLP/HTTP collector that keeps every span it is sent."""

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        if self.path != "/v1/traces" or self.headers.get("Content-Type") != "application/x-protobuf":
            self.send_response(404)
            self.end_headers()
            return
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        spans = []
        for resource in request.resource_spans:
            service = {a.key: value(a.value) for a in resource.resource.attributes}.get("service.name")
            for scope in resource.scope_spans:
                for span in scope.spans:
                    spans.append({
                        "service": service, "name": span.name, "kind": KINDS.get(span.kind, str(span.kind)),
                        "trace_id": span.trace_id.hex(), "span_id": span.span_id.hex(),
                        "parent": span.parent_span_id.hex(), "start": span.start_time_unix_nano,
                        "end": span.end_time_unix_nano, "status": span.status.code,
                        "attributes": {a.key: value(a.value) for a in span.attributes}})
        with SPANS_LOCK:
            SPANS.extend(spans)
        answer = ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args):
        pass


def api(base, method, path, body=None, headers=None):
    request = urllib.request.Request(
        base + path, method=method, data=None if body is None else json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {SERVER_KEY}", "Content-Type": "application/json", **(headers or {})})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read() or b"{}")


def check(condition, message, spans=None):
    if not condition:
        shown = json.dumps(spans if spans is not None else SPANS, indent=1)[:6000]
        sys.exit(f"trace-check: FAILED: {message}\nspans received:\n{shown}")


def send(base, headers=None, **extra):
    body = {"to": {"user_ids": ["ana"]}, "type": "PN-02", "data": {"Source": "Garmin", "source_id": "garmin"}, **extra}
    return api(base, "POST", "/v1/apps/demo/notifications", body, headers)["id"]


def inbox_count(control):
    return len(json.loads(urllib.request.urlopen(f"{control}/inbox/{TOKEN}", timeout=10).read())["notifications"])


def one(spans, name, parent):
    found = [s for s in spans if s["name"] == name]
    check(len(found) == 1, f"{len(found)} spans named {name} in the trace, not 1", spans)
    check(found[0]["parent"] == parent["span_id"],
          f"{name}'s parent is {found[0]['parent']}, not {parent['name']} ({parent['span_id']})", spans)
    return found[0]


def delivery_shape(spans, accept):
    """herald.deliver under accept, and the four steps under it; returns herald.deliver."""
    deliver = one(spans, "herald.deliver", accept)
    check(deliver["kind"] == "consumer", f"herald.deliver is {deliver['kind']}, not consumer", spans)
    check(deliver["attributes"].get("herald.status") == "sent", "herald.deliver does not say sent", spans)
    check(deliver["attributes"].get("herald.device_id") == "ana-iphone", "herald.deliver names no device", spans)
    steps = {name: one(spans, name, deliver) for name in ("herald.claim", "herald.plan", "herald.apns", "herald.record")}
    check(steps["herald.apns"]["kind"] == "client", "herald.apns is not a client span", spans)
    check(steps["herald.apns"]["attributes"].get("herald.disposition") == "delivered",
          "herald.apns does not say delivered", spans)
    order = [steps[n] for n in ("herald.claim", "herald.plan", "herald.apns", "herald.record")]
    for earlier, later in zip(order, order[1:]):
        check(earlier["start"] <= later["start"], f"{later['name']} starts before {earlier['name']}", spans)
    for step in order:
        check(deliver["start"] <= step["start"] and step["end"] <= deliver["end"],
              f"{step['name']} is outside herald.deliver's time", spans)
    check(accept["end"] <= deliver["start"] or accept["start"] <= deliver["start"],
          "herald.deliver starts before herald.accept", spans)
    return deliver


def main():
    herald = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else ".build/debug/herald")
    checkout = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    work = tempfile.mkdtemp(prefix="herald-traces-")
    receiver = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=receiver.serve_forever, daemon=True).start()
    collector = f"http://127.0.0.1:{receiver.server_address[1]}"
    processes = []
    try:
        port = free_port()
        sim, sim_port, control = start_sim(herald, work, "trace-check")
        processes.append(sim)
        with open(os.path.join(work, "herald.yaml"), "w") as f:
            f.write(f"""server: {{ host: 127.0.0.1, port: {port} }}
database: {{ url: "sqlite://{work}/herald.sqlite" }}
telemetry: {{ otlp_endpoint: "{collector}", sample_ratio: 1 }}
apps:
  - id: demo
    keys: {{ server: "{SERVER_KEY}" }}
    catalog: "{checkout}/Examples/syncwell.yaml"
    apns: {apns_settings(sim_port)}
""")
        serve_log = os.path.join(work, "serve.log")
        base = f"http://127.0.0.1:{port}"

        def start():
            process = subprocess.Popen([herald, "serve", "--config", "herald.yaml"], cwd=work,
                                       stdout=open(serve_log, "a"), stderr=subprocess.STDOUT,
                                       env={**os.environ, "HERALD_LOG_LEVEL": "info"})
            processes.append(process)
            wait_for(base + "/healthz", "herald serve", process, serve_log, "trace-check")
            return process

        def stop(process):
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=30)
            check(process.returncode == 0,
                  f"herald serve exited with {process.returncode}:\n{open(serve_log).read()[-3000:]}")

        serve = start()

        api(base, "POST", "/v1/apps/demo/devices",
            {"device_id": "ana-iphone", "user_id": "ana", "token": TOKEN, "environment": "sandbox",
             "locale": "en-GB", "authorization_status": "authorized"})
        caller_trace, caller_span = secrets.token_hex(16), secrets.token_hex(8)
        traced = send(base, {"traceparent": f"00-{caller_trace}-{caller_span}-01"})
        scheduled_trace, scheduled_span = secrets.token_hex(16), secrets.token_hex(8)
        due = (datetime.now(timezone.utc) + timedelta(seconds=8)).strftime("%Y-%m-%dT%H:%M:%SZ")
        scheduled = send(base, {"traceparent": f"00-{scheduled_trace}-{scheduled_span}-01"}, deliver_at=due)
        rooted = send(base)
        unsampled_trace = secrets.token_hex(16)
        unsampled = send(base, {"traceparent": f"00-{unsampled_trace}-{secrets.token_hex(8)}-00"})
        deadline = time.time() + 30

        def recorded(notifications, count):
            while inbox_count(control) < count:
                check(time.time() < deadline, f"the simulator's inbox did not get {count} notifications in 30 s")
                time.sleep(0.1)
            # Recorded before the stop (the API says sent), so the stop exports every span.
            for notification in notifications:
                while api(base, "GET", f"/v1/apps/demo/notifications/{notification}")["counts"]["sent"] != 1:
                    check(time.time() < deadline, f"notification {notification} was not recorded sent in 30 s")
                    time.sleep(0.1)

        recorded((traced, rooted, unsampled), 3)
        views = {n: api(base, "GET", f"/v1/apps/demo/notifications/{n}") for n in (traced, rooted, unsampled)}
        check(api(base, "GET", f"/v1/apps/demo/notifications/{scheduled}")["counts"]["queued"] == 1,
              "the scheduled send went before the restart (the machine took over 8 s for three sends)")
        # 5: stopped before anything is read: what the batch processor still held goes out now.
        stop(serve)
        serve = start()
        recorded((scheduled,), 4)
        views[scheduled] = api(base, "GET", f"/v1/apps/demo/notifications/{scheduled}")
        stop(serve)
        with SPANS_LOCK:
            spans = list(SPANS)
        check(all(s["service"] == "herald" for s in spans), "a span's resource is not service.name=herald", spans)

        # 1: the caller's trace.
        trace = [s for s in spans if s["trace_id"] == caller_trace]
        servers = [s for s in trace if s["kind"] == "server"]
        check(len(servers) == 1, f"{len(servers)} server spans in the caller's trace, not 1", trace)
        request = servers[0]
        check(request["parent"] == caller_span, "the request's span is not a child of the caller's span", trace)
        check(request["attributes"].get("http.response.status_code") == 202, "the request span has no 202", trace)
        accept = one(trace, "herald.accept", request)
        check(accept["attributes"].get("herald.notification_id") == traced, "herald.accept names another send", trace)
        delivery_shape(trace, accept)
        check(views[traced].get("trace_id") == caller_trace,
              f"GET …/notifications/{traced} shows trace_id {views[traced].get('trace_id')}, not {caller_trace}")

        # 2: scheduled, claimed from the database by the restarted server when due.
        trace = [s for s in spans if s["trace_id"] == scheduled_trace]
        servers = [s for s in trace if s["kind"] == "server"]
        check(len(servers) == 1 and servers[0]["parent"] == scheduled_span, "the scheduled send's request span", trace)
        accept = one(trace, "herald.accept", servers[0])
        deliver = delivery_shape(trace, accept)
        check(deliver["start"] - accept["end"] >= 5_000_000_000, "the scheduled delivery started before it was due", trace)
        check(views[scheduled].get("trace_id") == scheduled_trace, "the scheduled send shows another trace_id")

        # 3: a trace of its own.
        root_trace = views[rooted].get("trace_id")
        check(root_trace is not None and len(root_trace) == 32, "a send without traceparent shows no trace_id")
        trace = [s for s in spans if s["trace_id"] == root_trace]
        servers = [s for s in trace if s["kind"] == "server"]
        check(len(servers) == 1 and servers[0]["parent"] == "", "the send's own trace does not start at its request",
              trace)
        delivery_shape(trace, one(trace, "herald.accept", servers[0]))

        # 4: not sampled.
        check(not [s for s in spans if s["trace_id"] == unsampled_trace], "an unsampled send was traced")
        check("trace_id" not in views[unsampled], "an unsampled send shows a trace_id")
        print(f"trace-check: {len(spans)} spans received; a send's and a scheduled send's spans "
              f"linked in their callers' traces; a root trace; nothing for an unsampled send")
    finally:
        for process in reversed(processes):
            if process.poll() is None:
                process.terminate()
                try:
                    process.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    process.kill()
        receiver.shutdown()


if __name__ == "__main__":
    main()
