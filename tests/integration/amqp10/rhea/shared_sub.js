// Shared subscriptions: two receivers with the capabilities shared and global and the same
// link name (before the `|` rhea users add) share one subscription queue: each message of the
// topic reaches one of them.
'use strict';
const { check, connect, done, sendAll } = require('./common');

const conn = connect('rhea-shared');
const address = 'rhea-jobs';
const source = { address, capabilities: ['topic', 'shared', 'global'] };
const got = [[], []];
let opened = 0;
const receivers = ['workers', 'workers|2'].map((name, i) => {
  const r = conn.open_receiver({ name, source, credit_window: 10 });
  r.on('message', (ctx) => {
    got[i].push(ctx.message.body);
    if (got[0].length + got[1].length === 4) done({ got }, conn);
  });
  r.on('receiver_open', () => {
    if (++opened === 2) {
      sendAll(conn, `topic://${address}`, [0, 1, 2, 3].map((body) => ({ body })));
    }
  });
  return r;
});
check(receivers.length === 2, 'two receivers');
