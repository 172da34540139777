// Request/reply: the client's replies come to a dynamic receiver (a temporary queue), the
// server answers each request by its reply_to through an anonymous-relay sender (null target).
'use strict';
const { check, connect, done } = require('./common');

const requests = 'rhea-requests';
const server = connect('rhea-server');
const relay = server.open_sender({ target: {} });
const incoming = server.open_receiver(requests);
incoming.on('message', (ctx) => {
  const m = ctx.message;
  relay.send({ to: m.reply_to, correlation_id: m.message_id, body: String(m.body).toUpperCase() });
});

const client = connect('rhea-client');
const replies = client.open_receiver({ source: { dynamic: true } });
const asks = ['one', 'two', 'three'];
const answers = [];
let replyTo = null;
replies.on('receiver_open', (ctx) => {
  replyTo = ctx.receiver.source.address;
  check(replyTo, 'the dynamic receiver has no address');
  const sender = client.open_sender(requests);
  sender.on('sendable', () => {
    while (asks.length && sender.sendable()) {
      const body = asks.shift();
      sender.send({ message_id: `id-${body}`, reply_to: replyTo, body });
    }
  });
});
replies.on('message', (ctx) => {
  const m = ctx.message;
  check(m.correlation_id === `id-${m.body.toLowerCase()}`, `correlation ${m.correlation_id}`);
  answers.push(m.body);
  if (answers.length === 3) done({ reply_to: replyTo, answers }, client, server);
});
