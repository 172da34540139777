// JMS selectors: a receiver whose source carries rhea's selector filter (the descriptor code
// 0x0000468C00000004) takes only the messages it matches and leaves the others in the queue;
// the broker echoes the filter in its attach, so the client sees it applied.
'use strict';
const { rhea, check, connect, done, sendAll } = require('./common');

const conn = connect('rhea-selectors');
const address = 'rhea-paint';
const items = [['r1', 'red'], ['b1', 'blue'], ['r2', 'red'], ['n1', null]];
const messages = items.map(([body, colour]) => (
  colour === null ? { body } : { body, application_properties: { colour } }
));
sendAll(conn, address, messages).then(() => {
  const receiver = conn.open_receiver({
    source: { address, filter: rhea.filter.selector("colour = 'red'") },
    credit_window: 10,
  });
  const got = [];
  let echoed = null;
  receiver.on('receiver_open', (ctx) => {
    const filter = ctx.receiver.remote.attach.source.filter;
    echoed = filter ? Object.keys(filter) : [];
  });
  receiver.on('message', (ctx) => {
    got.push(ctx.message.body);
    if (got.length === 2) {
      // nothing else matches: a drain comes back with no more messages
      receiver.drain_credit();
    }
  });
  receiver.on('receiver_drained', () => {
    check(got.length === 2, `received ${got}`);
    done({ received: got, echoed }, conn);
  });
});
