// Receiver priority: two receivers of one queue with the link property `priority` (Artemis'
// name; RabbitMQ 4 reads `rabbitmq:priority`): the higher one gets the messages while it has
// credit, the lower one the rest. The low one attaches first (round robin would serve it).
'use strict';
const { connect, done, sendAll } = require('./common');

const conn = connect('rhea-priority');
const address = 'rhea-priority';
const low = conn.open_receiver({ source: address, credit_window: 0, properties: { priority: 1 } });
const got = { low: [], high: [] };
low.on('receiver_open', () => {
  const high = conn.open_receiver({
    source: address, credit_window: 0, properties: { 'rabbitmq:priority': 5 },
  });
  high.on('receiver_open', () => {
    low.add_credit(10);
    high.add_credit(3);
    sendAll(conn, address, [0, 1, 2, 3, 4].map((i) => ({ body: `m${i}` })));
  });
  high.on('message', (ctx) => collect('high', ctx));
});
low.on('message', (ctx) => collect('low', ctx));

function collect(which, ctx) {
  got[which].push(ctx.message.body);
  if (got.low.length + got.high.length === 5) done(got, conn);
}
