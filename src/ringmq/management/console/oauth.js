// The console's OAuth 2 login (RabbitMQ's management.oauth_enabled): the authorization code
// flow with PKCE (RFC 7636), entirely in the browser.
// begin(): a random code_verifier and state are kept in sessionStorage, the browser goes to
// the provider's authorization_endpoint (from its OpenID discovery document) with the S256
// code_challenge; the provider sends it back to /oauth-callback.html with a code, and
// finish() trades code + verifier at the token_endpoint. The access token lives in
// sessionStorage (this tab only, gone with it) and app.js sends it as `Authorization: Bearer`
// on every API call; the broker checks it as any token (signature, audience, scopes, expiry).
// A token past its `exp` is dropped before use, so an expired login returns to the login page.
"use strict";
window.RingMQOAuth = (() => {
  const TOKEN = "ringmq.oauth.token", PENDING = "ringmq.oauth.pending";
  const CALLBACK = "/oauth-callback.html";
  const b64url = (bytes) => btoa(String.fromCharCode(...new Uint8Array(bytes)))
    .replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
  const random = (n) => b64url(crypto.getRandomValues(new Uint8Array(n)));
  async function challenge(verifier) {
    return b64url(await crypto.subtle.digest("SHA-256", new TextEncoder().encode(verifier)));
  }
  async function settings() {
    const res = await fetch("/api/auth");
    return res.ok ? res.json() : { oauth_enabled: false };
  }
  async function discover(provider) {
    const res = await fetch(provider.replace(/\/$/, "") + "/.well-known/openid-configuration");
    if (!res.ok) throw new Error("OAuth provider discovery failed: " + res.status);
    return res.json();
  }
  // The token's claims (not verified here: the broker does that on every call).
  function claims(token) {
    try {
      const part = token.split(".")[1].replace(/-/g, "+").replace(/_/g, "/");
      return JSON.parse(atob(part + "===".slice((part.length + 3) % 4)));
    } catch (e) { return null; }
  }
  function expired(token) {
    const c = claims(token);
    return !c || (typeof c.exp === "number" && c.exp * 1000 <= Date.now());
  }
  function token() {
    const t = sessionStorage.getItem(TOKEN);
    if (t && expired(t)) { sessionStorage.removeItem(TOKEN); return null; }
    return t;
  }
  function clear() { sessionStorage.removeItem(TOKEN); sessionStorage.removeItem(PENDING); }
  async function begin() {
    const s = await settings();
    if (!s.oauth_enabled) throw new Error("OAuth 2 login is not enabled");
    const idp = await discover(s.oauth_provider_url);
    const verifier = random(48), state = random(16);  // 64 characters of verifier
    const redirect = location.origin + CALLBACK;
    sessionStorage.setItem(PENDING, JSON.stringify({
      verifier, state, redirect, client_id: s.oauth_client_id, token_endpoint: idp.token_endpoint }));
    const q = new URLSearchParams({
      response_type: "code", client_id: s.oauth_client_id, redirect_uri: redirect,
      scope: s.oauth_scopes || "openid", state,
      code_challenge: await challenge(verifier), code_challenge_method: "S256" });
    location.assign(idp.authorization_endpoint + "?" + q.toString());
  }
  // On the callback page: the code (and state) in the query, the verifier kept by begin().
  async function finish() {
    const q = new URLSearchParams(location.search);
    const pending = JSON.parse(sessionStorage.getItem(PENDING) || "null");
    sessionStorage.removeItem(PENDING);  // one try: a reload starts over
    if (q.get("error")) throw new Error(q.get("error_description") || q.get("error"));
    if (!pending || !q.get("code") || q.get("state") !== pending.state) {
      throw new Error("This login was not started here (state mismatch); please sign in again.");
    }
    const res = await fetch(pending.token_endpoint, {
      method: "POST",
      headers: { "Content-Type": "application/x-www-form-urlencoded" },
      body: new URLSearchParams({
        grant_type: "authorization_code", code: q.get("code"), redirect_uri: pending.redirect,
        client_id: pending.client_id, code_verifier: pending.verifier }).toString() });
    const doc = await res.json().catch(() => ({}));
    if (!res.ok || !doc.access_token) {
      throw new Error("Token request refused: " + (doc.error_description || doc.error || res.status));
    }
    sessionStorage.setItem(TOKEN, doc.access_token);
  }
  return { settings, begin, finish, token, clear, claims };
})();
