"""What the live checks (dashboard-browser.py, trace-check.py) share: free loopback ports,
waiting for a process to answer, and a `herald sim` for the demo app's topic."""
import os
import socket
import subprocess
import sys
import time
import urllib.request

# The demo app's APNs settings against a simulator started by `start_sim` (paths relative to
# the work directory, where herald serve runs).
TOPIC = "com.example.demo"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(url, what, process, log, check, context=None):
    """Until `url` answers; exits naming `check` when `process` dies or 30 s pass."""
    for _ in range(300):
        if process.poll() is not None:
            sys.exit(f"{check}: {what} exited ({process.returncode}):\n{open(log).read()[-4000:]}")
        try:
            urllib.request.urlopen(url, timeout=1, context=context)
            return
        except Exception:
            time.sleep(0.1)
    sys.exit(f"{check}: {what} did not come up at {url}")


def start_sim(herald, work, check):
    """`herald sim` in `work` (its TLS files in work/sim): the process, its APNs port and its
    control URL, once it answers."""
    sim_port, control_port = free_port(), free_port()
    log = os.path.join(work, "sim.log")
    sim = subprocess.Popen(
        [herald, "sim", "--port", str(sim_port), "--control-port", str(control_port), "--tls-dir",
         os.path.join(work, "sim"), "--topic", TOPIC],
        cwd=work, stdout=open(log, "w"), stderr=subprocess.STDOUT)
    control = f"http://127.0.0.1:{control_port}"
    wait_for(control + "/inbox", "herald sim", sim, log, check)
    return sim, sim_port, control


def apns_settings(sim_port):
    """The demo app's `apns:` flow mapping against the simulator on `sim_port`."""
    return (f'{{ team_id: DEMOTEAM01, key_id: DEMOKEY001, key_file: "sim/demo-AuthKey.p8", topic: {TOPIC}, '
            f'environment: sandbox, endpoint: "https://127.0.0.1:{sim_port}", ca_file: "sim/sim-ca.pem" }}')
