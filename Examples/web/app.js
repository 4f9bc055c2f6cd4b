// The page's side of Herald Web Push: read the settings, register the service worker, subscribe
// with the app's VAPID key (from Herald), and register the subscription as a `webpush` device.
//
// Settings come from the page's query string, falling back to `herald serve --dev`'s defaults:
//   herald  Herald's base URL           (http://127.0.0.1:8080)
//   app     the app id                   (demo)
//   key     the app's client key         (required)
//   user    the user id to register for  (web-user)
//   token   an X-Herald-User-Token your backend signed for that user (needed unless the app's
//           client_registration is unverified, as under --dev)
// Herald must list this page's origin in apps[].cors_origins.

const params = new URLSearchParams(location.search);
const settings = {
  herald: (params.get("herald") || "http://127.0.0.1:8080").replace(/\/$/, ""),
  app: params.get("app") || "demo",
  key: params.get("key") || "",
  user: params.get("user") || "web-user",
  token: params.get("token") || "",
  // One id per browser profile, kept across visits.
  device: localStorage.getItem("herald-device") || `web-${crypto.randomUUID()}`,
};
localStorage.setItem("herald-device", settings.device);

function show(text) {
  document.getElementById("status").textContent = text;
}

// A call to one of the app's routes with the client key (and the user token when there is one).
async function call(method, path, body) {
  const headers = { Authorization: `Bearer ${settings.key}` };
  if (settings.token) headers["X-Herald-User-Token"] = settings.token;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const response = await fetch(`${settings.herald}/v1/apps/${settings.app}${path}`,
    { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  const answer = await response.json().catch(() => ({}));
  if (!response.ok) throw new Error(`${method} ${path}: ${response.status} ${answer.error?.message || ""}`);
  return answer;
}

// The service worker, with the settings it needs to report receipts and opens kept where it can
// read them (the Cache API: a service worker has no localStorage).
async function ready() {
  const cache = await caches.open("herald");
  await cache.put("herald-settings", new Response(JSON.stringify(settings)));
  await navigator.serviceWorker.register("sw.js");
  return navigator.serviceWorker.ready;
}

// Registers a subscription (`PushSubscription.toJSON()`: `endpoint` and `keys`) as this
// browser's device, with the VAPID key it was made with so a later key rotation keeps it working.
async function registerSubscription(subscription, applicationServerKey) {
  const device = await call("POST", "/devices", {
    device_id: settings.device, user_id: settings.user, platform: "webpush",
    locale: navigator.language, name: navigator.userAgent.slice(0, 60),
    endpoint: subscription.endpoint, keys: subscription.keys,
    ...(applicationServerKey ? { application_server_key: applicationServerKey } : {}),
  });
  show(`Registered as device ${device.device_id} for user ${settings.user}.`);
  return device;
}

// What the button does: permission, the app's VAPID key, a subscription, the registration.
async function subscribe() {
  const registration = await ready();
  if (await Notification.requestPermission() !== "granted") {
    show("Notifications are blocked for this site.");
    return null;
  }
  const { public_key: key } = await call("GET", "/webpush/key");
  const subscription = await registration.pushManager.subscribe({ userVisibleOnly: true, applicationServerKey: key });
  return registerSubscription(subscription.toJSON(), key);
}

// The notifications the service worker shows now (title, body, tag and Herald's message).
async function shownNotifications() {
  const registration = await navigator.serviceWorker.ready;
  return (await registration.getNotifications()).map(n => ({ title: n.title, body: n.body, tag: n.tag, data: n.data }));
}

// Opens a shown notification as a click would (the service worker reports the open), for a
// page that lists notifications itself — and for tests, which cannot click the system's.
async function openNotification(tag) {
  const registration = await navigator.serviceWorker.ready;
  return new Promise(resolve => {
    const channel = new MessageChannel();
    channel.port1.onmessage = event => resolve(event.data);
    registration.active.postMessage({ type: "open", tag }, [channel.port2]);
  });
}

document.getElementById("enable").addEventListener("click", () =>
  subscribe().catch(error => show(`Could not subscribe: ${error.message}`)));
if (!settings.key) show("Give this page ?key=<the app's client key> (and herald=, app=, user=, token= as needed).");
window.herald = { settings, ready, subscribe, registerSubscription, shownNotifications, openNotification };
