// RingMQ web console: a hash-routed single page over the management HTTP API.
// Views: overview (live rates, node figures, alarms), queues (sort/filter), queue (settings,
// counters, chart, consumers, bindings, peek in place, purge, delete, publish, ring size),
// exchanges + bindings (add an exchange), connections (who is blocked and why); a vhost
// selector in the header that lists and forms follow; pages.js adds the exchange page and the
// admin page (users, vhosts, permissions, policies), details.js the connection, channel and
// definitions pages, through `window.RingMQ`.
"use strict";
(() => {
  const POLL_MS = 2000;
  const $ = (sel, root) => (root || document).querySelector(sel);
  const esc = (s) => String(s == null ? "" : s).replace(/[&<>"']/g,
    (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);
  const num = (v) => (v == null ? "" : Number(v).toLocaleString());
  const rate = (v) => (v == null ? "0.0" : Number(v).toFixed(1)) + "/s";
  const enc = encodeURIComponent;
  let timer = null, chart = null, lastRender = null;

  // -- API ---------------------------------------------------------------------------------
  function creds() { return sessionStorage.getItem("ringmq.auth"); }
  // The OAuth 2 login's token (oauth.js; null once expired) or else the Basic credentials.
  const signedIn = () => Boolean(window.RingMQOAuth.token() || creds());
  function authorization() {
    const token = window.RingMQOAuth.token();
    return token ? "Bearer " + token : "Basic " + creds();
  }
  function signOut() { sessionStorage.removeItem("ringmq.auth"); window.RingMQOAuth.clear(); }
  async function api(method, path, body) {
    // Credentials go in an explicit header (the API never sends a Basic challenge, so the
    // browser never remembers them for cross-site requests); bodies are JSON only.
    if (!signedIn()) { showLogin("Your session has expired: please sign in again."); throw new Error("unauthorized"); }
    const headers = { Authorization: authorization(), "X-Requested-With": "XMLHttpRequest" };
    if (body !== undefined) headers["Content-Type"] = "application/json";
    const res = await fetch("/api" + path, {
      method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
    const text = await res.text();
    let data = null;
    try { data = text ? JSON.parse(text) : null; } catch (e) { data = null; }
    // 401 "not_authorized": bad credentials; 401 "not_authorised": signed in, not allowed.
    if (res.status === 401 && !(data && data.error === "not_authorised")) {
      // the reason says why a valid login is still refused (a token without a management tag)
      signOut(); showLogin(data && data.reason ? "Signed out: " + data.reason : "Please sign in.");
      throw new Error("unauthorized");
    }
    if (!res.ok) throw new Error((data && data.reason) || res.statusText);
    return data;
  }
  // For optional figures (a user without the monitoring tag gets 401 from /nodes): null, no logout.
  async function apiMaybe(path) {
    const res = await fetch("/api" + path, { headers: { Authorization: authorization() } });
    return res.ok ? res.json() : null;
  }
  const bytes = (n) => {
    if (n == null) return "";
    let v = Number(n); const units = ["B", "KiB", "MiB", "GiB", "TiB"]; let i = 0;
    while (Math.abs(v) >= 1024 && i < units.length - 1) { v /= 1024; i += 1; }
    return i ? `${v.toFixed(1)} ${units[i]}` : `${v} B`;
  };
  const duration = (ms) => {
    let s = Math.floor((ms || 0) / 1000); const d = Math.floor(s / 86400); s -= d * 86400;
    const h = Math.floor(s / 3600); s -= h * 3600; const m = Math.floor(s / 60); s -= m * 60;
    return (d ? `${d}d ` : "") + (d || h ? `${h}h ` : "") + (d || h || m ? `${m}m ` : "") + `${s}s`;
  };
  function toast(msg) {
    const t = $("#toast"); t.textContent = msg; t.classList.add("show");
    setTimeout(() => t.classList.remove("show"), 2500);
  }

  // -- login -------------------------------------------------------------------------------
  function showLogin(msg) {
    stopPolling();
    $("#login").hidden = false; $("#view").innerHTML = ""; $("#who").hidden = true;
    $("#login-error").textContent = msg || "";
    window.RingMQOAuth.settings().then((s) => { $("#oauth-login").hidden = !s.oauth_enabled; }).catch(() => {});
  }
  $("#oauth-login-button").addEventListener("click", () => {
    window.RingMQOAuth.begin().catch((err) => { $("#oauth-login-error").textContent = err.message; });
  });
  $("#login-form").addEventListener("submit", async (e) => {
    e.preventDefault();
    sessionStorage.setItem("ringmq.auth", btoa($("#login-user").value + ":" + $("#login-password").value));
    try {
      const me = await api("GET", "/whoami");
      $("#whoami").textContent = me.name;
      $("#login").hidden = true; route();
    } catch (err) { $("#login-error").textContent = "Login failed"; }
  });
  $("#logout").addEventListener("click", () => { signOut(); $("#whoami").textContent = ""; showLogin(); });

  // -- vhost selector: "" is every vhost; lists and forms follow it -------------------------
  const vhost = () => sessionStorage.getItem("ringmq.vhost") || "";
  const vhostOr = (fallback) => vhost() || fallback;  // forms: the chosen vhost, else "/"
  let vhostsLoaded = false;
  async function loadVhosts() {
    if (vhostsLoaded) return;
    vhostsLoaded = true;
    try {
      const vs = await api("GET", "/vhosts");
      const sel = $("#vhost-select");
      sel.innerHTML = `<option value="">all</option>` + vs.map((v) => `<option>${esc(v.name)}</option>`).join("");
      sel.value = vhost();
    } catch (e) { vhostsLoaded = false; }
  }
  $("#vhost-select").addEventListener("change", (e) => { sessionStorage.setItem("ringmq.vhost", e.target.value); route(); });

  // -- routing -----------------------------------------------------------------------------
  // Each page's poll belongs to one generation: a poll still in flight when the page changes
  // finds its elements gone, so its late errors are dropped rather than reported.
  let generation = 0;
  function stopPolling() { if (timer) clearInterval(timer); timer = null; generation += 1; }
  function poll(fn) {
    stopPolling();
    const mine = generation;
    const run = () => Promise.resolve().then(fn).catch((e) => {
      if (mine === generation && e.message !== "unauthorized") { toast(e.message); console.error(e); }
    });
    lastRender = run; run(); timer = setInterval(run, POLL_MS);
  }
  function route() {
    if (!signedIn()) return showLogin();
    $("#login").hidden = true; $("#who").hidden = false; loadVhosts();
    if (!$("#whoami").textContent) api("GET", "/whoami").then((me) => { $("#whoami").textContent = me.name; }).catch(() => {});
    const parts = location.hash.replace(/^#\/?/, "").split("/").map(decodeURIComponent);
    const page = parts[0] || "overview";
    document.querySelectorAll("#nav a").forEach((a) =>
      a.classList.toggle("active", a.dataset.page === page || (page === "queue" && a.dataset.page === "queues")
        || (page === "exchange" && a.dataset.page === "exchanges")
        || ((page === "connection" || page === "channel") && a.dataset.page === "connections")));
    chart = null;
    const views = { overview, queues, queue: () => queuePage(parts[1], parts[2]), exchanges, connections };
    if (page === "admin") vhostsLoaded = false;  // vhosts may be added there
    const extra = window.RingMQ.views[page];
    (extra ? () => extra(parts.slice(1)) : views[page] || overview)();
  }
  window.addEventListener("hashchange", route);

  // -- shared widgets ----------------------------------------------------------------------
  function statGrid(items) {
    return `<div class="grid">${items.map(([k, v, id]) =>
      `<div class="stat"><div class="v" ${id ? `id="${id}"` : ""}>${esc(v)}</div><div class="k">${esc(k)}</div></div>`).join("")}</div>`;
  }
  const RATE_SERIES = [
    { key: "publish", label: "Publish", color: "#d9480f" },
    { key: "deliver_get", label: "Deliver / get", color: "#1971c2" },
    { key: "ack", label: "Ack", color: "#2b8a3e" },
  ];
  function chartCard(title) {
    return `<div class="card"><h2>${esc(title)}</h2>
      <div class="legend">${RATE_SERIES.map((s) => `<span><i style="background:${s.color}"></i>${s.label}</span>`).join("")}</div>
      <canvas class="chart" id="rate-chart"></canvas></div>`;
  }
  function rateValues(ms) {
    const v = {};
    for (const s of RATE_SERIES) v[s.key] = ((ms || {})[s.key + "_details"] || {}).rate || 0;
    return v;
  }
  // Chart points (oldest first) from the `samples` of a message_stats fetched with
  // msg_rates_age/msg_rates_incr: each sample is a running total, newest first, so a rate is the
  // change between two neighbouring samples over the time between them.
  function sampledRates(ms) {
    const times = [];
    for (const s of RATE_SERIES) {
      const samples = ((ms || {})[s.key + "_details"] || {}).samples || [];
      for (const p of samples) if (!times.includes(p.timestamp)) times.push(p.timestamp);
    }
    times.sort((a, b) => a - b);
    const at = (key, t) => {
      const p = (((ms || {})[key + "_details"] || {}).samples || []).find((x) => x.timestamp === t);
      return p ? p.sample : 0;
    };
    const points = [];
    for (let i = 1; i < times.length; i++) {
      const dt = (times[i] - times[i - 1]) / 1000, values = {};
      for (const s of RATE_SERIES) values[s.key] = Math.max(0, at(s.key, times[i]) - at(s.key, times[i - 1])) / dt;
      points.push({ t: times[i], values });
    }
    return points;
  }
  // Sortable, filterable table bound to rows of objects.
  function table(el, cols, rows, state, rowAttrs) {
    if (!el) return;  // the page changed while its data was on the way
    let shown = rows;
    if (state.filter) {
      const f = state.filter.toLowerCase();
      shown = rows.filter((r) => String(r.name || "").toLowerCase().includes(f));
    }
    if (state.sort) {
      const col = cols.find((c) => c.key === state.sort);
      const get = col.sortValue || ((r) => r[col.key]);
      shown = shown.slice().sort((a, b) => {
        const x = get(a), y = get(b);
        const cmp = typeof x === "number" && typeof y === "number" ? x - y : String(x).localeCompare(String(y));
        return state.rev ? -cmp : cmp;
      });
    }
    el.innerHTML = `<table><thead><tr>${cols.map((c) =>
      `<th data-key="${c.key}" class="${c.num ? "num" : ""} ${state.sort === c.key ? "sorted" + (state.rev ? " rev" : "") : ""}">${esc(c.label)}</th>`).join("")}</tr></thead>
      <tbody>${shown.map((r) => `<tr ${rowAttrs ? rowAttrs(r) : ""}>${cols.map((c) =>
        `<td class="${c.num ? "num" : ""}" data-col="${c.key}">${c.html ? c.html(r) : esc(c.num ? num(r[c.key]) : r[c.key])}</td>`).join("")}</tr>`).join("")}
      ${shown.length ? "" : `<tr><td colspan="${cols.length}" class="muted">Nothing here.</td></tr>`}</tbody></table>`;
    el.querySelectorAll("th").forEach((th) => th.addEventListener("click", () => {
      state.rev = state.sort === th.dataset.key ? !state.rev : false;
      state.sort = th.dataset.key; table(el, cols, rows, state, rowAttrs);
    }));
  }

  // -- overview ----------------------------------------------------------------------------
  async function overview() {
    $("#view").innerHTML = `<h1>Overview</h1><div id="ov-stats"></div>${chartCard("Message rates")}
      <div class="cols"><div class="card"><h2>Queued messages</h2><div id="ov-depth"></div></div>
      <div class="card"><h2>Node</h2><div id="ov-node"></div></div></div>`;
    chart = new LineChart($("#rate-chart"), RATE_SERIES, 120);
    try {
      const hist = await api("GET", "/ringmq/rates");
      chart.reset(hist.map((h) => ({ t: h.t, values: h })));
    } catch (e) { /* history is optional */ }
    poll(async () => {
      const o = await api("GET", "/overview");
      const t = o.object_totals, q = o.queue_totals;
      $("#ov-stats").innerHTML = statGrid([
        ["Connections", num(t.connections)], ["Blocked", num(o.blocked_connections)],
        ["Channels", num(t.channels)], ["Queues", num(t.queues)], ["Consumers", num(t.consumers)],
        ["Exchanges", num(t.exchanges)], ["Messages", num(q.messages), "ov-messages"]]);
      $("#ov-depth").innerHTML = `<dl class="kv">
        <dt>Ready</dt><dd>${num(q.messages_ready)}</dd>
        <dt>Unacknowledged</dt><dd>${num(q.messages_unacknowledged)}</dd>
        <dt>Scheduled</dt><dd>${num(q.messages_scheduled)}</dd>
        <dt>Paged</dt><dd>${num(q.messages_paged)}</dd>
        <dt>Total</dt><dd>${num(q.messages)}</dd>
        <dt>Publish rate</dt><dd>${rate(rateValues(o.message_stats).publish)}</dd>
        <dt>Deliver rate</dt><dd>${rate(rateValues(o.message_stats).deliver_get)}</dd></dl>`;
      const n = await apiMaybe(`/nodes/${enc(o.node)}`);
      const alarms = n ? (n.alarms || []) : [];
      const alarm = (on) => (on ? ` <span class="pill blocked">alarm</span>` : "");
      $("#ov-node").innerHTML = `<dl class="kv"><dt>Node</dt><dd>${esc(o.node)}</dd>
        <dt>Version</dt><dd>${esc(o.product_version)}</dd>
        ${n ? `<dt>Uptime</dt><dd id="ov-uptime">${esc(duration(n.uptime))}</dd>
        <dt>Memory</dt><dd id="ov-memory">${esc(bytes(n.mem_used))} of ${esc(bytes(n.mem_limit))}${alarm(n.mem_alarm)}</dd>
        <dt>Disk free</dt><dd id="ov-disk">${esc(bytes(n.disk_free))} (limit ${esc(bytes(n.disk_free_limit))})${alarm(n.disk_free_alarm)}</dd>
        <dt>File descriptors</dt><dd id="ov-fds">${num(n.fd_used)} of ${num(n.fd_total)}</dd>
        <dt>Alarms</dt><dd id="ov-alarms">${alarms.length ? alarms.map((a) => `<span class="pill blocked">${esc(a.resource)}</span> ${esc(a.reason)}`).join("<br>") : "none"}</dd>` : ""}
        <dt>Listeners</dt><dd>${o.listeners.map((l) => esc(`${l.protocol} ${l.ip_address}:${l.port}`)).join("<br>")}</dd></dl>`;
      if (chart) chart.push(Date.now(), rateValues(o.message_stats));
    });
  }

  // -- queues ------------------------------------------------------------------------------
  const queueState = { filter: "", sort: "name", rev: false };
  function queueLink(q) { return `#/queue/${enc(q.vhost)}/${enc(q.name)}`; }
  function queueFeatures(q) {
    // effective_settings carries the resolved QueueSettings field names (lvq_key, max_length...)
    const s = q.effective_settings || {}, out = [];
    if (q.ring_size >= 0) out.push(`<span class="pill ring">ring ${q.ring_size}</span>`);
    if (q.type === "stream") out.push(`<span class="pill">stream</span>`);
    if (s.lvq_key) out.push(`<span class="pill">LVQ</span>`);
    if (s.max_length != null || s.max_length_bytes != null) out.push(`<span class="pill">max-length</span>`);
    if (s.message_ttl_ms != null) out.push(`<span class="pill">TTL</span>`);
    if (s.max_priority) out.push(`<span class="pill">priority</span>`);
    if (s.dead_letter_exchange != null) out.push(`<span class="pill">DLX</span>`);
    if (q.policy) out.push(`<span class="pill">policy ${esc(q.policy)}</span>`);
    return out.join("");
  }
  async function queues() {
    $("#view").innerHTML = `<h1>Queues</h1><div class="card">
      <div class="toolbar"><input id="queue-filter" placeholder="Filter by name" value="${esc(queueState.filter)}">
      <span class="muted" id="queue-count"></span></div><div id="queue-table"></div></div>
      <div class="card"><h2>Add a queue</h2><div class="row">
        <label>Name <input id="new-queue-name"></label>
        <label>Ring size (optional) <input id="new-queue-ring" type="number" min="1"></label>
        <label>Arguments (JSON) <input id="new-queue-args" placeholder='{"x-max-length": 1000}'></label>
        <button id="new-queue-add">Add queue</button></div></div>`;
    let rows = [];
    const cols = [
      { key: "name", label: "Name", html: (q) => `<a href="${queueLink(q)}">${esc(q.name)}</a>` },
      { key: "vhost", label: "Vhost" },
      { key: "features", label: "Features", html: queueFeatures, sortValue: (q) => q.ring_size },
      { key: "messages_ready", label: "Ready", num: true },
      { key: "messages_unacknowledged", label: "Unacked", num: true },
      { key: "messages_scheduled", label: "Scheduled", num: true },
      { key: "messages", label: "Total", num: true },
      { key: "consumers", label: "Consumers", num: true },
      { key: "in", label: "In", num: true, html: (q) => rate(rateValues(q.message_stats).publish),
        sortValue: (q) => rateValues(q.message_stats).publish },
      { key: "out", label: "Out", num: true, html: (q) => rate(rateValues(q.message_stats).deliver_get),
        sortValue: (q) => rateValues(q.message_stats).deliver_get },
    ];
    const render = () => {
      table($("#queue-table"), cols, rows, queueState, (q) => `data-queue="${esc(q.name)}"`);
      $("#queue-count").textContent = `${rows.length} queue${rows.length === 1 ? "" : "s"}`;
    };
    $("#queue-filter").addEventListener("input", (e) => { queueState.filter = e.target.value; render(); });
    $("#new-queue-add").addEventListener("click", async () => {
      const name = $("#new-queue-name").value.trim();
      if (!name) return toast("Give the queue a name");
      let args = {};
      try { args = $("#new-queue-args").value.trim() ? JSON.parse($("#new-queue-args").value) : {}; }
      catch (e) { return toast("Arguments must be JSON"); }
      const ring = $("#new-queue-ring").value;
      if (ring) args["x-ring-size"] = Number(ring);
      try { await api("PUT", `/queues/${enc(vhostOr("/"))}/${enc(name)}`, { durable: true, arguments: args }); toast(`Queue ${name} declared`); lastRender(); }
      catch (e) { toast(e.message); }
    });
    poll(async () => { rows = await api("GET", vhost() ? `/queues/${enc(vhost())}` : "/queues"); render(); });
  }

  // -- one queue ---------------------------------------------------------------------------
  async function queuePage(vhost, name) {
    const path = `/queues/${enc(vhost)}/${enc(name)}`;
    $("#view").innerHTML = `<h1>Queue <span id="queue-name">${esc(name)}</span> <span class="muted">in ${esc(vhost)}</span></h1>
      <div id="q-stats"></div>${chartCard("Rates")}
      <div class="cols">
        <div class="card"><h2>Settings</h2><div id="q-settings"></div>
          <div id="ring-editor" hidden><div class="row" style="margin-top:12px"><label>Ring size <input id="ring-size" type="number" min="-1"></label>
          <button id="ring-size-save">Update ring size</button></div>
          <p class="muted">Lowering the ring size does not drop messages: new publishes evict from the head until the queue shrinks naturally.</p></div>
          <div class="row" style="margin-top:12px"><button id="queue-delete" class="danger">Delete queue</button></div></div>
        <div class="card"><h2>Counters</h2><div id="q-counters"></div></div>
      </div>
      <div class="cols">
        <div class="card"><h2>Get messages</h2><div class="row">
          <label>Ack mode <select id="get-ackmode">
            <option value="browse">Browse in place (nothing taken)</option>
            <option value="ack_requeue_true">Nack, requeue (redelivered)</option>
            <option value="reject_requeue_true">Reject, requeue (redelivered)</option>
            <option value="ack_requeue_false">Ack (removed from the queue)</option></select></label>
          <label>Count <input id="peek-count" type="number" value="5" min="1"></label>
          <button id="peek" class="secondary">Get</button>
          <button id="purge" class="danger">Purge</button></div><div id="peek-result"></div></div>
        <div class="card"><h2>Publish a message</h2>
          <label>Payload <textarea id="publish-payload"></textarea></label>
          <label>Delivery mode <select id="publish-mode"><option value="1">1: non-persistent</option>
            <option value="2">2: persistent</option></select></label>
          <label>Headers (JSON) <input id="publish-headers" placeholder='{"x-delay": 5000}'></label>
          <label>Properties (JSON) <input id="publish-props" placeholder='{"content_type": "text/plain", "priority": 1, "expiration": "60000"}'></label>
          <button id="publish">Publish</button></div>
      </div>
      <div class="cols">
        <div class="card"><h2>Consumers</h2><div id="q-consumers"></div></div>
        <div class="card"><h2>Bindings</h2><div id="q-bindings"></div></div>
      </div>
      <div class="card"><h2>Scheduled messages</h2><div class="row"><span id="sched-count" class="muted"></span>
        <button id="sched-deliver" class="secondary">Deliver all now</button>
        <button id="sched-purge" class="danger">Purge scheduled</button></div><div id="sched-list"></div></div>`;
    chart = new LineChart($("#rate-chart"), RATE_SERIES, 120);
    let ringFilled = false;
    $("#ring-size-save").addEventListener("click", async () => {
      const v = Number($("#ring-size").value);
      try { await api("PUT", path + "/settings", { "ring-size": v }); toast(`Ring size set to ${v}`); lastRender(); }
      catch (e) { toast(e.message); }
    });
    $("#queue-delete").addEventListener("click", async () => {
      if (!confirm(`Delete queue ${name}? Its messages are lost.`)) return;
      try { await api("DELETE", path); toast(`Queue ${name} deleted`); location.hash = "#/queues"; }
      catch (e) { toast(e.message); }
    });
    $("#purge").addEventListener("click", async () => {
      if (!confirm(`Purge all messages from ${name}?`)) return;
      try { await api("DELETE", path + "/contents"); toast("Queue purged"); lastRender(); }
      catch (e) { toast(e.message); }
    });
    $("#peek").addEventListener("click", async () => {
      try {
        // browse in place: nothing is taken or redelivered (a peeked LVQ keeps its newest
        // value); the other modes are RabbitMQ's /get: taken, then requeued or acked
        const mode = $("#get-ackmode").value, count = Number($("#peek-count").value) || 1;
        const msgs = mode === "browse"
          ? await api("POST", path + "/browse", { count, encoding: "auto", truncate: 50000 })
          : await api("POST", path + "/get", { count, ackmode: mode, encoding: "auto", truncate: 50000 });
        if (mode !== "browse") lastRender();
        $("#peek-result").innerHTML = msgs.length ? msgs.map((m, i) => `<div><span class="muted">#${i + 1}
          rk=${esc(m.routing_key)} ${m.redelivered ? "redelivered" : ""} ${m.payload_bytes} bytes</span>
          <pre class="peeked">${esc(m.payload)}</pre>${propsList(m.properties)}</div>`).join("") : `<p class="muted">Queue is empty.</p>`;
      } catch (e) { toast(e.message); }
    });
    $("#publish").addEventListener("click", async () => {
      let headers, props;
      try { headers = $("#publish-headers").value.trim() ? JSON.parse($("#publish-headers").value) : undefined; }
      catch (e) { return toast("Headers must be JSON"); }
      try { props = $("#publish-props").value.trim() ? JSON.parse($("#publish-props").value) : {}; }
      catch (e) { return toast("Properties must be JSON"); }
      props.delivery_mode = Number($("#publish-mode").value);
      if (headers) props.headers = headers;
      try {
        const r = await api("POST", `/exchanges/${enc(vhost)}/amq.default/publish`, { routing_key: name,
          payload: $("#publish-payload").value, payload_encoding: "string", properties: props });
        toast(r.routed ? "Message published" : "Message was not routed"); lastRender();
      } catch (e) { toast(e.message); }
    });
    $("#sched-deliver").addEventListener("click", async () => {
      try { const r = await api("POST", path + "/scheduled/deliver", {}); toast(`${r.delivered} delivered`); lastRender(); }
      catch (e) { toast(e.message); }
    });
    $("#sched-purge").addEventListener("click", async () => {
      try { const r = await api("DELETE", path + "/scheduled"); toast(`${r.purged} purged`); lastRender(); }
      catch (e) { toast(e.message); }
    });
    try {
      // the last ten minutes the server kept (RabbitMQ's samples), so the chart starts full
      const h = await api("GET", path + "?msg_rates_age=600&msg_rates_incr=5&lengths_age=600&lengths_incr=5");
      if (chart) chart.reset(sampledRates(h.message_stats));
    } catch (e) { /* history is optional */ }
    poll(async () => {
      let q;
      try { q = await api("GET", path); } catch (e) { $("#q-stats").innerHTML = `<p class="error">${esc(e.message)}</p>`; return; }
      const isRing = q.ring_size >= 0;
      const s = q.effective_settings || {};
      const limited = s.limit != null || s.max_length != null || s.max_length_bytes != null;
      $("#q-stats").innerHTML = statGrid([["Ready", num(q.messages_ready), "q-ready"],
        ["Unacked", num(q.messages_unacknowledged), "q-unacked"], ["Scheduled", num(q.messages_scheduled)],
        ["Paged", num(q.messages_paged)], ["Total", num(q.messages), "q-messages"], ["Consumers", num(q.consumers)],
        ...(isRing ? [["Ring size", num(q.ring_size), "q-ring-size"]] : []),
        ...(q.stream ? [["First offset", num(q.stream.first_offset), "q-first-offset"],
          ["Last offset", num(q.stream.last_offset), "q-last-offset"],
          ["Stream bytes", num(q.stream.size_bytes), "q-stream-bytes"]] : [])]);
      $("#ring-editor").hidden = !isRing;
      $("#q-settings").innerHTML = `<dl class="kv"><dt>Durable</dt><dd>${q.durable}</dd>
        <dt>Auto-delete</dt><dd>${q.auto_delete}</dd><dt>Policy</dt><dd>${esc(q.policy || "none")}</dd>
        <dt>Arguments</dt><dd><pre>${esc(JSON.stringify(q.arguments, null, 1))}</pre></dd>
        <dt>Effective settings</dt><dd>${effectiveSettings(s)}</dd></dl>`;
      if (!ringFilled) { $("#ring-size").value = q.ring_size; ringFilled = true; }
      const c = q.counters || {}, ms = q.message_stats || {};
      const dl = Object.entries(c.dead_lettered || {}).map(([k, v]) => `<dt>Dead-lettered (${esc(k)})</dt><dd>${num(v)}</dd>`).join("");
      $("#q-counters").innerHTML = `<dl class="kv">
        <dt>Published</dt><dd>${num(ms.publish || 0)}</dd><dt>Delivered / got</dt><dd>${num(ms.deliver_get || 0)}</dd>
        <dt>Acked</dt><dd>${num(ms.ack || 0)}</dd><dt>Redelivered</dt><dd>${num(ms.redeliver || 0)}</dd>
        ${isRing ? `<dt>Ring evicted</dt><dd id="c-ring-evicted">${num(c.ring_evicted)}</dd>` : ""}
        ${s.lvq_key ? `<dt>LVQ replaced</dt><dd>${num(c.lvq_replaced)}</dd>` : ""}
        ${limited ? `<dt>Overflow</dt><dd id="q-overflow">${esc(s.overflow || "")}</dd><dt>Overflow rejected</dt><dd>${num(c.overflow_rejected)}</dd>` : ""}
        <dt>Expired</dt><dd>${num(c.expired)}</dd>${dl || "<dt>Dead-lettered</dt><dd>0</dd>"}</dl>`;
      if (chart) chart.push(Date.now(), rateValues(q.message_stats));
      const [consumers, bindings] = await Promise.all([api("GET", `/consumers/${enc(vhost)}`), api("GET", path + "/bindings")]);
      const mine = consumers.filter((k) => k.queue && k.queue.name === name);
      $("#q-consumers").innerHTML = mine.length ? `<table id="q-consumer-table"><thead><tr><th>Tag</th><th>Channel</th><th>Ack</th><th class="num">Prefetch</th></tr></thead><tbody>
        ${mine.map((k) => `<tr><td>${esc(k.consumer_tag)}</td><td>${esc((k.channel_details || {}).name)}</td><td>${k.ack_required ? "manual" : "auto"}</td><td class="num">${num(k.prefetch_count)}</td></tr>`).join("")}</tbody></table>`
        : `<p class="muted">No consumers.</p>`;
      $("#q-bindings").innerHTML = `<table id="q-binding-table"><thead><tr><th>From exchange</th><th>Routing key</th><th>Arguments</th></tr></thead><tbody>
        ${bindings.map((b) => `<tr><td>${b.source ? `<a href="#/exchange/${enc(vhost)}/${enc(b.source)}">${esc(b.source)}</a>` : "(AMQP default)"}</td><td>${esc(b.routing_key)}</td><td>${esc(JSON.stringify(b.arguments))}</td></tr>`).join("")}</tbody></table>`;
      const sched = await api("GET", path + "/scheduled");
      $("#sched-count").textContent = `${sched.length} waiting`;
      $("#sched-list").innerHTML = sched.length ? `<table><thead><tr><th>Seq</th><th>Due</th><th>Payload</th></tr></thead><tbody>
        ${sched.slice(0, 50).map((m) => `<tr><td>${m.seq}</td><td>${esc(new Date(m.due_ms).toLocaleString())}</td><td>${esc(m.payload.slice(0, 80))}</td></tr>`).join("")}</tbody></table>` : "";
    });
  }

  // Message properties (content type, headers, delivery mode...) under a peeked payload.
  function propsList(p) {
    const entries = Object.entries(p || {});
    if (!entries.length) return "";
    return `<dl class="kv props">${entries.map(([k, v]) => `<dt>${esc(k)}</dt><dd>${esc(typeof v === "object" ? JSON.stringify(v) : v)}</dd>`).join("")}</dl>`;
  }

  // The resolved length limit in words: "at most 500 messages (RabbitMQ max-length); when
  // full: drop the oldest".
  const LIMIT_FAMILIES = { rabbit: "RabbitMQ max-length", qpid: "Qpid size policy",
    ring: "Artemis ring", address: "Artemis address settings" };
  const LIMIT_ACTIONS = { ring: "evict the oldest", "drop-head": "drop the oldest",
    "reject-publish": "refuse new messages", "reject-publish-dlx": "refuse new messages and dead-letter them",
    "qpid-ring": "evict the oldest", "qpid-ring-strict": "refuse new messages while the oldest is delivered",
    "flow-to-disk": "page message bodies to disk", "drop-new": "discard new messages",
    block: "block publishers" };
  function limitText(v) {
    const caps = [];
    if (v.max_count != null) caps.push(`${num(v.max_count)} messages`);
    if (v.max_bytes != null) caps.push(bytes(v.max_bytes));
    const what = caps.length ? `at most ${caps.join(" and ")}` : "no cap";
    return `${what} (${LIMIT_FAMILIES[v.family] || v.family}); when full: ${LIMIT_ACTIONS[v.action] || v.action}`;
  }

  // Resolved settings as rows, each tagged with where it came from (argument/policy/address).
  function effectiveSettings(s) {
    const sources = s.sources || {};
    const rows = Object.entries(s).filter(([k, v]) => k !== "sources" && v !== false && v !== -1)
      .map(([k, v]) => {
        const shown = k === "limit" && v ? limitText(v) : (typeof v === "object" ? JSON.stringify(v) : v);
        const src = sources[k] ? ` <span class="pill">${esc(sources[k])}</span>` : "";
        return `<dt>${esc(k)}</dt><dd>${esc(shown)}${src}</dd>`;
      });
    return rows.length ? `<dl class="kv">${rows.join("")}</dl>` : `<span class="muted">defaults</span>`;
  }

  // -- exchanges and bindings --------------------------------------------------------------
  async function exchanges() {
    $("#view").innerHTML = `<h1>Exchanges</h1><div class="card"><div id="x-table"></div></div>
      <div class="card"><h2>Add an exchange</h2><div class="row">
        <label>Name <input id="new-x-name"></label>
        <label>Type <select id="new-x-type"><option>direct</option><option>fanout</option><option>topic</option>
          <option>headers</option><option>x-delayed-message</option></select></label>
        <label>Durable <select id="new-x-durable"><option value="true">yes</option><option value="false">no</option></select></label>
        <label>Auto-delete <select id="new-x-autodelete"><option value="false">no</option><option value="true">yes</option></select></label>
        <label>Internal <select id="new-x-internal"><option value="false">no</option><option value="true">yes</option></select></label>
        <label>Arguments (JSON) <input id="new-x-args" placeholder='{"alternate-exchange": "unrouted"}'></label>
        <button id="new-x-add">Add exchange</button></div></div>
      <h1>Bindings</h1><div class="card"><div id="b-table"></div></div>`;
    const xs = { sort: "name", rev: false, filter: "" }, bs = { sort: "source", rev: false, filter: "" };
    $("#new-x-add").addEventListener("click", async () => {
      const name = $("#new-x-name").value.trim();
      if (!name) return toast("Give the exchange a name");
      let args = {};
      try { args = $("#new-x-args").value.trim() ? JSON.parse($("#new-x-args").value) : {}; }
      catch (e) { return toast("Arguments must be JSON"); }
      const yes = (id) => $(id).value === "true";
      try {
        await api("PUT", `/exchanges/${enc(vhostOr("/"))}/${enc(name)}`, { type: $("#new-x-type").value,
          durable: yes("#new-x-durable"), auto_delete: yes("#new-x-autodelete"), internal: yes("#new-x-internal"), arguments: args });
        toast(`Exchange ${name} declared`); lastRender();
      } catch (e) { toast(e.message); }
    });
    poll(async () => {
      const v = vhost();
      const [x, b] = await Promise.all([api("GET", v ? `/exchanges/${enc(v)}` : "/exchanges"),
        api("GET", v ? `/bindings/${enc(v)}` : "/bindings")]);
      table($("#x-table"), [
        { key: "name", label: "Name", html: (e) => `<a href="#/exchange/${enc(e.vhost)}/${enc(e.name || "amq.default")}">${esc(e.name || "(AMQP default)")}</a>` },
        { key: "vhost", label: "Vhost" }, { key: "type", label: "Type" },
        { key: "durable", label: "Durable" },
        { key: "in", label: "In", num: true, html: (e) => rate(((e.message_stats || {}).publish_in_details || {}).rate) },
      ], x, xs);
      table($("#b-table"), [
        { key: "source", label: "Source", html: (r) => esc(r.source || "(AMQP default)") },
        { key: "destination", label: "Destination" }, { key: "destination_type", label: "Type" },
        { key: "routing_key", label: "Routing key" },
        { key: "arguments", label: "Arguments", html: (r) => esc(JSON.stringify(r.arguments)) },
      ], b, bs);
    });
  }

  // -- connections -------------------------------------------------------------------------
  async function connections() {
    $("#view").innerHTML = `<h1>Connections</h1><div class="card"><div id="c-table"></div></div>
      <h1>Channels</h1><div class="card"><div id="ch-table"></div></div>`;
    const cs = { sort: "name", rev: false, filter: "" }, hs = { sort: "name", rev: false, filter: "" };
    poll(async () => {
      const v = vhost(), mine = (r) => !v || r.vhost === v;
      const [c, ch] = await Promise.all([api("GET", "/connections"), api("GET", "/channels")])
        .then(([a, b]) => [a.filter(mine), b.filter(mine)]);
      table($("#c-table"), [
        { key: "name", label: "Name", html: (r) => `<a href="#/connection/${enc(r.name)}">${esc(r.name)}</a>` },
        { key: "client_name", label: "Client name", html: (r) => esc((r.client_properties || {}).connection_name || ""),
          sortValue: (r) => (r.client_properties || {}).connection_name || "" },
        { key: "protocol", label: "Protocol" },
        { key: "client_id", label: "Client id", html: (r) => esc((r.client_properties || {}).client_id || ""),
          sortValue: (r) => (r.client_properties || {}).client_id || "" },
        { key: "user", label: "User" }, { key: "vhost", label: "Vhost" },
        { key: "state", label: "State", html: (r) => `<span class="pill ${r.state === "running" ? "running" : "blocked"}">${esc(r.state)}</span>` },
        { key: "blocked_reason", label: "Blocked because", html: (r) => esc(r.blocked_reason || "") },
        { key: "channels", label: "Channels", num: true },
        { key: "client", label: "Client", html: (r) => esc(((r.client_properties || {}).product || "") + " " + ((r.client_properties || {}).version || "")) },
        { key: "close", label: "", html: (r) => `<button class="secondary close-conn" data-name="${esc(r.name)}">Close</button>` },
      ], c, cs);
      document.querySelectorAll(".close-conn").forEach((b) => b.addEventListener("click", async () => {
        try { await api("DELETE", `/connections/${enc(b.dataset.name)}`); toast("Connection closed"); lastRender(); }
        catch (e) { toast(e.message); }
      }));
      table($("#ch-table"), [
        { key: "name", label: "Channel", html: (r) => `<a href="#/channel/${enc(r.name)}">${esc(r.name)}</a>` },
        { key: "user", label: "User" },
        { key: "consumer_count", label: "Consumers", num: true },
        { key: "messages_unacknowledged", label: "Unacked", num: true },
        { key: "prefetch_count", label: "Prefetch", num: true },
        { key: "confirm", label: "Confirm" },
      ], ch, hs);
    });
  }

  window.RingMQ = { api, apiMaybe, $, esc, num, rate, enc, bytes, table, poll, toast, statGrid,
    propsList, vhost, duration, views: window.RingMQ ? window.RingMQ.views : {}, rerender: () => lastRender && lastRender() };
  if (signedIn()) api("GET", "/whoami").then((me) => { $("#whoami").textContent = me.name; route(); }).catch(() => {});
  else showLogin();
})();
