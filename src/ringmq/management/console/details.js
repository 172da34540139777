// RingMQ web console, detail pages: one connection (its figures, byte rates measured between
// polls, its channels, close), one channel (its settings and consumers), and definitions
// (export as a file, import one: RabbitMQ's JSON, /api/definitions). Registered on
// window.RingMQ.views; the shared helpers come from app.js.
"use strict";
(() => {
  const R = window.RingMQ;
  const { api, $, esc, num, enc, bytes, table, poll, toast } = R;
  const kv = (rows) => `<dl class="kv">${rows.map(([k, v, id]) =>
    `<dt>${esc(k)}</dt><dd ${id ? `id="${id}"` : ""}>${v}</dd>`).join("")}</dl>`;

  // Bytes per second from two samples of a growing counter (null until there are two).
  function meter() {
    let last = null;
    return (value, now) => {
      const prev = last; last = { value, now };
      if (!prev || now <= prev.now) return null;
      return Math.max(0, value - prev.value) / ((now - prev.now) / 1000);
    };
  }
  const perSecond = (v) => (v == null ? "measuring\u2026" : `${bytes(Math.round(v))}/s`);

  // -- one connection ----------------------------------------------------------------------
  R.views.connection = ([name]) => {
    $("#view").innerHTML = `<h1>Connection <span id="conn-name">${esc(name)}</span></h1>
      <div id="conn-stats"></div>
      <div class="cols"><div class="card"><h2>Details</h2><div id="conn-details"></div>
        <div class="row" style="margin-top:12px"><button id="conn-close" class="danger">Close connection</button></div></div>
        <div class="card"><h2>Client properties</h2><div id="conn-client"></div></div></div>
      <div class="card"><h2>Channels</h2><div id="conn-channels"></div></div>`;
    $("#conn-close").addEventListener("click", async () => {
      if (!confirm(`Close connection ${name}?`)) return;
      try { await api("DELETE", `/connections/${enc(name)}`); toast("Connection closed"); location.hash = "#/connections"; }
      catch (e) { toast(e.message); }
    });
    const recv = meter(), send = meter(), state = { sort: "number", rev: false, filter: "" };
    poll(async () => {
      const [c, chans] = await Promise.all([api("GET", `/connections/${enc(name)}`), api("GET", "/channels")]);
      // the server's rate (sampled every few seconds) until two polls measure one here
      const server = (k) => (c[k + "_details"] || {}).rate;
      const now = Date.now(), inRate = recv(c.recv_oct, now) ?? server("recv_oct"), outRate = send(c.send_oct, now) ?? server("send_oct");
      const mine = chans.filter((ch) => (ch.connection_details || {}).name === name);
      R.$("#conn-stats").innerHTML = R.statGrid([["Channels", num(c.channels), "conn-channel-count"],
        ["Received", perSecond(inRate), "conn-recv-rate"], ["Sent", perSecond(outRate), "conn-send-rate"],
        ["Received total", bytes(c.recv_oct)], ["Sent total", bytes(c.send_oct)]]);
      $("#conn-details").innerHTML = kv([["Protocol", esc(c.protocol), "conn-protocol"], ["User", esc(c.user)],
        ["Vhost", esc(c.vhost)], ["State", `<span class="pill ${c.state === "running" ? "running" : "blocked"}">${esc(c.state)}</span>`],
        ["Blocked because", esc(c.blocked_reason || "")], ["Peer", esc(`${c.peer_host}:${c.peer_port}`)],
        ["Authentication", esc(c.auth_mechanism)], ["TLS", c.ssl ? "yes" : "no"],
        ["Heartbeat", `${num(c.timeout)} s`], ["Frame max", num(c.frame_max)], ["Channel max", num(c.channel_max)],
        ["Connected at", esc(new Date(c.connected_at).toLocaleString())]]);
      const props = Object.entries(c.client_properties || {});
      $("#conn-client").innerHTML = props.length ? kv(props.map(([k, v]) =>
        [k, esc(typeof v === "object" ? JSON.stringify(v) : v)])) : `<p class="muted">None sent.</p>`;
      table($("#conn-channels"), [
        { key: "number", label: "Channel", num: true, html: (r) => `<a href="#/channel/${enc(r.name)}">${num(r.number)}</a>` },
        { key: "consumer_count", label: "Consumers", num: true },
        { key: "messages_unacknowledged", label: "Unacked", num: true },
        { key: "prefetch_count", label: "Prefetch", num: true },
        { key: "confirm", label: "Confirm" }, { key: "transactional", label: "Transactional" },
        { key: "state", label: "State" },
      ], mine, state);
    });
  };

  // -- one channel -------------------------------------------------------------------------
  R.views.channel = ([name]) => {
    $("#view").innerHTML = `<h1>Channel <span id="chan-name">${esc(name)}</span></h1>
      <div id="chan-stats"></div>
      <div class="cols"><div class="card"><h2>Details</h2><div id="chan-details"></div></div>
        <div class="card"><h2>Consumers</h2><div id="chan-consumers"></div></div></div>`;
    const state = { sort: "consumer_tag", rev: false, filter: "" };
    poll(async () => {
      const [chans, consumers] = await Promise.all([api("GET", "/channels"), api("GET", "/consumers")]);
      const ch = chans.find((x) => x.name === name);
      if (!ch) { $("#chan-stats").innerHTML = `<p class="error">This channel is closed.</p>`; return; }
      const conn = ch.connection_details || {};
      $("#chan-stats").innerHTML = R.statGrid([["Consumers", num(ch.consumer_count), "chan-consumer-count"],
        ["Unacked", num(ch.messages_unacknowledged), "chan-unacked"], ["Prefetch", num(ch.prefetch_count)]]);
      $("#chan-details").innerHTML = kv([
        ["Connection", `<a href="#/connection/${enc(conn.name)}">${esc(conn.name)}</a>`, "chan-connection"],
        ["Number", num(ch.number)], ["User", esc(ch.user)], ["Vhost", esc(ch.vhost)],
        ["Confirm mode", ch.confirm ? "yes" : "no"], ["Transactional", ch.transactional ? "yes" : "no"],
        ["Global prefetch", num(ch.global_prefetch_count)], ["State", esc(ch.state)]]);
      table($("#chan-consumers"), [
        { key: "consumer_tag", label: "Tag" },
        { key: "queue", label: "Queue", html: (k) => `<a href="#/queue/${enc(k.queue.vhost)}/${enc(k.queue.name)}">${esc(k.queue.name)}</a>`,
          sortValue: (k) => k.queue.name },
        { key: "ack_required", label: "Ack", html: (k) => (k.ack_required ? "manual" : "auto") },
        { key: "prefetch_count", label: "Prefetch", num: true },
      ], consumers.filter((k) => (k.channel_details || {}).name === name), state);
    });
  };

  // -- definitions -------------------------------------------------------------------------
  R.views.definitions = () => {
    $("#view").innerHTML = `<h1>Definitions</h1><div class="cols">
      <div class="card"><h2>Export</h2><p class="muted">Users, vhosts, permissions, policies, queues,
        exchanges and bindings as RabbitMQ's JSON (rabbitmqadmin export, ringmq definitions export).</p>
        <button id="defs-export">Download definitions</button> <span id="defs-export-result" class="muted"></span></div>
      <div class="card"><h2>Import</h2><p class="muted">A definitions file from ringmq or RabbitMQ. It is
        checked as a whole first: nothing is applied if any part is refused.</p>
        <input id="defs-file" type="file" accept=".json,application/json">
        <button id="defs-import">Upload definitions</button> <span id="defs-import-result" class="muted"></span></div></div>`;
    $("#defs-export").addEventListener("click", async () => {
      try {
        const doc = await api("GET", "/definitions");
        const blob = new Blob([JSON.stringify(doc, null, 2) + "\n"], { type: "application/json" });
        const a = document.createElement("a");
        a.href = URL.createObjectURL(blob); a.download = "ringmq-definitions.json"; a.click();
        setTimeout(() => URL.revokeObjectURL(a.href), 10000);
        $("#defs-export-result").textContent =
          `${(doc.queues || []).length} queues, ${(doc.exchanges || []).length} exchanges, ${(doc.bindings || []).length} bindings`;
      } catch (e) { toast(e.message); }
    });
    $("#defs-import").addEventListener("click", async () => {
      const file = $("#defs-file").files[0];
      if (!file) return toast("Choose a definitions file");
      let doc;
      try { doc = JSON.parse(await file.text()); } catch (e) { return toast("The file is not JSON"); }
      try { await api("POST", "/definitions", doc); $("#defs-import-result").textContent = "imported"; toast(`Imported ${file.name}`); }
      catch (e) { $("#defs-import-result").textContent = e.message; toast(e.message); }
    });
  };
})();
