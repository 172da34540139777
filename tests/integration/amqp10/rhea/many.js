// 100 sends, each settled by the broker with accepted, then 100 receives in order.
'use strict';
const { check, connect, done, sendAll } = require('./common');

const N = 100;
const conn = connect('rhea-many');
const address = 'rhea-many';
const messages = Array.from({ length: N }, (_, i) => ({
  body: `message ${i}`,
  application_properties: { i },
}));
sendAll(conn, address, messages).then((accepted) => {
  const receiver = conn.open_receiver({ source: address, credit_window: 10, autoaccept: false });
  const got = [];
  receiver.on('message', (ctx) => {
    const i = got.length;
    check(ctx.message.body === `message ${i}`, `body ${ctx.message.body} at ${i}`);
    check(ctx.message.application_properties.i === i, `property i at ${i}`);
    got.push(ctx.message.body);
    ctx.delivery.accept();
    if (got.length === N) done({ accepted, received: got.length }, conn);
  });
});
