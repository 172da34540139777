// Browsing: a receiver whose source says distribution-mode copy reads the queue's messages and
// leaves them there (accepting a browsed delivery changes nothing).
'use strict';
const { connect, done, sendAll } = require('./common');

const conn = connect('rhea-browse');
const address = 'rhea-browsed';
const bodies = ['one', 'two', 'three'];
sendAll(conn, address, bodies.map((body) => ({ body }))).then(() => {
  const browser = conn.open_receiver({
    source: { address, distribution_mode: 'copy' }, credit_window: 10,
  });
  const got = [];
  let mode = null;
  browser.on('receiver_open', (ctx) => {
    mode = ctx.receiver.remote.attach.source.distribution_mode;
  });
  browser.on('message', (ctx) => {
    got.push(ctx.message.body);
    if (got.length === bodies.length) browser.drain_credit();
  });
  browser.on('receiver_drained', () => done({ browsed: got, mode }, conn));
});
