// Shared by the rhea scripts: connect to the broker under test, fail loudly, never hang.
'use strict';
const rhea = require('rhea');

const port = Number(process.argv[2]);
if (!port) {
  console.error('usage: node SCRIPT.js PORT');
  process.exit(64);
}

// A script that has not finished in 15 s has failed (the pytest side waits 30 s at most).
const guard = setTimeout(() => fail('timed out'), 15000);

function fail(why) {
  console.error(`FAIL: ${why}`);
  process.exit(1);
}

function check(cond, why) {
  if (!cond) fail(why);
}

// A new container and an open connection; errors of any endpoint fail the script. `options`
// adds to or overrides the connect options (connection_details: another transport).
function connect(id, options = {}) {
  const container = rhea.create_container({ id });
  container.on('error', (ctx) => fail(`error: ${ctx.error}`));
  container.on('connection_error', (ctx) => fail(`connection error: ${JSON.stringify(ctx.connection.error)}`));
  container.on('session_error', (ctx) => fail(`session error: ${JSON.stringify(ctx.session.error)}`));
  container.on('sender_error', (ctx) => fail(`sender error: ${JSON.stringify(ctx.sender.error)}`));
  container.on('receiver_error', (ctx) => fail(`receiver error: ${JSON.stringify(ctx.receiver.error)}`));
  container.on('disconnected', (ctx) => {
    if (!ctx.connection.is_closed()) fail(`disconnected: ${ctx.error}`);
  });
  const connection = container.connect({
    host: '127.0.0.1', port, username: 'guest', password: 'guest', reconnect: false, ...options,
  });
  return connection;
}

// Print the result as JSON for the pytest side and exit 0.
function done(result, ...connections) {
  clearTimeout(guard);
  for (const c of connections) c.close();
  process.stdout.write(`${JSON.stringify(result)}\n`);
  setTimeout(() => process.exit(0), 50);
}

// Send `bodies` to `address` unsettled; resolve once the broker accepted them all.
function sendAll(connection, address, messages) {
  return new Promise((resolve) => {
    const sender = connection.open_sender(address);
    let sent = 0;
    let accepted = 0;
    sender.on('sendable', () => {
      while (sender.sendable() && sent < messages.length) sender.send(messages[sent++]);
    });
    sender.on('accepted', () => {
      if (++accepted === messages.length) {
        sender.close();
        resolve(accepted);
      }
    });
    sender.on('rejected', (ctx) => fail(`rejected: ${JSON.stringify(ctx.delivery.remote_state)}`));
    sender.on('released', () => fail('released'));
  });
}

module.exports = { rhea, port, fail, check, connect, done, sendAll };
