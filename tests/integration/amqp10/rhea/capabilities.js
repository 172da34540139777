// The capabilities the broker's attach offers, which Qpid JMS checks before it uses the
// feature: DELAYED_DELIVERY to a sender (a delivery delay), SHARED-SUBS to a receiver (a shared
// subscription; rhea sends the `shared` source capability as Qpid JMS does).
'use strict';
const { connect, done } = require('./common');

const conn = connect('rhea-capabilities');
const got = {};
const sender = conn.open_sender({ target: { address: 'rhea-caps' }, desired_capabilities: 'DELAYED_DELIVERY' });
sender.on('sender_open', (ctx) => {
  got.sender = ctx.sender.remote.attach.offered_capabilities;
  const receiver = conn.open_receiver({
    name: 'caps-sub',
    source: { address: 'topic://rhea-caps', capabilities: ['shared'] },
    desired_capabilities: 'SHARED-SUBS',
  });
  receiver.on('receiver_open', (rctx) => {
    got.receiver = rctx.receiver.remote.attach.offered_capabilities;
    done(got, conn);
  });
});
