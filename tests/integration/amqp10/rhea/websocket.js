// AMQP 1.0 over WebSockets (subprotocol `amqp`, path /ws): take the message pika queued on
// ws-amqp-in, then send one to ws-amqp-out. PORT is the web-amqp listener's.
'use strict';
const WebSocket = require('ws');
const { rhea, port, check, connect, done, sendAll } = require('./common');

const ws = rhea.websocket_connect(WebSocket);
const conn = connect('rhea-websocket', {
  connection_details: ws(`ws://127.0.0.1:${port}/ws`, ['amqp'], {}),
});
const receiver = conn.open_receiver('ws-amqp-in');
receiver.on('message', (ctx) => {
  // pika's body arrives as an AMQP data section (typecode 0x75): rhea hands it over typed
  const raw = ctx.message.body;
  const body = raw && raw.typecode === 0x75 ? raw.content.toString() : raw;
  check(typeof body === 'string', `body ${JSON.stringify(ctx.message.body)}`);
  receiver.close();
  // a data section, which pika reads as the body's bytes (an amqp-value would stay encoded)
  const reply = { body: rhea.message.data_section(Buffer.from('from rhea over websockets')) };
  sendAll(conn, 'ws-amqp-out', [reply]).then(() => {
    done({ body }, conn);
  });
});
