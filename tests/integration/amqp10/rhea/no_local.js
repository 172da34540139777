// No-local: a subscriber whose source carries the no-local filter (by its descriptor code, as
// Qpid JMS and Artemis accept it) does not get what its own connection publishes to the topic;
// what another connection publishes it does get. The broker echoes the filter it applied.
'use strict';
const { rhea, check, connect, done, sendAll } = require('./common');

const mine = connect('rhea-nolocal-mine');
const other = connect('rhea-nolocal-other');
const address = 'topic://rhea-news';
const noLocal = { 'no-local': rhea.types.wrap_described([], 0x468C00000003) };
const sub = mine.open_receiver({ source: { address, filter: noLocal }, credit_window: 10 });
const got = [];
let echoed = null;
sub.on('receiver_open', (ctx) => {
  const filter = ctx.receiver.remote.attach.source.filter;
  echoed = filter ? Object.keys(filter) : [];
  // its own message first, then another connection's: only the second arrives
  sendAll(mine, address, [{ body: 'mine' }])
    .then(() => sendAll(other, address, [{ body: 'theirs' }]));
});
sub.on('message', (ctx) => {
  got.push(ctx.message.body);
  check(ctx.message.body === 'theirs', `received ${ctx.message.body}`);
  done({ received: got, echoed }, mine, other);
});
