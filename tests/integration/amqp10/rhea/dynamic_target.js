// Dynamic target: a sender attaching with `dynamic: true` gets a temporary queue, its address
// in the broker's attach; messages sent on the link, and to that address by others, land in
// it; a receiver reads them. The pytest side checks the queue goes once the sender closes.
'use strict';
const { check, connect, done, sendAll } = require('./common');

const conn = connect('rhea-dynamic-target');
const other = connect('rhea-dynamic-other');
const sender = conn.open_sender({ target: { dynamic: true } });
const got = [];
sender.once('sendable', (ctx) => {
  const address = ctx.sender.remote.attach.target.address;
  check(address, 'the dynamic target has no address');
  sender.send({ body: 'through the link' });
  sendAll(other, address, [{ body: 'to its address' }]).then(() => {
    const receiver = conn.open_receiver({ source: address, credit_window: 10 });
    receiver.on('message', (m) => {
      got.push(m.message.body);
      if (got.length === 2) {
        receiver.close(); // first: the queue's deletion would detach it
        receiver.on('receiver_close', () => {
          sender.close();
          sender.on('sender_close', () => done({ address, got }, conn, other));
        });
      }
    });
  });
});
