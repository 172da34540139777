// RingMQ web console, more pages: one exchange (details, bindings both ways, add a binding,
// publish to it) and admin (users, vhosts, permissions, policies). Registered on
// window.RingMQ.views by the hash page name; the shared helpers come from app.js.
"use strict";
(() => {
  const R = window.RingMQ;
  const { api, $, esc, num, enc, table, poll, toast } = R;
  const json = (v) => esc(JSON.stringify(v));
  const parseJson = (text, what) => {
    if (!text.trim()) return {};
    try { return JSON.parse(text); } catch (e) { throw new Error(`${what} must be JSON`); }
  };
  async function act(fn, done) {
    try { const msg = await fn(); if (msg) toast(msg); R.rerender(); if (done) done(); }
    catch (e) { toast(e.message); }
  }
  const onClick = (sel, fn) => document.querySelectorAll(sel).forEach((b) => b.addEventListener("click", () => fn(b)));

  // -- one exchange ------------------------------------------------------------------------
  R.views.exchange = ([vhost, name]) => {
    const path = `/exchanges/${enc(vhost)}/${enc(name)}`;
    const shown = name === "amq.default" ? "(AMQP default)" : name;
    $("#view").innerHTML = `<h1>Exchange <span id="exchange-name">${esc(shown)}</span> <span class="muted">in ${esc(vhost)}</span></h1>
      <div class="cols">
        <div class="card"><h2>Details</h2><div id="x-details"></div></div>
        <div class="card"><h2>Publish a message</h2>
          <label>Routing key <input id="x-publish-key"></label>
          <label>Payload <textarea id="x-publish-payload"></textarea></label>
          <label>Properties (JSON) <input id="x-publish-props" placeholder='{"delivery_mode": 2, "headers": {"k": "v"}}'></label>
          <button id="x-publish">Publish</button> <span id="x-publish-result" class="muted"></span></div>
      </div>
      <div class="cols">
        <div class="card"><h2>Bindings from this exchange</h2><div id="x-bindings-out"></div>
          <div class="row"><label>To queue <input id="x-bind-queue"></label>
          <label>Routing key <input id="x-bind-key"></label>
          <button id="x-bind">Bind</button></div></div>
        <div class="card"><h2>Bindings to this exchange</h2><div id="x-bindings-in"></div></div>
      </div>`;
    $("#x-publish").addEventListener("click", () => act(async () => {
      const props = parseJson($("#x-publish-props").value, "Properties");
      const r = await api("POST", path + "/publish", { routing_key: $("#x-publish-key").value,
        payload: $("#x-publish-payload").value, payload_encoding: "string", properties: props });
      $("#x-publish-result").textContent = r.routed ? "routed" : "not routed";
      return r.routed ? "Message published" : "Message was not routed";
    }));
    $("#x-bind").addEventListener("click", () => act(async () => {
      const q = $("#x-bind-queue").value.trim();
      if (!q) throw new Error("Give the queue to bind");
      await api("POST", `/bindings/${enc(vhost)}/e/${enc(name)}/q/${enc(q)}`, { routing_key: $("#x-bind-key").value, arguments: {} });
      return `Bound to ${q}`;
    }));
    const outState = { sort: "destination", rev: false, filter: "" };
    const inState = { sort: "source", rev: false, filter: "" };
    poll(async () => {
      const [x, out, inn] = await Promise.all([api("GET", path),
        api("GET", path + "/bindings/source"), api("GET", path + "/bindings/destination")]);
      $("#x-details").innerHTML = `<dl class="kv"><dt>Type</dt><dd id="x-type">${esc(x.type)}</dd>
        <dt>Durable</dt><dd>${x.durable}</dd><dt>Auto-delete</dt><dd>${x.auto_delete}</dd>
        <dt>Internal</dt><dd>${x.internal}</dd><dt>Arguments</dt><dd><pre>${json(x.arguments)}</pre></dd></dl>`;
      table($("#x-bindings-out"), [
        { key: "destination", label: "To", html: (b) => b.destination_type === "queue"
          ? `<a href="#/queue/${enc(vhost)}/${enc(b.destination)}">${esc(b.destination)}</a>` : esc(b.destination) },
        { key: "destination_type", label: "Type" }, { key: "routing_key", label: "Routing key" },
        { key: "arguments", label: "Arguments", html: (b) => json(b.arguments) },
      ], out, outState, (b) => `data-binding="${esc(b.destination)}"`);
      table($("#x-bindings-in"), [
        { key: "source", label: "From" }, { key: "routing_key", label: "Routing key" },
      ], inn, inState);
    });
  };

  // -- admin: users, vhosts, permissions, policies -----------------------------------------
  R.views.admin = () => {
    $("#view").innerHTML = `<h1>Admin</h1>
      <div class="cols">
        <div class="card"><h2>Users</h2><div id="a-users"></div>
          <div class="row"><label>Name <input id="a-user-name"></label><label>Password <input id="a-user-password" type="password"></label>
          <label>Tags <input id="a-user-tags" placeholder="administrator, monitoring, management"></label>
          <button id="a-user-add">Add user</button></div></div>
        <div class="card"><h2>Virtual hosts</h2><div id="a-vhosts"></div>
          <div class="row"><label>Name <input id="a-vhost-name"></label><button id="a-vhost-add">Add vhost</button></div></div>
      </div>
      <div class="card"><h2>Permissions</h2><div id="a-perms"></div>
        <div class="row"><label>User <input id="a-perm-user"></label><label>Vhost <input id="a-perm-vhost" value="/"></label>
        <label>Configure <input id="a-perm-configure" value=".*"></label><label>Write <input id="a-perm-write" value=".*"></label>
        <label>Read <input id="a-perm-read" value=".*"></label><button id="a-perm-set">Set permissions</button></div></div>
      <div class="card"><h2>Policies</h2><div id="a-policies"></div>
        <div class="row"><label>Vhost <input id="a-pol-vhost" value="/"></label><label>Name <input id="a-pol-name"></label>
        <label>Pattern <input id="a-pol-pattern" placeholder="^ring\\."></label>
        <label>Definition (JSON) <input id="a-pol-def" placeholder='{"ring-size": 3}'></label>
        <label>Apply to <select id="a-pol-apply"><option>queues</option><option>exchanges</option><option>all</option></select></label>
        <label>Priority <input id="a-pol-priority" type="number" value="0"></label>
        <button id="a-pol-set">Set policy</button></div></div>`;
    $("#a-user-add").addEventListener("click", () => act(async () => {
      const n = $("#a-user-name").value.trim();
      if (!n) throw new Error("Give the user a name");
      await api("PUT", `/users/${enc(n)}`, { password: $("#a-user-password").value, tags: $("#a-user-tags").value });
      return `User ${n} saved`;
    }));
    $("#a-vhost-add").addEventListener("click", () => act(async () => {
      const n = $("#a-vhost-name").value.trim();
      if (!n) throw new Error("Give the vhost a name");
      await api("PUT", `/vhosts/${enc(n)}`); return `Vhost ${n} added`;
    }));
    $("#a-perm-set").addEventListener("click", () => act(async () => {
      const u = $("#a-perm-user").value.trim(), v = $("#a-perm-vhost").value;
      await api("PUT", `/permissions/${enc(v)}/${enc(u)}`, { configure: $("#a-perm-configure").value,
        write: $("#a-perm-write").value, read: $("#a-perm-read").value });
      return `Permissions of ${u} in ${v} set`;
    }));
    $("#a-pol-set").addEventListener("click", () => act(async () => {
      const v = $("#a-pol-vhost").value, n = $("#a-pol-name").value.trim();
      await api("PUT", `/policies/${enc(v)}/${enc(n)}`, { pattern: $("#a-pol-pattern").value,
        definition: parseJson($("#a-pol-def").value, "Definition"), "apply-to": $("#a-pol-apply").value,
        priority: Number($("#a-pol-priority").value) || 0 });
      return `Policy ${n} set`;
    }));
    const st = () => ({ sort: "name", rev: false, filter: "" });
    const s = { users: st(), vhosts: st(), perms: { sort: "user", rev: false, filter: "" }, pols: st() };
    const del = (label, attrs) => `<button class="secondary" ${attrs}>${label}</button>`;
    poll(async () => {
      const [users, vhosts, perms, pols] = await Promise.all([api("GET", "/users"), api("GET", "/vhosts"),
        api("GET", "/permissions"), api("GET", "/policies")]);
      table($("#a-users"), [
        { key: "name", label: "Name" },
        { key: "tags", label: "Tags", html: (u) => esc(Array.isArray(u.tags) ? u.tags.join(", ") : u.tags) },
        { key: "del", label: "", html: (u) => del("Delete", `data-del-user="${esc(u.name)}"`) },
      ], users, s.users, (u) => `data-user="${esc(u.name)}"`);
      table($("#a-vhosts"), [
        { key: "name", label: "Name" }, { key: "messages", label: "Messages", num: true },
        { key: "del", label: "", html: (v) => del("Delete", `data-del-vhost="${esc(v.name)}"`) },
      ], vhosts, s.vhosts, (v) => `data-vhost="${esc(v.name)}"`);
      table($("#a-perms"), [
        { key: "user", label: "User" }, { key: "vhost", label: "Vhost" }, { key: "configure", label: "Configure" },
        { key: "write", label: "Write" }, { key: "read", label: "Read" },
        { key: "del", label: "", html: (p) => del("Clear", `data-clear-perm="${esc(p.vhost)}" data-user="${esc(p.user)}"`) },
      ], perms, s.perms, (p) => `data-perm="${esc(p.user)}@${esc(p.vhost)}"`);
      table($("#a-policies"), [
        { key: "name", label: "Name" }, { key: "vhost", label: "Vhost" }, { key: "pattern", label: "Pattern" },
        { key: "apply-to", label: "Apply to" }, { key: "priority", label: "Priority", num: true },
        { key: "definition", label: "Definition", html: (p) => json(p.definition) },
        { key: "del", label: "", html: (p) => del("Clear", `data-clear-policy="${esc(p.name)}" data-vhost="${esc(p.vhost)}"`) },
      ], pols, s.pols, (p) => `data-policy="${esc(p.name)}"`);
      onClick("[data-del-user]", (b) => confirm(`Delete user ${b.dataset.delUser}?`) &&
        act(async () => { await api("DELETE", `/users/${enc(b.dataset.delUser)}`); return "User deleted"; }));
      onClick("[data-del-vhost]", (b) => confirm(`Delete vhost ${b.dataset.delVhost} and everything in it?`) &&
        act(async () => { await api("DELETE", `/vhosts/${enc(b.dataset.delVhost)}`); return "Vhost deleted"; }));
      onClick("[data-clear-perm]", (b) => act(async () => {
        await api("DELETE", `/permissions/${enc(b.dataset.clearPerm)}/${enc(b.dataset.user)}`); return "Permissions cleared"; }));
      onClick("[data-clear-policy]", (b) => act(async () => {
        await api("DELETE", `/policies/${enc(b.dataset.vhost)}/${enc(b.dataset.clearPolicy)}`); return "Policy cleared"; }));
    });
  };
})();
