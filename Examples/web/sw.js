// The service worker: shows each message Herald sends, reports it received (confirmed delivery)
// and reports a click as an open, with the ids Herald put in the message's `herald` stamp.

async function settings() {
  const cached = await (await caches.open("herald")).match("herald-settings");
  return cached ? cached.json() : null;
}

// A report to one of the app's routes with the client key and user token the page kept.
async function report(path, body) {
  const s = await settings();
  if (!s || !s.key) return 0;
  const headers = { Authorization: `Bearer ${s.key}`, "Content-Type": "application/json" };
  if (s.token) headers["X-Herald-User-Token"] = s.token;
  const response = await fetch(`${s.herald}/v1/apps/${s.app}${path}`,
    { method: "POST", headers, body: JSON.stringify({ ...body, device_id: s.device }) });
  return response.status;
}

self.addEventListener("install", () => self.skipWaiting());
self.addEventListener("activate", event => event.waitUntil(self.clients.claim()));

self.addEventListener("push", event => {
  let message = {};
  try {
    message = event.data ? event.data.json() : {};
  } catch {
    message = { body: event.data ? event.data.text() : "" };
  }
  event.waitUntil((async () => {
    // `tag` is the collapse identity: a resend replaces the notification instead of adding one.
    await self.registration.showNotification(message.title || "", {
      body: message.body || "", tag: message.tag, image: message.image, data: message,
    });
    if (message.herald) await report("/received", { delivery_id: message.herald.d, displayed: true });
  })());
});

// An open: reported with the action (a button's id, or "default" for the notification itself).
async function opened(notification, action) {
  notification.close();
  const stamp = notification.data && notification.data.herald;
  return stamp ? report("/opened", { delivery_id: stamp.d, action: action || "default" }) : 0;
}

self.addEventListener("notificationclick", event => {
  event.waitUntil((async () => {
    await opened(event.notification, event.action);
    // A web link opens; an app deep link (syncwell://…) opens the page instead.
    const link = event.notification.data && event.notification.data.deep_link;
    const target = link && /^https?:/.test(link) ? link : self.registration.scope;
    const windows = await self.clients.matchAll({ type: "window" });
    const open = windows.find(client => client.url.startsWith(self.registration.scope));
    if (open && target === self.registration.scope) return open.focus();
    return self.clients.openWindow(target);
  })());
});

// The page asks to open a shown notification by its tag (see app.js `openNotification`).
self.addEventListener("message", event => {
  if (!event.data || event.data.type !== "open") return;
  event.waitUntil((async () => {
    const [notification] = await self.registration.getNotifications({ tag: event.data.tag });
    const status = notification ? await opened(notification, "default") : 404;
    event.ports[0].postMessage({ status });
  })());
});
