// Hello world: one message to a queue and back.
'use strict';
const { check, connect, done, sendAll } = require('./common');

const conn = connect('rhea-hello');
const address = 'rhea-hello';
sendAll(conn, address, [{ body: 'Hello World!' }]).then(() => {
  const receiver = conn.open_receiver(address);
  receiver.on('message', (ctx) => {
    check(ctx.message.body === 'Hello World!', `body ${ctx.message.body}`);
    done({ body: ctx.message.body }, conn);
  });
});
