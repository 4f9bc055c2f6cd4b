(function () {
  var live = document.getElementById("live");
  if (!live) return;
  var url = live.getAttribute("data-live");
  function pending(counts) { return (counts.queued || 0) + (counts.sending || 0) + (counts.deferred || 0) > 0; }
  function tick() {
    fetch(url, { credentials: "same-origin", headers: { "Accept": "application/json" } })
      .then(function (r) { return r.ok ? r.json() : null; })
      .then(function (data) {
        if (!data) return;
        Object.keys(data.counts).forEach(function (status) {
          var node = live.querySelector('[data-count="' + status + '"]');
          if (node) node.textContent = data.counts[status];
          var pill = live.querySelector('[data-pill="' + status + '"]');
          if (pill) pill.classList.toggle("zero", data.counts[status] === 0);
        });
        data.deliveries.forEach(function (d) {
          var node = document.querySelector('[data-delivery-status="' + d.id + '"]');
          if (node && node.textContent !== d.status) { node.textContent = d.status; node.className = "pill " + d.status; }
        });
        if (pending(data.counts)) setTimeout(tick, 2000);
      });
  }
  setTimeout(tick, 2000);
})();
