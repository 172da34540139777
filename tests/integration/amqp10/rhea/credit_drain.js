// Credit and drain: with credit 2 the broker sends 2 of 3 messages; a drain with no credit
// left is echoed at once; a drain with credit 10 sends the last one, then gives the rest back.
'use strict';
const { check, connect, done, sendAll } = require('./common');

const conn = connect('rhea-credit');
const address = 'rhea-credit';
const messages = ['a', 'b', 'c'].map((body) => ({ body }));
sendAll(conn, address, messages).then(() => {
  const receiver = conn.open_receiver({ source: address, credit_window: 0 });
  const got = [];
  const drains = [];
  receiver.on('receiver_open', () => receiver.add_credit(2));
  receiver.on('message', (ctx) => {
    got.push(ctx.message.body);
    if (got.length === 2) receiver.drain_credit(); // credit 0 now: echoed without messages
  });
  receiver.on('receiver_drained', () => {
    receiver.drain = false;
    drains.push({ received: got.length, credit: receiver.credit });
    if (drains.length === 1) {
      receiver.drain = true;
      receiver.add_credit(10);
    } else {
      check(got.join('') === 'abc', `received ${got}`);
      done({ received: got, drains }, conn);
    }
  });
});
