// A durable no-local subscription keyed by the container id (Artemis' rule): the subscriber
// (container `rhea-nl`) attaches it and detaches without closing; then another connection of
// the same container publishes, and one of another container; re-attached from a third
// connection of `rhea-nl`, the subscription holds only the other container's message. It
// closes the link at the end (unsubscribe).
'use strict';
const { rhea, check, connect, done, sendAll } = require('./common');

const address = 'topic://rhea-nl-news';
const noLocal = { 'no-local': rhea.types.wrap_described([], 0x468C00000003) };
const source = { address, durable: 2, expiry_policy: 'never', filter: noLocal };

const first = connect('rhea-nl');
const sub = first.open_receiver({ name: 'nl-sub', source, credit_window: 0 });
sub.on('receiver_open', () => sub.detach()); // detached, not closed: the subscription stays
sub.on('receiver_close', () => {
  first.close();
  const same = connect('rhea-nl');
  const other = connect('rhea-nl-other');
  sendAll(same, address, [{ body: 'mine' }])
    .then(() => sendAll(other, address, [{ body: 'theirs' }]))
    .then(() => {
      same.close();
      other.close();
      resume();
    });
});

function resume() {
  const again = connect('rhea-nl');
  const got = [];
  const back = again.open_receiver({ name: 'nl-sub', source, credit_window: 10 });
  back.on('message', (ctx) => {
    got.push(ctx.message.body);
    check(ctx.message.body === 'theirs', `received ${ctx.message.body}`);
    setTimeout(() => back.close(), 200); // anything else would arrive meanwhile
  });
  back.on('receiver_close', () => done({ received: got }, again));
}
