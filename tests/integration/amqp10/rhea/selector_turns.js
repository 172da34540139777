// A selector receiver and a plain receiver on one queue take turns (Artemis' round robin):
// four matching messages sent after both attached go two to each.
'use strict';
const { rhea, connect, done, sendAll } = require('./common');

const conn = connect('rhea-turns');
const address = 'rhea-turns';
const got = { reds: [], plain: [] };
const reds = conn.open_receiver({
  source: { address, filter: rhea.filter.selector("colour = 'red'") }, credit_window: 10,
});
const plain = conn.open_receiver({ source: address, credit_window: 10 });
let opened = 0;
const messages = [0, 1, 2, 3].map((i) => ({
  body: `r${i}`, application_properties: { colour: 'red' },
}));
for (const [name, r] of [['reds', reds], ['plain', plain]]) {
  r.on('receiver_open', () => {
    if (++opened === 2) sendAll(conn, address, messages);
  });
  r.on('message', (ctx) => {
    got[name].push(ctx.message.body);
    if (got.reds.length + got.plain.length === 4) done(got, conn);
  });
}
