'use strict';
// A push consumer (clustering mode) of --group on --topic with --sub (default "*"). Prints one
// JSON line per message handed to the handler; after --expect distinct msgIds it closes (which
// commits its offsets to the broker) and prints {"closed": true, ...}. With --fail-first N the
// handler throws on the first delivery of the first N messages (they come back through
// %RETRY%<group> after a CONSUMER_SEND_MSG_BACK). With --expect 0 it runs until SIGTERM, then
// closes; {"assigned": [queue ids]} lines follow its rebalances.
const { Consumer } = require('ali-ons');
const { parseArgs, emit, clientOptions } = require('./common');

async function main() {
  const args = parseArgs(process.argv.slice(2), {
    group: 'CG_js_interop', sub: '*', expect: '0', 'fail-first': '0', sign: '1',
    'persist-ms': '1000', 'route-poll-ms': '1000',
  });
  const expect = Number(args.expect);
  let toFail = Number(args['fail-first']);
  const consumer = new Consumer(Object.assign(clientOptions(args), {
    consumerGroup: args.group,
    persistConsumerOffsetInterval: Number(args['persist-ms']),
    rebalanceInterval: 2000,
    // The broker creates %RETRY%<group> at the first heartbeat, after ali-ons first asked for
    // its route: a short route refresh picks it up soon (the default is 30 s).
    pollNameServerInteval: Number(args['route-poll-ms']),
    // The first start of a group: the broker answers QUERY_CONSUMER_OFFSET with 0 while the
    // queue still starts at 0, so CONSUME_FROM_LAST_OFFSET (the default) reads from the start.
  }));
  const seen = new Set();
  let finish;
  const finished = new Promise(resolve => { finish = resolve; });
  consumer.on('error', err => console.error('consumer error', err));
  consumer.subscribe(args.topic, args.sub, async msg => {
    const failing = toFail > 0 && msg.reconsumeTimes === 0;
    emit({
      msgId: msg.msgId, topic: msg.topic, tags: msg.tags || null, keys: msg.keys || null,
      body: msg.body.toString(), queueId: msg.queueId, queueOffset: Number(msg.queueOffset),
      reconsumeTimes: msg.reconsumeTimes, failing,
    });
    if (failing) {
      toFail -= 1;
      throw new Error('failing on purpose (first delivery)');
    }
    seen.add(msg.properties.UNIQ_KEY || msg.msgId);
    if (expect > 0 && seen.size >= expect) {
      finish();
    }
  });
  // After each rebalance that changes this consumer's queues of --topic: {"assigned": [ids]}.
  consumer.on(`topic_${args.topic}_queue_changed`, () => {
    const ids = [ ...consumer.processQueueTable.values() ]
      .filter(x => x.messageQueue.topic === args.topic)
      .map(x => x.messageQueue.queueId)
      .sort((a, b) => a - b);
    emit({ assigned: ids });
  });
  await consumer.ready();
  emit({ ready: true, clientId: consumer._mqClient.clientId });
  if (expect > 0) {
    await finished;
    // The handler has returned; the consumed offset is recorded once the consume loop has
    // taken the message off its process queue: wait for that before closing (close commits).
    while ([ ...consumer.processQueueTable.values() ].some(x => x.processQueue.msgCount > 0)) {
      await new Promise(resolve => setTimeout(resolve, 10));
    }
  } else {
    await new Promise(resolve => process.once('SIGTERM', resolve));
  }
  await consumer.close();
  emit({ closed: true, consumed: seen.size });
}

main().then(() => process.exit(0), err => {
  console.error('consumer failed', err);
  process.exit(1);
});
