"""What the live checks (dashboard-browser.py, trace-check.py) share: free loopback ports,
waiting for a process to answer, and a `herald sim` for the demo app's topic."""
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from datetime import datetime, timezone

# The demo app's APNs settings against a simulator started by `start_sim` (paths relative to
# the work directory, where herald serve runs).
TOPIC = "com.example.demo"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(url, what, process, log, check, context=None, clash_is_retryable=False):
    """Until `url` answers; exits naming `check` when `process` dies or 30 s pass. With
    `clash_is_retryable`, a process that died because its port was taken meanwhile (between
    `free_port` and its bind) returns False instead, for the caller to try other ports."""
    for _ in range(300):
        if process.poll() is not None:
            text = open(log).read()
            if clash_is_retryable and "Address already in use" in text:
                return False
            sys.exit(f"{check}: {what} exited ({process.returncode}):\n{text[-4000:]}")
        try:
            urllib.request.urlopen(url, timeout=1, context=context)
            return True
        except Exception:
            time.sleep(0.1)
    sys.exit(f"{check}: {what} did not come up at {url}")


def start_sim(herald, work, check):
    """`herald sim` in `work` (its TLS files in work/sim): the process, its APNs port and its
    control URL, once it answers. The simulator binds port 0 for both and prints what it got,
    so no other process can take a port between choosing it and listening on it."""
    log = os.path.join(work, "sim.log")
    sim = subprocess.Popen(
        [herald, "sim", "--port", "0", "--control-port", "0", "--tls-dir", os.path.join(work, "sim"), "--topic", TOPIC],
        cwd=work, stdout=open(log, "w"), stderr=subprocess.STDOUT)
    for _ in range(300):
        if sim.poll() is not None:
            sys.exit(f"{check}: herald sim exited ({sim.returncode}):\n{open(log).read()[-4000:]}")
        text = open(log).read()
        endpoint = re.search(r"simulator ready on https://[^:\s]+:(\d+)", text)
        control = re.search(r"Control API: (http://\S+:\d+)", text)
        if endpoint and control:
            wait_for(control.group(1) + "/inbox", "herald sim", sim, log, check)
            return sim, int(endpoint.group(1)), control.group(1)
        time.sleep(0.1)
    sys.exit(f"{check}: herald sim printed no ports within 30 s:\n{open(log).read()[-4000:]}")


def apns_settings(sim_port):
    """The demo app's `apns:` flow mapping against the simulator on `sim_port`."""
    return (f'{{ team_id: DEMOTEAM01, key_id: DEMOKEY001, key_file: "sim/demo-AuthKey.p8", topic: {TOPIC}, '
            f'environment: sandbox, endpoint: "https://127.0.0.1:{sim_port}", ca_file: "sim/sim-ca.pem" }}')


def stop(processes):
    """Terminates `processes`, last started first; kills what has not exited 10 s later."""
    for process in reversed(processes):
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()


def zone_at(hour):
    """An IANA zone where it is `hour`:00 to `hour`:59 now (Etc/GMT-N is UTC+N: POSIX signs)."""
    offset = (hour - datetime.now(timezone.utc).hour) % 24
    if offset > 14:
        offset -= 24
    return "Etc/GMT" if offset == 0 else f"Etc/GMT{'-' if offset > 0 else '+'}{abs(offset)}"
