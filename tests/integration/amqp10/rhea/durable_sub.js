// Durable subscriptions: `subscribe` attaches a durable receiver (terminus durable, expiry
// policy never) to a topic, detaches it without closing, and publishes a durable message to
// the topic; after a broker restart `resume` attaches the same link name from the same
// container, gets the message, and closes the link (unsubscribe).
'use strict';
const { check, connect, done, sendAll } = require('./common');

const phase = process.argv[3];
const conn = connect('rhea-durable'); // the container id names the subscription
const address = 'topic://rhea-prices';
const source = { address, durable: 2, expiry_policy: 'never' };

if (phase === 'subscribe') {
  const sub = conn.open_receiver({ name: 'sub1', source, credit_window: 0 });
  sub.on('receiver_open', () => {
    sub.detach(); // detached, not closed: the subscription stays
  });
  sub.on('receiver_close', () => {
    sendAll(conn, address, [{ body: 'p1', durable: true }]).then(() => done({ sent: 1 }, conn));
  });
} else if (phase === 'resume') {
  const sub = conn.open_receiver({ name: 'sub1', source, autoaccept: true });
  sub.on('message', (ctx) => {
    check(ctx.message.body === 'p1', `body ${ctx.message.body}`);
    sub.close(); // closed: unsubscribe
  });
  sub.on('receiver_close', () => done({ received: 'p1' }, conn));
} else {
  check(false, `phase ${phase}`);
}
