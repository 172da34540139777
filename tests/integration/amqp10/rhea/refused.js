// A refused login: `plain` logs in with a wrong password (SASL PLAIN), `nosasl` skips SASL
// while the broker's anonymous login is off. Prints what rhea reports: the connection error
// (condition and description) or the disconnect, and whether the connection ever opened.
'use strict';
const { rhea, port, done } = require('./common');

const mode = process.argv[3];
const container = rhea.create_container({ id: `rhea-refused-${mode}` });
const options = { host: '127.0.0.1', port, reconnect: false };
if (mode === 'plain') Object.assign(options, { username: 'guest', password: 'wrong' });
const connection = container.connect(options);
const result = { opened: false, error: null, disconnected: null };
connection.on('connection_open', () => { result.opened = true; });
connection.on('connection_error', (ctx) => {
  const e = ctx.error || ctx.connection.error || {};
  result.error = { condition: e.condition || null, description: e.description || e.message || null };
});
connection.on('connection_close', () => done(result));
connection.on('disconnected', (ctx) => {
  result.disconnected = ctx.error ? String(ctx.error.message || ctx.error) : 'closed';
  done(result);
});
