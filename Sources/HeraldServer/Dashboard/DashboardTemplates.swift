// The dashboard's templates and assets, compiled into the binary: nothing is read
// from disk or a CDN, so the dashboard works offline. Mustache escapes every {{value}}; the
// only unescaped one, {{{content}}}, is a page this code rendered.

enum DashboardTemplates {
    // Rows link with the page's `app`: a name a row lacks is looked up in the enclosing sections.
    static let all: [String: String] = [
        "layout": layout, "login": login, "overview": overview, "users": users, "notifications": notifications,
        "notification": notification, "message": message, "compose": compose, "analytics": analytics,
        "catalog": catalog,
    ]

    static let layout = #"""
        <!doctype html>
        <html lang="en">
        <head>
        <meta charset="utf-8">
        <meta name="viewport" content="width=device-width, initial-scale=1">
        <title>{{title}} · Herald</title>
        <link rel="stylesheet" href="/dashboard/assets/herald.css">
        <script src="/dashboard/assets/herald.js" defer></script>
        </head>
        <body>
        <header class="top">
          <a class="brand" href="/dashboard">Herald</a>
          {{#signedIn}}
          <nav>
            {{#tabs}}<a href="{{href}}" {{#current}}aria-current="page"{{/current}}>{{label}}</a>{{/tabs}}
          </nav>
          <form class="signout" method="post" action="/dashboard/logout">
            <input type="hidden" name="csrf" value="{{csrf}}">
            <span class="who">{{who}}</span> <button type="submit">Sign out</button>
          </form>
          {{/signedIn}}
        </header>
        <main>
        {{{content}}}
        </main>
        </body>
        </html>
        """#

    static let login = #"""
        <section class="card narrow">
          <h1>Sign in</h1>
          <p class="muted">With the admin key (every app) or an app's server key (that app).</p>
          {{#error}}<p class="error" role="alert">{{error}}</p>{{/error}}
          <form method="post" action="/dashboard/login">
            <input type="hidden" name="csrf" value="{{csrf}}">
            <label for="key">Key</label>
            <input id="key" name="key" type="password" autocomplete="current-password" required autofocus>
            <button type="submit">Sign in</button>
          </form>
        </section>
        """#

    static let overview = #"""
        <h1>Overview</h1>
        <p class="muted">Queue: <strong id="queue-depth">{{queueDepth}}</strong> due now, {{deferred}} deferred{{#oldest}}, oldest waiting {{oldest}}{{/oldest}} ({{scope}}). Sends and failures: this node, since it started.</p>
        {{#apps}}
        <section class="card">
          <h2><a href="/dashboard/apps/{{id}}">{{id}}</a></h2>
          <div class="providers">
            {{#providers}}<span class="pill {{state}}" title="{{detail}}">{{name}}: {{label}}</span>{{/providers}}
          </div>
          <div class="stats">
            <div><span class="big">{{sentLastMinute}}</span><span class="muted">sent, last minute</span></div>
            <div><span class="big">{{sentLastHour}}</span><span class="muted">sent, last 30 min</span></div>
            <div><span class="big">{{failedLastHour}}</span><span class="muted">failed, last 30 min</span></div>
          </div>
          {{{chart}}}
          {{^empty(failures)}}
          <table><caption>Failures by reason</caption><thead><tr><th>Reason</th><th class="num">Deliveries</th></tr></thead><tbody>
          {{#failures}}<tr><td>{{reason}}</td><td class="num">{{count}}</td></tr>{{/failures}}
          </tbody></table>
          {{/empty(failures)}}
        </section>
        {{/apps}}
        """#

    static let users = #"""
        <h1>Users</h1>
        <form class="search" method="get" action="/dashboard/apps/{{app}}/users">
          <label for="user_id">User id</label>
          <input id="user_id" name="user_id" value="{{query}}" required>
          <button type="submit">Find</button>
        </form>
        {{#notFound}}<p class="muted">No user or device "{{query}}" in {{app}}.</p>{{/notFound}}
        {{#user}}
        <section class="card">
          <h2>{{id}}</h2>
          <p class="muted">Time zone {{zone}} · locale {{locale}}{{#badge}} · badge {{badge}}{{/badge}}</p>
          <h3>Devices</h3>
          <table class="devices stack"><thead><tr><th>Device</th><th>Platform</th><th>Environment</th><th>Token</th><th>Permission</th><th>State</th></tr></thead><tbody>
          {{#devices}}<tr><td>{{id}}{{#name}}<br><span class="muted">{{name}}</span>{{/name}}</td><td data-label="Platform">{{platform}}</td><td data-label="Environment">{{environment}}</td><td data-label="Token"><code>{{token}}</code></td><td data-label="Permission">{{permission}}</td><td data-label="State">{{#active}}<span class="pill ok">active</span>{{/active}}{{^active}}<span class="pill bad">inactive</span> {{reason}}{{/active}}</td></tr>{{/devices}}
          </tbody></table>
          <h3>Preferences</h3>
          {{#preferences}}<pre>{{preferences}}</pre>{{/preferences}}{{^preferences}}<p class="muted">Defaults.</p>{{/preferences}}
          {{^empty(badges)}}<h3>Badges</h3><ul>{{#badges}}<li>{{name}}: {{value}}</li>{{/badges}}</ul>{{/empty(badges)}}
          <h3>Pending track steps</h3>
          {{^empty(steps)}}<table><thead><tr><th>Track</th><th>Step</th><th>Due ({{zone}})</th></tr></thead><tbody>
          {{#steps}}<tr><td>{{track}}</td><td>{{step}}</td><td>{{due}}</td></tr>{{/steps}}</tbody></table>{{/empty(steps)}}
          {{#empty(steps)}}<p class="muted">None.</p>{{/empty(steps)}}
          <h3>Waiting deliveries</h3>
          {{^empty(waiting)}}<table class="stack"><thead><tr><th>Notification</th><th>Device</th><th>Status</th><th>Due ({{zone}})</th><th>Why</th></tr></thead><tbody>
          {{#waiting}}<tr><td><a href="/dashboard/apps/{{app}}/notifications/{{notification}}">{{type}}</a></td><td data-label="Device">{{device}}</td><td data-label="Status"><span class="pill {{status}}">{{status}}</span></td><td data-label="Due ({{zone}})">{{due}}</td><td class="why" data-label="Why">{{why}}</td></tr>{{/waiting}}
          </tbody></table>{{/empty(waiting)}}
          {{#empty(waiting)}}<p class="muted">None.</p>{{/empty(waiting)}}
        </section>
        {{/user}}
        """#

    static let notifications = #"""
        <h1>Notifications</h1>
        <form class="search" method="get" action="/dashboard/apps/{{app}}/notifications">
          <label for="type">Type</label>
          <select id="type" name="type"><option value="">any</option>{{#types}}<option value="{{name}}" {{#selected}}selected{{/selected}}>{{name}}</option>{{/types}}</select>
          <label for="status">With a delivery</label>
          <select id="status" name="status"><option value="">any</option>{{#statuses}}<option value="{{name}}" {{#selected}}selected{{/selected}}>{{name}}</option>{{/statuses}}</select>
          <button type="submit">Filter</button>
        </form>
        <div class="scroll"><table class="list"><thead><tr><th>Created (UTC)</th><th>Type</th><th class="num">Devices</th><th class="num">Sent</th><th class="num">Failed</th><th class="num">Deferred</th><th class="num">Suppressed</th><th class="num">Opened</th></tr></thead><tbody>
        {{#rows}}<tr><td><a href="/dashboard/apps/{{app}}/notifications/{{id}}">{{created}}</a></td><td>{{type}}</td><td class="num">{{recipients}}</td><td class="num">{{sent}}</td><td class="num">{{failed}}</td><td class="num">{{deferred}}</td><td class="num">{{suppressed}}</td><td class="num">{{opened}}</td></tr>{{/rows}}
        </tbody></table></div>
        {{^rows}}<p class="muted">No notifications{{#filtered}} match{{/filtered}}.</p>{{/rows}}
        {{#next}}<p><a href="{{next}}">Older</a></p>{{/next}}
        """#

    static let notification = #"""
        <h1>{{type}} <span class="muted small">{{id}}</span></h1>
        <p class="muted">Created {{created}} UTC · {{recipients}} device(s){{#cancelKey}} · cancel key <code>{{cancelKey}}</code>{{/cancelKey}}</p>
        <div class="counts" id="live" data-live="/dashboard/apps/{{app}}/notifications/{{id}}/live">
          {{#counts}}<span class="pill {{status}}{{#zero}} zero{{/zero}}" data-pill="{{status}}"><span data-count="{{status}}">{{count}}</span> {{status}}</span>{{/counts}}
        </div>
        {{#deliveries}}
        <section class="card delivery" id="delivery-{{id}}">
          <h2>Device {{device}} <span class="pill {{status}}" data-delivery-status="{{id}}">{{status}}</span></h2>
          <p class="muted">Attempts {{attempts}}{{#reason}} · reason <strong>{{reason}}</strong>{{/reason}} · due {{due}} UTC · updated {{updated}} UTC</p>
          {{^empty(trace)}}
          <ol class="timeline">
            {{#trace}}<li><span class="rule">{{rule}}</span> {{message}} <span class="muted small">{{at}}</span></li>{{/trace}}
          </ol>
          {{/empty(trace)}}
        </section>
        {{/deliveries}}
        """#

    static let compose = #"""
        <h1>Compose</h1>
        <form class="compose card" method="post" action="/dashboard/apps/{{app}}/compose">
          <input type="hidden" name="csrf" value="{{csrf}}">
          {{#error}}<p class="error" role="alert">{{error}}</p>{{/error}}
          {{#form}}
          <div class="grid">
            <div>
              <label for="type">Type</label>
              <select id="type" name="type"><option value="">none: a plain alert</option>{{#types}}<option value="{{name}}" {{#selected}}selected{{/selected}}>{{name}}</option>{{/types}}</select>
              <label for="title">Title <span class="muted">(a type's copy when empty)</span></label>
              <input id="title" name="title" value="{{title}}" maxlength="200">
              <label for="body">Body</label>
              <textarea id="body" name="body" rows="3" maxlength="1000">{{body}}</textarea>
              <label for="data">Data <span class="muted">(key=value lines or a JSON object: the type's placeholders)</span></label>
              <textarea id="data" name="data" rows="3">{{data}}</textarea>
            </div>
            <div>
              <label for="user_ids">Users <span class="muted">(ids, by commas or lines; at most {{maximumUsers}})</span></label>
              <textarea id="user_ids" name="user_ids" rows="3" required>{{userIDs}}</textarea>
              <label for="deliver_at">Deliver at <span class="muted">(UTC; empty: now)</span></label>
              <input id="deliver_at" name="deliver_at" type="datetime-local" value="{{deliverAt}}">
              <label for="cancel_key">Cancel key <span class="muted">(optional)</span></label>
              <input id="cancel_key" name="cancel_key" value="{{cancelKey}}" maxlength="128">
            </div>
          </div>
          {{/form}}
          <div class="buttons">
            <button type="submit" name="action" value="preview" class="secondary">Preview</button>
            <button type="submit" name="action" value="send" id="send">Send</button>
          </div>
        </form>
        {{#previewed}}
        <h2>Preview</h2>
        <p class="muted">What each device would be sent (its stamp shown with delivery id 0). Quiet hours, pacing and preferences decide when.</p>
        {{^devices}}<p class="muted">No devices.</p>{{/devices}}
        {{#devices}}
        <section class="card preview">
          <h3>{{user}}{{#device}} · {{device}} <span class="pill">{{platform}}</span> <span class="muted small">{{locale}}</span>{{/device}}</h3>
          {{#note}}<p class="muted">{{note}}</p>{{/note}}
          {{#device}}
          <div class="lock"><div class="lock-title">{{title}}</div><div class="lock-body">{{body}}</div></div>
          <p class="size {{#over}}error{{/over}}">{{size}} of {{limit}} bytes{{#over}}: too large{{/over}}</p>
          <pre class="payload">{{payload}}</pre>
          {{/device}}
        </section>
        {{/devices}}
        {{/previewed}}
        """#

    static let analytics = #"""
        <h1>Analytics</h1>
        <form class="search" method="get" action="/dashboard/apps/{{app}}/analytics">
          <label for="from">From</label><input id="from" name="from" type="date" value="{{from}}">
          <label for="to">To</label><input id="to" name="to" type="date" value="{{to}}">
          <button type="submit">Show</button>
        </form>
        <p class="muted">By day of send (UTC), {{from}} to {{to}}. CTR = opened ÷ accepted, one open per delivery.</p>
        {{#types}}
        <section class="card type-stats" id="type-{{name}}">
          <h2>{{name}}{{#id}} <span class="muted small">{{id}}</span>{{/id}} <span class="pill {{state}}">{{verdict}}</span></h2>
          <div class="stats">
            <div><span class="big">{{ctr}}</span><span class="muted">CTR{{#goal}} · goal {{goal}}{{/goal}}</span></div>
            <div><span class="big">{{counts.sent}}</span><span class="muted">sent</span></div>
            <div><span class="big">{{counts.accepted}}</span><span class="muted">accepted</span></div>
            <div><span class="big">{{counts.opened}}</span><span class="muted">opened</span></div>
            <div><span class="big">{{counts.failed}}</span><span class="muted">failed</span></div>
            <div><span class="big">{{counts.deferred}}</span><span class="muted">deferred</span></div>
            <div><span class="big">{{counts.suppressed}}</span><span class="muted">suppressed</span></div>
          </div>
          {{#chart}}{{{chart}}}<div class="axis muted small"><span>{{from}}</span><span>accepted, and opened in the darker part</span><span>{{to}}</span></div>{{/chart}}
        </section>
        {{/types}}
        {{^types}}<p class="muted">No types and nothing sent in these days.</p>{{/types}}
        <section class="card">
          <h2>Opt-in</h2>
          <p class="muted">Authorized and provisional ÷ every active device that reported its permission.</p>
          <table class="optin"><thead><tr><th>Devices</th><th class="num">Rate</th><th></th><th class="num">Opted in</th><th class="num">Reported</th></tr></thead><tbody>
          {{#optIn}}<tr><th>{{name}}</th><td class="num">{{rate}}</td><td>{{{bar}}}</td><td class="num">{{optedIn}}</td><td class="num">{{reported}}</td></tr>{{/optIn}}
          {{#platforms}}<tr><td>{{name}}</td><td class="num">{{rate}}</td><td>{{{bar}}}</td><td class="num">{{optedIn}}</td><td class="num">{{reported}}</td></tr>{{/platforms}}
          {{#versions}}<tr><td>version {{name}}</td><td class="num">{{rate}}</td><td>{{{bar}}}</td><td class="num">{{optedIn}}</td><td class="num">{{reported}}</td></tr>{{/versions}}
          </tbody></table>
        </section>
        """#

    static let catalog = #"""
        <h1>Catalog</h1>
        {{^configured}}<p class="muted">This app has no catalog (apps[].catalog): it sends plain alerts only.</p>{{/configured}}
        {{#configured}}
        {{^empty(problems)}}<section class="card"><h2>Check</h2><ul class="problems">{{#problems}}<li>{{.}}</li>{{/problems}}</ul></section>{{/empty(problems)}}
        {{#empty(problems)}}<p class="pill ok">The checker found nothing to fix.</p>{{/empty(problems)}}
        {{#types}}
        <section class="card type" id="type-{{name}}">
          <h2>{{name}}{{#id}} <span class="muted small">{{id}}</span>{{/id}}</h2>
          <p class="muted">{{facts}}{{#category}} · category {{category}}{{/category}}{{#deepLink}} · <code>{{deepLink}}</code>{{/deepLink}}</p>
          {{^empty(problems)}}<ul class="problems">{{#problems}}<li class="error">{{.}}</li>{{/problems}}</ul>{{/empty(problems)}}
          <div class="copies">
          {{#copies}}
            <figure class="copy">
              <figcaption>{{locale}}{{#isDefault}} (default){{/isDefault}} · title <span class="{{#titleOver}}error{{/titleOver}}">{{titleLength}}/{{titleMaximum}}</span> · body <span class="{{#bodyOver}}error{{/bodyOver}}">{{bodyLength}}/{{bodyMaximum}}</span></figcaption>
              <div class="lock">
                <div class="lock-app">{{appName}} <span>now</span></div>
                <div class="lock-title">{{title}}</div>
                {{#subtitle}}<div class="lock-subtitle">{{subtitle}}</div>{{/subtitle}}
                <div class="lock-body">{{body}}</div>
                {{^empty(actions)}}<div class="lock-actions">{{#actions}}<span>{{.}}</span>{{/actions}}</div>{{/empty(actions)}}
              </div>
            </figure>
          {{/copies}}
          </div>
        </section>
        {{/types}}
        {{^empty(tracks)}}<section class="card"><h2>Tracks</h2><table><tbody>{{#tracks}}<tr><th>{{name}}</th><td>anchor {{anchor}}</td><td>{{steps}}</td></tr>{{/tracks}}</tbody></table></section>{{/empty(tracks)}}
        {{^empty(triggers)}}<section class="card"><h2>Triggers</h2><ul>{{#triggers}}<li>{{.}}</li>{{/triggers}}</ul></section>{{/empty(triggers)}}
        {{^empty(jobs)}}<section class="card"><h2>Jobs</h2><ul>{{#jobs}}<li>{{.}}</li>{{/jobs}}</ul></section>{{/empty(jobs)}}
        {{/configured}}
        """#

    static let message = #"""
        <section class="card narrow">
          <h1>{{heading}}</h1>
          <p>{{text}}</p>
          <p><a href="/dashboard">Back</a></p>
        </section>
        """#

    static let css = #"""
        :root { --bg: #f7f7f8; --fg: #1d1d1f; --muted: #6b6b70; --card: #fff; --line: #e2e2e6; --accent: #3355cc;
          --ok: #1f7a3a; --bad: #b3261e; --warn: #8a5a00; color-scheme: light dark; }
        @media (prefers-color-scheme: dark) { :root { --bg: #151517; --fg: #ececf0; --muted: #9a9aa2; --card: #1f1f23;
          --line: #33333a; --accent: #8ea6ff; --ok: #5cc47c; --bad: #ff7b72; --warn: #e3b341; } }
        * { box-sizing: border-box; }
        body { margin: 0; font: 15px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; background: var(--bg); color: var(--fg); }
        a { color: var(--accent); }
        header.top { display: flex; flex-wrap: wrap; gap: .5rem 1rem; align-items: center; padding: .6rem 1rem; border-bottom: 1px solid var(--line); background: var(--card); }
        .brand { font-weight: 700; text-decoration: none; color: var(--fg); }
        nav { display: flex; gap: .75rem; flex-wrap: wrap; }
        nav a[aria-current] { font-weight: 600; text-decoration: none; color: var(--fg); }
        .signout { margin-left: auto; display: flex; gap: .5rem; align-items: center; }
        main { padding: 1rem; max-width: 1200px; margin: 0 auto; }
        h1 { font-size: 1.4rem; margin: .2rem 0 1rem; } h2 { font-size: 1.1rem; margin: 0 0 .5rem; } h3 { font-size: 1rem; margin: 1rem 0 .4rem; }
        .card { background: var(--card); border: 1px solid var(--line); border-radius: 10px; padding: 1rem; margin: 0 0 1rem; overflow-x: auto; }
        .narrow { max-width: 420px; margin: 2rem auto; }
        .muted { color: var(--muted); } .small { font-size: .8rem; font-weight: 400; }
        .error { color: var(--bad); }
        label { display: block; font-size: .85rem; color: var(--muted); margin: .3rem 0; }
        input, select, button { font: inherit; padding: .45rem .6rem; border-radius: 6px; border: 1px solid var(--line); background: var(--bg); color: var(--fg); }
        .narrow input { width: 100%; margin-bottom: .8rem; }
        button { background: var(--accent); color: #fff; border: 0; cursor: pointer; }
        .search { display: flex; flex-wrap: wrap; gap: .5rem; align-items: end; margin-bottom: 1rem; }
        .search label { margin: 0; align-self: center; }
        table { border-collapse: collapse; width: 100%; font-size: .9rem; }
        th, td { text-align: left; padding: .35rem .5rem; border-bottom: 1px solid var(--line); vertical-align: top; }
        .num { text-align: right; font-variant-numeric: tabular-nums; }
        caption { text-align: left; font-weight: 600; padding: .5rem 0; }
        code, pre { font: .85rem ui-monospace, SFMono-Regular, Menlo, monospace; }
        pre { white-space: pre-wrap; background: var(--bg); padding: .5rem; border-radius: 6px; }
        .pill { display: inline-block; padding: .05rem .5rem; border-radius: 999px; font-size: .8rem; border: 1px solid var(--line); margin: 0 .25rem .25rem 0; }
        .pill.ok, .pill.sent { color: var(--ok); border-color: var(--ok); }
        .pill.bad, .pill.failed { color: var(--bad); border-color: var(--bad); font-weight: 600; }
        .pill.deferred, .pill.queued, .pill.sending, .pill.warn { color: var(--warn); border-color: var(--warn); }
        .pill.zero { color: var(--muted); border-color: var(--line); font-weight: 400; }
        .stats { display: flex; flex-wrap: wrap; gap: 1.5rem; margin: .5rem 0; }
        .stats div { display: flex; flex-direction: column; } .big { font-size: 1.6rem; font-weight: 600; }
        svg.chart { width: 100%; height: 80px; } svg.chart .sent { fill: var(--ok); } svg.chart .failed { fill: var(--bad); }
        ol.timeline { list-style: none; margin: .5rem 0 0; padding: 0 0 0 1rem; border-left: 2px solid var(--line); }
        ol.timeline li { position: relative; margin: 0 0 .5rem; padding-left: .5rem; }
        ol.timeline li::before { content: ""; position: absolute; left: -1.36rem; top: .45rem; width: .6rem; height: .6rem; border-radius: 50%; background: var(--accent); }
        .rule { font: .8rem ui-monospace, monospace; color: var(--muted); margin-right: .4rem; }
        td.why { max-width: 28rem; }
        textarea { font: inherit; width: 100%; padding: .45rem .6rem; border-radius: 6px; border: 1px solid var(--line); background: var(--bg); color: var(--fg); }
        .compose input, .compose select { width: 100%; }
        .grid { display: grid; grid-template-columns: repeat(auto-fit, minmax(280px, 1fr)); gap: 0 1.5rem; }
        .buttons { display: flex; gap: .5rem; margin-top: 1rem; } button.secondary { background: var(--bg); color: var(--fg); border: 1px solid var(--line); }
        .lock { background: color-mix(in srgb, var(--card) 70%, var(--line)); border-radius: 16px; padding: .6rem .8rem; max-width: 360px; }
        .lock-app { font-size: .75rem; color: var(--muted); text-transform: uppercase; display: flex; justify-content: space-between; }
        .lock-title { font-weight: 600; white-space: nowrap; overflow: hidden; text-overflow: ellipsis; }
        .lock-subtitle { font-size: .9rem; white-space: nowrap; overflow: hidden; text-overflow: ellipsis; }
        .lock-body { font-size: .9rem; display: -webkit-box; -webkit-line-clamp: 4; -webkit-box-orient: vertical; overflow: hidden; }
        .lock-actions { display: flex; flex-wrap: wrap; gap: .3rem; margin-top: .5rem; } .lock-actions span { font-size: .8rem; padding: .2rem .6rem; border-radius: 8px; background: var(--card); }
        .copies { display: grid; grid-template-columns: repeat(auto-fill, minmax(280px, 1fr)); gap: 1rem; }
        figure.copy { margin: 0; } figcaption { font-size: .8rem; color: var(--muted); margin-bottom: .3rem; }
        pre.payload { max-height: 24rem; overflow: auto; } .size { font-size: .85rem; }
        svg.chart.daily { height: 90px; } svg.chart .accepted { fill: color-mix(in srgb, var(--accent) 35%, transparent); } svg.chart .opened { fill: var(--accent); }
        svg.share { width: 10rem; height: .7rem; } svg.share .track { fill: var(--line); } svg.share .fill { fill: var(--ok); }
        .scroll { overflow-x: auto; }
        .axis { display: flex; justify-content: space-between; gap: 1rem; }
        ul.problems { margin: .3rem 0; padding-left: 1.2rem; }
        @media (max-width: 600px) { main { padding: .6rem; } .big { font-size: 1.3rem; }
          table.stack thead { display: none; } table.stack tr { display: block; padding: .4rem 0; border-bottom: 1px solid var(--line); }
          table.stack td { display: block; border: 0; padding: .1rem .5rem; } table.stack td:first-child { font-weight: 600; }
          table.stack td[data-label]::before { content: attr(data-label) ": "; color: var(--muted); } }
        """#

    /// Progressive: the pages work without it. It refreshes a notification's counts and delivery
    /// states every 2 s while any is still waiting.
    static let script = #"""
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
        """#
}
